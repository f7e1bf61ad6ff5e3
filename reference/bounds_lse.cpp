// The error model's o for a kernel that normalises each weight by the lse it computed first
// (Arithmetic::p_from, docs/error-model.md "Weights normalised by the lse"): P^_j = exp(s^_j - lse^)
// and o = sum_j P^_j v_j, with no division by l. Nothing renormalises, so the kernel's lse error
// and the rounding of s^ - lse^ (u |s - lse|: of order u |lse| for a weight near the top, since
// s ~ lse there) enter every weight, and the weights' error scales with |v|, not with |v - o|.
#include <algorithm>
#include <cmath>

#include "bounds_model.hpp"

namespace fc::ref::model {

void HeadPass::lse_normalised(int64_t r, KeyRange vis, const ChainWeights& wpv, int64_t o_pv, double tiny_w,
                              const RowInfo& row) {
  const Problem& p = k.p;
  const Arithmetic& ar = k.ar;
  const int64_t jb = vis.begin, n_v = vis.end - vis.begin, i = i0 + r, oo = offset_o(p, b, h, i);
  const int64_t ol = offset_lse(p, b, h, i), dv = k.dv;
  const double lse = k.ref.value.lse[size_t(ol)];
  // The argument s^ - lse^: the score's error, the kernel's lse error (base 2: lse2 = lse log2 e,
  // a rounded constant and the product), the subtraction's rounding; then the exp's error. As the
  // backward's recomputed P (bounds_backward.cpp), but here it reaches o.
  const double e_lse = row.e_lse + (ar.base2 ? (k.delta_l2e + k.us) * (std::fabs(lse) + row.e_lse) : 0.0);
  // P rounded to the operand type before P V (as declared).
  const double pv_up = k.u_p;
  std::vector<double> w(size_t(dv), 0.0), acc(size_t(dv), 0.0);  // (d_v) the weights' and the chain's terms
  double acc0 = 0;
  for (int64_t j = 0; j < n_v; ++j) {
    const Score& s = sc[size_t(j)];
    if (s.dead) continue;  // a masked key: weight exactly 0, its v not read
    const double e_arg = s.e_hat + e_lse;
    const double delta = e_arg + k.us * (std::fabs(s.s - lse) + e_arg) + k.e_exp;
    // |P^_j - P_j| <= P_j expm1(delta_j) (in the log domain, P_j within zeta of its fp64 value). The
    // kernel's lse is at least its largest score (m + log l, l >= 1, rounded monotonically), so
    // s^ - lse^ <= 0 and P^_j <= exp(0) <= 1 + the exp's error: a huge delta leaves a finite bound.
    const double p_top = 1 + 2 * k.e_exp;
    const double cw = std::min(p_top, p_expm1(logP[size_t(j)] + zeta[size_t(j)], delta));
    const double wh = std::min(p_top, std::exp(logP[size_t(j)] + zeta[size_t(j)] + delta));  // >= P^_j
    const double kap = wpv.kappa[size_t(o_pv + j)];
    const double ca = kap * wh + (1 + kap) * (pv_up * wh + k.floor_p + tiny_w + wh * k.u_in);
    acc0 += (1 + kap) * wh * k.floor_in;
    const double* v = V.data() + (jb + j) * dv;  // (d_v)
    for (int64_t c = 0; c < dv; ++c) w[size_t(c)] += times(cw, std::fabs(v[c])), acc[size_t(c)] += ca * std::fabs(v[c]);
  }
  const double* o = &k.ref.value.o[size_t(oo)];  // (d_v)
  for (int64_t c = 0; c < dv; ++c) {
    const double e = w[size_t(c)] + (acc[size_t(c)] + acc0) * wpv.scale() + wpv.floors() + (k.ftz ? k.floor_s : 0.0);
    const double bound = rounded_bound(o[c], e, err_o[size_t(c)], ar.soft, k.out_o, true) * kSlack;
    double& out = B.o[size_t(oo + c)];
    out = ar.p_from == PFrom::Lse ? bound : std::max(out, bound);
    e_o[size_t(c)] = out;  // |kernel o - exact o|, for D
  }
}

}  // namespace fc::ref::model
