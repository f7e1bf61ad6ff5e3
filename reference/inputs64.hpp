// The bridge from host tensors (contract/tensor.hpp) to the oracles' float64 inputs, for callers that
// hold both (the CLI, the property suite, tests). The oracles themselves never include it: they see
// only Tensors64 (reference/oracle.hpp). Strided tensors are read in their logical order.
#pragma once

#include <utility>
#include <vector>

#include "contract/tensor.hpp"
#include "reference/oracle.hpp"
#include "reference/parallel.hpp"

namespace fc::ref {

inline SeqData seq_data(const Inputs& in) {
  SeqData s;
  auto ints = [](const HostTensor& t) {
    std::vector<int32_t> x(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) x[size_t(i)] = int32_t(t.get(i));
    return x;
  };
  if (in.p.varlen) s.cu_seqlens_q = ints(in.cu_seqlens_q), s.cu_seqlens_k = ints(in.cu_seqlens_k);
  if (in.p.page_size > 0) s.page_table = ints(in.page_table);
  if (in.p.alibi) s.alibi_slopes = in.alibi_slopes.to_f64();
  if (in.p.sinks) s.sinks = in.sinks.to_f64();
  if (in.p.padded)
    s.cu_seqlens_q_padded = ints(in.cu_seqlens_q_padded), s.cu_seqlens_k_padded = ints(in.cu_seqlens_k_padded);
  if (has_mask_tensor(in.p)) s.mask = in.mask.to_f64(), s.mask_shape = in.mask.shape;
  if (has_block_mask(in.p)) s.block_mask = in.block_mask.to_f64(), s.block_mask_shape = in.block_mask.shape;
  return s;
}

inline Tensors64 tensors64(const Inputs& in) {
  Tensors64 t;
  const std::pair<const HostTensor*, std::vector<double>*> x[] = {
      {&in.q, &t.q}, {&in.k, &t.k}, {&in.v, &t.v}, {in.has_d_o() ? &in.d_o : nullptr, &t.d_o}};
  parallel_for(4, [&](int64_t i) {  // each its own: a training shape's tensors are 10^8 values apiece
    if (x[i].first) *x[i].second = x[i].first->to_f64();
  });
  t.seq = seq_data(in);
  return t;
}

}  // namespace fc::ref
