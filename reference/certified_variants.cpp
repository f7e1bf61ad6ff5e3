// The certified forward's score transforms for softcap and ALiBi (certified_internal.hpp).
//
// Softcap, in fp64: y = fl(s/c), t = tanh(y), ŝ = fl(c·t). With Δy >= |y - s/c| (one rounding,
// the neglected low part of s and s's own error over c), |tanh(y) - tanh(s/c)| <= max sech² over
// [|y| - Δy, |y| + Δy] · Δy, where sech²(z) <= 4e^{-2z}: a saturated score costs nothing. glibc's
// tanh is documented within 2 ulp; we charge 4 (kTanhRel). The cap's derivative for the backward,
// ĝ = 4w/(1 + w)² with w = e^{-2|y|}, is sech²(y) without the cancellation of 1 - tanh²; relative
// to sech²(s/c) it is off by exp's 2 ulp, four roundings and e^{2Δy} - 1 (|d ln sech²/dy| <= 2).
// Below sech² ~ e^-690 ĝ is 0 and the true value enters as an absolute bound.
//
// ALiBi: slope·|i' - j| is computed exactly as ph + pl (TwoProd: a 24-bit slope times a distance
// below 2^31), s - ph by TwoSum into the double-double, and the low part takes e - pl with two
// roundings.
#include <cmath>
#include <cstdlib>

#include "reference/certified_internal.hpp"

namespace fc::ref::cert {

namespace {
constexpr double kTanhRel = 0x1p-50;  // 4 ulp of a result below 1: 2^-50 relative
}  // namespace

double cap_row(double c, Index j0, Index j1, double eps, double* s_row, double* sl, double* g_row, double* g_rel,
               double* g_abs) {
  double err = 0;
  *g_rel = 0, *g_abs = 0;
  for (Index j = j0; j < j1; ++j) {
    const double y = s_row[j] / c;
    const double dy = (kU * std::fabs(y) + (std::fabs(sl[j]) + eps) / c) * 1.01;
    const double t = std::tanh(y);
    const double sc = c * t;
    const double z = std::fabs(y) - dy;  // sech² is largest at the smallest |y| in reach
    const double sech2_max = z > 0 ? std::min(1.0, 4 * std::exp(-2 * z) * (1 + 0x1p-40)) : 1.0;
    err = std::max(err, (c * (kTanhRel * std::fabs(t) * 1.01 + sech2_max * dy) + kU * std::fabs(sc)) * kSlack);
    s_row[j] = sc;
    sl[j] = 0;
    if (2 * std::fabs(y) > 690) {  // w would be subnormal: ĝ = 0, g <= sech2_max
      g_row[j] = 0;
      *g_abs = std::max(*g_abs, sech2_max * kSlack);
      continue;
    }
    const double w = std::exp(-2 * std::fabs(y));
    const double one_w = 1 + w;
    g_row[j] = 4 * w / (one_w * one_w);
    *g_rel = std::max(*g_rel, ((kLibmRel + 4 * kU) * 1.01 + 2.02 * dy) * kSlack);
  }
  return err;
}

double bias_row(double slope, Index aligned, Index j0, Index j1, double* s_row, double* sl) {
  double err = 0;
  for (Index j = j0; j < j1; ++j) {
    double ph, pl, s, e;
    two_prod(slope, double(std::labs(long(aligned - j))), ph, pl);  // exact: slope·|i' - j| = ph + pl
    two_sum(s_row[j], -ph, s, e);                                   // exact
    err = std::max(err, 2.01 * kU * (std::fabs(sl[j]) + std::fabs(e) + std::fabs(pl)));
    s_row[j] = s;
    sl[j] = (sl[j] + e) - pl;  // two roundings: err
  }
  return err * kSlack;
}

double mask_row(const double* bias, Index j0, Index j1, double* s_row, double* sl) {
  double err = 0;
  for (Index j = j0; j < j1; ++j) {
    const double b = bias[j];
    if (hidden_score(b)) {
      s_row[j] = b, sl[j] = 0;
      continue;
    }
    if (b == 0) continue;
    double s, e;
    two_sum(s_row[j], b, s, e);  // exact
    err = std::max(err, 2.01 * kU * (std::fabs(sl[j]) + std::fabs(e)));
    s_row[j] = s;
    sl[j] = sl[j] + e;  // one rounding: err
  }
  return err * kSlack;
}

}  // namespace fc::ref::cert
