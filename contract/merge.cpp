#include "contract/merge.hpp"

#include <cmath>
#include <string>

namespace fc {

bool well_formed(const MergeProblem& p) {
  return p.partials > 0 && p.rows > 0 && p.heads > 0 && p.d_v > 0 && kernel_float(p.dtype);
}

std::vector<int64_t> shape_merge_o_partial(const MergeProblem& p) { return {p.partials, p.rows, p.heads, p.d_v}; }
std::vector<int64_t> shape_merge_lse_partial(const MergeProblem& p) { return {p.partials, p.heads, p.rows}; }
std::vector<int64_t> shape_merge_o(const MergeProblem& p) { return {p.rows, p.heads, p.d_v}; }
std::vector<int64_t> shape_merge_lse(const MergeProblem& p) { return {p.heads, p.rows}; }

std::string validate(const MergeInputs& in) {
  const MergeProblem& p = in.p;
  if (!well_formed(p)) return "merge problem: sizes must be positive and the dtype " + dtype_names(kernel_float);
  if (in.o.dtype != p.dtype || in.o.shape != shape_merge_o_partial(p) || !in.o.strides_in_bounds())
    return "merge: o must be (partials, rows, heads, d_v) in the problem's dtype, strides inside its storage";
  if (in.lse.dtype != DType::F32 || in.lse.shape != shape_merge_lse_partial(p) || !in.lse.strides_in_bounds())
    return "merge: lse must be F32 (partials, heads, rows), strides inside its storage";
  for (int64_t x = 0; x < in.lse.numel(); ++x) {
    const double y = in.lse.get(x);
    if (std::isnan(y) || y == HUGE_VAL) return "merge: lse must be finite or -inf";
  }
  for (int64_t x = 0; x < in.o.numel(); ++x)
    if (!std::isfinite(in.o.get(x))) return "merge: o must be finite";
  return "";
}

MergeOutputs alloc_merge_outputs(const MergeProblem& p) {
  return {HostTensor(p.dtype, shape_merge_o(p)), HostTensor(DType::F32, shape_merge_lse(p))};
}

std::string describe(const MergeProblem& p) {
  return "P=" + std::to_string(p.partials) + " rows=" + std::to_string(p.rows) + " heads=" + std::to_string(p.heads) +
         " d_v=" + std::to_string(p.d_v) + " " + dtype_name(p.dtype);
}

}  // namespace fc
