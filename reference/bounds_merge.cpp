// Merge-state bounds: the derivation is docs/error-model.md, "Merge states". Notation: M the row's
// largest lse_p, delta_p = lse_p - M, a_p = exp(lse_p - lse) the exact normalised weights, u the
// fp32 unit roundoff.
#include "reference/bounds_merge.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/bounds.hpp"

namespace fc::ref {
namespace merge_bound {

constexpr double kU = 0x1p-24;
constexpr double kExpLog = 8 * kU;       // exp and log within 4 ulp = 8 u
constexpr double kArg = 3 * kU;          // delta_p: the subtraction, a scaling by log2 e and its constant
constexpr double kTinyW = 0x1p-126;      // a weight's absolute error from underflow (FTZ: the smallest normal)
constexpr double kMagnitude = 1 + 1e-9;  // a_p and |log S| from fp64 values, not exact: a margin

double gamma(double n) { return n * kU < 1 ? n * kU / (1 - n * kU) : std::numeric_limits<double>::infinity(); }

}  // namespace merge_bound

MergeBounds merge_bounds(const Merge64& in, const CertifiedMerge& c, DType storage) {
  using namespace merge_bound;
  MergeBounds b;
  b.o = c.err.o, b.lse = c.err.lse;
  const double u_s = unit_roundoff(storage), floor_s = underflow_floor(storage), P = double(in.partials);
  std::vector<double> e(size_t(in.partials)), ew(size_t(in.partials));
  for (int64_t r = 0; r < in.rows; ++r)
    for (int64_t h = 0; h < in.heads; ++h) {
      const size_t at_l = size_t(h * in.rows + r);
      const double lse = c.value.lse[at_l];
      if (lse == -std::numeric_limits<double>::infinity()) continue;  // every partial empty: exact (0, -inf)
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t q = 0; q < in.partials; ++q) m = std::max(m, in.lse[size_t((q * in.heads + h) * in.rows + r)]);
      // Each weight e_p = exp(delta_p) and the largest distance ew_p of a computed one from it: the
      // argument off by kArg |delta_p|, exp off by kExpLog, underflow off by kTinyW.
      double sum = 0, ew_sum = 0;
      for (int64_t q = 0; q < in.partials; ++q) {
        const double x = in.lse[size_t((q * in.heads + h) * in.rows + r)];
        if (x == -std::numeric_limits<double>::infinity()) {
          e[size_t(q)] = ew[size_t(q)] = 0;
          continue;
        }
        const double delta = x - m;  // <= 0; fp64 rounding of it is covered by kMagnitude
        e[size_t(q)] = std::exp(delta);
        const double hi = std::exp(delta * (1 - kArg)) * (1 + kExpLog),
                     lo = std::exp(delta * (1 + kArg)) * (1 - kExpLog);
        ew[size_t(q)] = (std::max(hi - e[size_t(q)], e[size_t(q)] - lo) + kTinyW) * kMagnitude;
        sum += e[size_t(q)];
        ew_sum += ew[size_t(q)];
      }
      // The computed sum's relative distance r_s from the exact one (sum >= 1: the max weighs exp(0)).
      const double r_s = ((ew_sum / sum + 1) * (1 + gamma(P)) - 1) * kMagnitude;
      const double log_s = std::log(sum) * kMagnitude;
      b.lse[at_l] += (-std::log1p(-r_s) + (kExpLog + 2 * kU) * log_s + 3 * kU * std::fabs(lse)) * kMagnitude;
      for (int64_t col = 0; col < in.d_v; ++col) {
        const size_t at = size_t((r * in.heads + h) * in.d_v + col);
        double err = 0;
        for (int64_t q = 0; q < in.partials; ++q) {
          const double o = std::fabs(in.o[size_t(((q * in.rows + r) * in.heads + h) * in.d_v + col)]);
          // |w'/S' - w/S| <= (ew_p + w_p r_s) / (S (1 - r_s)); the products and adds: gamma(P + 3).
          const double a = e[size_t(q)] / sum, da = (ew[size_t(q)] + e[size_t(q)] * r_s) / (sum * (1 - r_s));
          err += o * (da + gamma(P + 3) * (a + da));
        }
        err *= kMagnitude;
        // The last rounding, to storage: half an ulp of what was computed, or the underflow floor.
        b.o[at] += err + u_s * (std::fabs(c.value.o[at]) + err + c.err.o[at]) + floor_s;
      }
    }
  return b;
}

}  // namespace fc::ref
