// Certified oracle: the exact oracle's maths in float64 with error-free transformations, returning
// each value together with a rigorous bound on its own distance to the exact result. Fast enough for
// one head at N = 4096, d = 128.
#pragma once

#include "oracle.hpp"

namespace fc::ref {

struct Certified {
  Result64 value;             // o, lse (+ d_q, d_k, d_v)
  Result64 err;               // elementwise bound on |value - exact| (same shapes as value)
  std::vector<double> o_mag;  // (batch, heads_q, n_q, d): sum_j P_ij |v_jk|, the scale of o errors
};

Certified certified(const Problem& p, const Tensors64& in);
// Problems with a mask tensor or a block mask (per_key_mask): MPFR values with a crude rigorous
// bound (certified_masks.cpp); certified() calls it for them.
Certified certified_masked(const Problem& p, const Tensors64& in);

}  // namespace fc::ref
