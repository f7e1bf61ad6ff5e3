// A-priori error bounds (docs/ERROR_MODEL.md, derived in reports/ERROR_MODEL.md): for every output element of
// a kernel, a rigorous first-principles bound on |kernel - exact| computed from the inputs, the
// certified reference and what the kernel declares about its arithmetic. No fudge factors: every
// term is one rounding (or one chain of roundings) of the algorithm, named in bounds.cpp.
//
// Also the comparator that applies a bound (non-finite values handled exactly) and the
// FlashAttention rule (kernel error <= 2 x same-precision baseline error + output rounding noise).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "certified.hpp"

namespace fc::ref {

// What the error model needs to know about how a kernel computes.
struct Precision {
  DType storage = DType::F32;     // q k v o d_o d_q d_k d_v (outputs are rounded to it)
  DType s_dtype = DType::F32;     // S (and dP) rounded to this: the accumulation type for fused kernels,
                                  // the storage type for a 3-pass baseline that materialises S and P
  DType p_dtype = DType::F32;     // P (and dS) rounded to this before the P.V / dS GEMMs
  double u_acc = 0x1p-24;         // error per accumulation step: 2^-24 fp32 round-to-nearest (CPU),
                                  // 2^-23 on tensor cores (truncation, docs/ERROR_MODEL.md); 2^-11 / 2^-10 for fp16
  int64_t block_n = 0;            // kBlockN: keys per tile; 0 = one tile of n_k (untiled)
  bool l_sums_rounded_p = false;  // l sums P after its rounding to p_dtype (a baseline storing P);
                                  // FlashAttention kernels sum the unrounded P
  bool flush_subnormals = false;  // FTZ arithmetic (CUDA's .ftz, ex2.approx.ftz): a result below
                                  // the smallest normal becomes 0, so the underflow floor is that
};

// Unit roundoff of a dtype (2^-p for p significand bits) and half its smallest subnormal (the
// absolute rounding error floor of gradual underflow).
double unit_roundoff(DType t);
double underflow_floor(DType t);
double min_normal(DType t);

// Elementwise bounds on |kernel - exact|, shaped like Result64 (gradients when in.d_o is given).
// The certified reference's own error is included, so a kernel passes iff
// |kernel - ref.value| <= bound everywhere (see within_bound).
struct Bounds {
  std::vector<double> o, lse, d_q, d_k, d_v;
};
Bounds error_bounds(const Problem& p, const Tensors64& in, const Certified& ref, const Precision& prec);

// One tensor held against its reference and bound. Non-finite values are exact: NaN only where the
// reference is NaN, infinities with the reference's sign, an infinite kernel value accepted only
// where reference + bound overflows the output dtype; a NaN bound is a failure, never a skip.
struct Verdict {
  bool ok = true;
  int64_t worst = -1;   // flat index of the largest measured/bound (or of the first failure)
  double measured = 0;  // |kernel - ref| there
  double bound = 0;     // the bound there
  double ratio = 0;     // max measured/bound over the tensor (0/0 counts as 0)
  std::string why;      // empty when ok
};
Verdict within_bound(const std::vector<double>& kernel, const std::vector<double>& ref,
                     const std::vector<double>& bound, DType out);

// FlashAttention's gate on one tensor: max|kernel - ref| <= 2 max|baseline - ref| + noise, with
// noise = FlashAttention's atol (twice the round trip x + 0.3 - 0.3 in the output type, at most
// 4 u (max|x| + 0.3)) plus the reference's own error. Meant for 16-bit storage, as FA uses it.
struct FaRule {
  double kernel_err = 0, baseline_err = 0, noise = 0;
  bool holds = false;
};
FaRule fa_rule(const std::vector<double>& kernel, const std::vector<double>& baseline, const std::vector<double>& ref,
               const std::vector<double>& ref_err, DType out);

}  // namespace fc::ref
