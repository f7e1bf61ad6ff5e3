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

// Every variant of the contract, mask tensors and block masks included (a hidden key has weight
// exactly 0; an additive value is one more score transform after ALiBi).
Certified certified(const Problem& p, const Tensors64& in);

}  // namespace fc::ref
