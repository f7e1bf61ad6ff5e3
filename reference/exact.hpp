// Exact oracle: textbook attention (docs/SEMANTICS.md) in Boost.Multiprecision with the MPFR backend at a
// chosen precision, rounded to the nearest double once at the end. Slow; small shapes.
#pragma once

#include "oracle.hpp"

namespace fc::ref {

// Forward (o, lse) and, when in.d_o is non-empty, backward (d_q, d_k, d_v). bits >= 113.
Result64 exact(const Problem& p, const Tensors64& in, unsigned bits = 256);

// The softmax row unit: softmax(x) and log-sum-exp(x) of one row, in `bits` of precision (the
// non-finite rules of exact(): -inf weighs 0, +inf or NaN leaves the row NaN, all -inf is empty).
struct SoftmaxRow {
  std::vector<double> p;  // (n,)
  double lse;
};
SoftmaxRow exact_softmax_row(const std::vector<double>& x, unsigned bits = 256);
std::vector<double> exact_softmax(const std::vector<double>& x, unsigned bits = 256);
double exact_lse(const std::vector<double>& x, unsigned bits = 256);

}  // namespace fc::ref
