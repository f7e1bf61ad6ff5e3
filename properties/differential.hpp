// Differential bounds (docs/error-model.md, "Differential bounds"): how far two runs of one kernel
// may differ when their exact answers coincide and they share part of their arithmetic. The part
// they share cancels in the difference: the certified reference's own error always, the scores'
// dot-product error when both runs compute the same scores, the weights and their rounding when both
// compute the same weights. What is left is charged to each run.
#pragma once

#include <vector>

#include "kernels/registry.hpp"
#include "reference/certified.hpp"

namespace fc::props {

// What the two runs share.
enum class Shared {
  Weights,    // the same weights exp(s_ij - m) and their rounding to P's type: only the order of the
              // sums differs (keys permuted within their tiles)
  Scores,     // the same computed scores s_ij: each run's weights carry their own exponent-argument,
              // exp and rescale errors (another tile size, keys in another order)
  ExactDots,  // nothing, but both runs' dot products q_i.k_j are exact (grid values): each run's weights
              // carry their own rounding of the scaled score too (a shift of the keys)
};

struct ForwardTolerance {
  std::vector<double> o;    // (batch, heads_q, n_q, d)
  std::vector<double> lse;  // (batch, heads_q, n_q)
};

// One run's share of the tolerance on |y_A - y_B| for o and lse (the tolerance is the sum of both
// runs' shares): the errors of kernel k under cfg on `in` that the other run does not share. ref is
// the certified reference of `in` (for magnitudes; its own error cancels).
ForwardTolerance forward_unshared(const Kernel& k, const Inputs& in, const ref::Certified& ref, const Config& cfg,
                                  Shared shared);
// a + b, elementwise (both runs' shares).
ForwardTolerance operator+(const ForwardTolerance& a, const ForwardTolerance& b);

struct GradientTolerance {
  std::vector<double> d_q, d_k, d_v;  // shaped like q, k, v
};

// Tolerance on the gradients of two runs that compute the same terms (dS_ij k_j, dS_ij q_i,
// P_ij d_o_i) and sum them in another order: 2 gamma(N) sum|terms| and both results' rounding.
// The magnitudes come from the inputs and the two runs' own lse and o (a and b: same order).
GradientTolerance gradient_order_difference(const Kernel& k, const Inputs& in, const Config& cfg, const Outputs& a,
                                            const Outputs& b);

}  // namespace fc::props
