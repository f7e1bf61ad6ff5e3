// The merge-state contract (docs/SEMANTICS.md, "Merge states"): P partial attention results (o_p, lse_p)
// of the same rows, each over a disjoint subset of the keys, merged into the result over their union,
// as FlashInfer's merge_state(s) and FlashAttention's split-KV combine do:
//   lse = log sum_p exp(lse_p),   o = sum_p exp(lse_p - lse) o_p.
// An empty partial is (o_p = 0, lse_p = -inf) and weighs exactly 0; when every partial of a row is
// empty the row is empty: o = 0, lse = -inf (never NaN). Host only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "contract/tensor.hpp"

namespace fc {

// The shapes of one merge: o_p (partials, rows, heads, d_v) in `dtype`, lse_p (partials, heads, rows)
// fp32; the merged o (rows, heads, d_v) in `dtype`, lse (heads, rows) fp32. Rows are tokens (a
// decode step's queries, or a GQA group's query heads packed as rows); lse keeps the attention
// contract's head-major order, o the token-major one, so a kernel that indexes lse like o is caught.
struct MergeProblem {
  int32_t partials = 1;
  int32_t rows = 1;
  int32_t heads = 1;
  int32_t d_v = 1;
  DType dtype = DType::F32;  // F16, BF16 or F32
};

// Positive sizes and a 16- or 32-bit float dtype.
bool well_formed(const MergeProblem& p);

std::vector<int64_t> shape_merge_o_partial(const MergeProblem& p);    // (partials, rows, heads, d_v)
std::vector<int64_t> shape_merge_lse_partial(const MergeProblem& p);  // (partials, heads, rows)
std::vector<int64_t> shape_merge_o(const MergeProblem& p);            // (rows, heads, d_v)
std::vector<int64_t> shape_merge_lse(const MergeProblem& p);          // (heads, rows)

// Logical (row-major) indices of the contract's elements.
inline int64_t merge_o_index(const MergeProblem& p, int64_t part, int64_t r, int64_t h, int64_t c) {
  return ((part * p.rows + r) * p.heads + h) * p.d_v + c;
}
inline int64_t merge_lse_index(const MergeProblem& p, int64_t part, int64_t h, int64_t r) {
  return (part * p.heads + h) * p.rows + r;
}

// The inputs of one merge: o and lse of every partial; either may be a strided view (HostTensor).
// lse values are finite or -inf; an empty partial's o is 0.
struct MergeInputs {
  MergeProblem p;
  HostTensor o;    // shape_merge_o_partial, p.dtype
  HostTensor lse;  // shape_merge_lse_partial, F32
  bool strided() const { return !o.is_compact() || !lse.is_compact(); }
};

struct MergeOutputs {
  HostTensor o;    // shape_merge_o, p.dtype
  HostTensor lse;  // shape_merge_lse, F32
};

// "" when in is consistent (well-formed, dtypes and shapes, strides inside their storage, lse finite or
// -inf, o finite), else one line saying what is wrong.
std::string validate(const MergeInputs& in);
// Compact outputs of the contract's shapes.
MergeOutputs alloc_merge_outputs(const MergeProblem& p);
// One line: "P=3 rows=2 heads=8 d_v=64 F16".
std::string describe(const MergeProblem& p);

}  // namespace fc
