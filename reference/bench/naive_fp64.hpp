// Plain fp64 attention with Eigen, the yardstick of certified_bench: S = QKᵀ (Eigen GEMM), row
// softmax, O = PV; backward dP = dO·Vᵀ, dS = P∘(dP - D), dQ = scale·dS·K, dK = scale·dSᵀ·Q,
// dV = Pᵀ·dO. One head, no mask. No error control at all: what "naive" costs.
#pragma once

#include <Eigen/Core>

#include "reference/matrix.hpp"

namespace fc::ref::bench {

struct NaiveOut {
  Mat o;                // (n, d)
  Eigen::VectorXd lse;  // (n)
  Mat d_q, d_k, d_v;    // (n, d)
};

NaiveOut naive_fp64(const Mat& q, const Mat& k, const Mat& v, const Mat& d_o, double scale);

}  // namespace fc::ref::bench
