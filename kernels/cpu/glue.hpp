// Checks between host tensors and the typed kernel templates (internal to kernels/cpu). Inconsistent
// inputs or outputs of the wrong dtype or shape are a caller error: std::invalid_argument, never a
// bad read.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "contract/tensor.hpp"

namespace fc::cpu {

inline void expect(const HostTensor& t, DType dtype, const std::vector<int64_t>& shape, const char* what) {
  if (t.dtype != dtype || t.shape != shape || !t.strides_in_bounds())
    throw std::invalid_argument(std::string("cpu kernel: tensor ") + what + " has the wrong dtype, shape or strides");
}

inline void expect_lse(const HostTensor& lse, const Problem& p) {
  if ((lse.dtype != DType::F32 && lse.dtype != DType::F64) || lse.shape != shape_lse(p) || !lse.strides_in_bounds())
    throw std::invalid_argument("cpu kernel: lse must be F32 (or F64) shaped like shape_lse");
}

inline void expect_forward(const Inputs& in, const Outputs& out) {
  if (std::string e = validate(in); !e.empty()) throw std::invalid_argument("cpu kernel: inputs: " + e);
  expect(out.o, in.p.dtype, shape_o(in.p), "o");
  expect_lse(out.lse, in.p);
}

inline void expect_backward(const Inputs& in, const Outputs& out) {
  expect_forward(in, out);
  if (!in.has_d_o()) throw std::invalid_argument("cpu kernel: backward needs d_o");
  expect(out.d_q, in.p.dtype, shape_q(in.p), "d_q");
  expect(out.d_k, in.p.dtype, shape_kv(in.p), "d_k");
  expect(out.d_v, in.p.dtype, shape_v(in.p), "d_v");
}

}  // namespace fc::cpu
