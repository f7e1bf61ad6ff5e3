// Merge-state oracles (docs/SEMANTICS.md, "Merge states"; docs/error-model.md, "Merge states"): the
// exact merge in MPFR and the certified one in fp64 with a rigorous bound on its own error, on inputs
// taken as exact values. Layouts as contract/merge.hpp, compact: o_p (partials, rows, heads, d_v), lse_p
// (partials, heads, rows); the result o (rows, heads, d_v), lse (heads, rows).
#pragma once

#include <cstdint>
#include <vector>

namespace fc::ref {

struct Merge64 {
  int64_t partials = 1, rows = 1, heads = 1, d_v = 1;
  std::vector<double> o;    // (partials, rows, heads, d_v)
  std::vector<double> lse;  // (partials, heads, rows): finite or -inf
};

struct MergeResult64 {
  std::vector<double> o;    // (rows, heads, d_v)
  std::vector<double> lse;  // (heads, rows): -inf for a row whose partials are all empty
};

struct CertifiedMerge {
  MergeResult64 value;
  MergeResult64 err;          // elementwise bound on |value - exact|
  std::vector<double> o_mag;  // (rows, heads, d_v): sum_p a_p |o_p| (a_p = exp(lse_p - lse)), the scale of o errors
  std::vector<double> weight_spread;  // (heads, rows): max_p |lse_p - max lse| over the non-empty partials
};

// lse = log sum_p exp(lse_p), o = sum_p exp(lse_p - lse) o_p, each rounded once to double (bits >= 113).
MergeResult64 exact_merge(const Merge64& in, unsigned bits = 256);
CertifiedMerge certified_merge(const Merge64& in);

}  // namespace fc::ref
