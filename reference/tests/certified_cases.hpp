// Cases, scales and the comparator for certified_vs_exact_test: random and extreme inputs (scores
// +-1e4 and beyond, fully masked rows, GQA, both causal alignments, n_q != n_k, fp16/bf16/fp32
// representable values), the natural error scales of docs/error-model.md computed independently of the
// oracle under test, and "is |value - exact| <= err everywhere" with exact non-finite handling.
#pragma once

#include <string>
#include <vector>

#include "reference/oracle.hpp"

namespace fc::ref::testing {

struct CertifiedCase {
  std::string name;
  Problem p;
  Tensors64 in;  // d_o always present
};

std::vector<CertifiedCase> certified_cases();

// One problem's shape (batch, heads, lengths, d), dtype, mask and scale.
Problem shape(int32_t batch, int32_t hq, int32_t hkv, int32_t n_q, int32_t n_k, int32_t d, DType t, Mask m,
              double scale);
// The same with head dim d_v for v, o and d_o, and the default scale 1/sqrt(d).
Problem shape(int32_t batch, int32_t hq, int32_t hkv, int32_t n_q, int32_t n_k, int32_t d, int32_t d_v, DType t,
              Mask m);

// Natural scales, from a plain fp64 evaluation (a scale needs no precision):
//   o_mag  (batch, heads_q, n_q, d): sum_j P_ij |v_jk|;
//   per (batch, kv head) group g, normwise: dq[g] = |scale| |M|_F |K|_F, dk[g] = |scale| |M|_F |Q|_F,
//   dv[g] = |P|_F |dO|_F, with M_ij = P_ij sum_k |d_o_ik| (|v_jk| + o_mag_ik) the absolute-value dS.
struct Scales {
  std::vector<double> o_mag;
  std::vector<double> dq, dk, dv;  // (batch · heads_kv)
};
Scales natural_scales(const Problem& p, const Tensors64& in);

// Index of the first element where |value - exact| <= err fails, or -1 (exact: the MPFR value rounded
// to double, so half its ulp is allowed beside err). NaN in exact must be NaN in
// value; an infinite exact value must be matched exactly; a NaN err is a failure.
long first_violation(const std::vector<double>& value, const std::vector<double>& exact,
                     const std::vector<double>& err);

}  // namespace fc::ref::testing
