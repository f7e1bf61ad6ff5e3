// Checks and conversions between host tensors and the typed kernel templates (internal to
// kernels/cpu). A wrong dtype or shape is a caller error: std::invalid_argument, never a bad read.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"

namespace fc::cpu {

inline void expect(const HostTensor& t, DType dtype, const std::vector<int64_t>& shape, const char* what) {
  if (t.dtype != dtype || t.shape != shape)
    throw std::invalid_argument(std::string("cpu kernel: tensor ") + what + " has the wrong dtype or shape");
}

inline void expect_lse(const HostTensor& lse, const Problem& p) {
  if ((lse.dtype != DType::F32 && lse.dtype != DType::F64) || lse.shape != shape_lse(p))
    throw std::invalid_argument("cpu kernel: lse must be F32 (or F64) shaped (batch, heads_q, n_q)");
}

inline void expect_forward(const Problem& p, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                           const HostTensor& o, const HostTensor& lse) {
  if (!well_formed(p)) throw std::invalid_argument("cpu kernel: malformed problem");
  expect(q, p.dtype, shape_q(p), "q");
  expect(k, p.dtype, shape_kv(p), "k");
  expect(v, p.dtype, shape_kv(p), "v");
  expect(o, p.dtype, shape_q(p), "o");
  expect_lse(lse, p);
}

inline void expect_backward(const Problem& p, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                            const HostTensor& o, const HostTensor& lse, const HostTensor& d_o, const HostTensor& d_q,
                            const HostTensor& d_k, const HostTensor& d_v) {
  expect_forward(p, q, k, v, o, lse);
  expect(d_o, p.dtype, shape_q(p), "d_o");
  expect(d_q, p.dtype, shape_q(p), "d_q");
  expect(d_k, p.dtype, shape_kv(p), "d_k");
  expect(d_v, p.dtype, shape_kv(p), "d_v");
}

// lse as the templates see it: (batch, heads_q, n_q) doubles, -inf for empty rows.
inline std::vector<double> lse_values(const HostTensor& lse) { return lse.to_f64(); }
inline void store_lse(HostTensor& lse, const std::vector<double>& x) {
  for (int64_t i = 0; i < lse.numel(); ++i) lse.set(i, x[size_t(i)]);  // F32: the L value is a float
}

}  // namespace fc::cpu
