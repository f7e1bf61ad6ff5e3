// The merge-state oracles (reference/merge.hpp); the certified one's bound is derived in
// docs/error-model.md, "Merge states".
#include "reference/merge.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/exact_mp.hpp"

namespace fc::ref {
namespace merge_oracle {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kU = 0x1p-53;                // fp64 unit roundoff
constexpr double kExpU = 4 * kU;              // glibc's exp and log: below 1 ulp; charged 2 ulp = 4 u
constexpr double kDropArg = -700;             // exp arguments below this: the weight is taken as 0 ...
constexpr double kDroppedWeight = 0x1p-1008;  // ... an error of at most exp(-700) < 2^-1008 each
constexpr double kSlack = 1 + 0x1p-40;        // the bound's own fp64 evaluation (a few dozen roundings)

double gamma(double n) { return n * kU / (1 - n * kU); }

int64_t o_at(const Merge64& in, int64_t q, int64_t r, int64_t h, int64_t c) {
  return ((q * in.rows + r) * in.heads + h) * in.d_v + c;
}
int64_t lse_at(const Merge64& in, int64_t q, int64_t h, int64_t r) { return (q * in.heads + h) * in.rows + r; }

}  // namespace merge_oracle

MergeResult64 exact_merge(const Merge64& in, unsigned bits) {
  using namespace merge_oracle;
  using detail::mp;
  detail::PrecisionGuard guard(bits);
  MergeResult64 out;
  out.o.assign(size_t(in.rows * in.heads * in.d_v), 0.0);
  out.lse.assign(size_t(in.heads * in.rows), -kInf);
  for (int64_t r = 0; r < in.rows; ++r)
    for (int64_t h = 0; h < in.heads; ++h) {
      double m = -kInf;
      for (int64_t q = 0; q < in.partials; ++q) m = std::max(m, in.lse[size_t(lse_at(in, q, h, r))]);
      if (m == -kInf) continue;  // every partial empty: o = 0, lse = -inf
      std::vector<mp> w(size_t(in.partials));
      mp sum = 0;
      for (int64_t q = 0; q < in.partials; ++q) {
        const double x = in.lse[size_t(lse_at(in, q, h, r))];
        w[size_t(q)] = x == -kInf ? mp(0) : mp(exp(mp(x) - mp(m)));
        sum += w[size_t(q)];
      }
      out.lse[size_t(h * in.rows + r)] = double(mp(mp(m) + log(sum)));
      for (int64_t c = 0; c < in.d_v; ++c) {
        mp acc = 0;
        for (int64_t q = 0; q < in.partials; ++q) acc += w[size_t(q)] * mp(in.o[size_t(o_at(in, q, r, h, c))]);
        out.o[size_t((r * in.heads + h) * in.d_v + c)] = double(mp(acc / sum));
      }
    }
  return out;
}

CertifiedMerge certified_merge(const Merge64& in) {
  using namespace merge_oracle;
  CertifiedMerge out;
  const size_t n_o = size_t(in.rows * in.heads * in.d_v), n_l = size_t(in.heads * in.rows);
  out.value.o.assign(n_o, 0.0), out.err.o.assign(n_o, 0.0), out.o_mag.assign(n_o, 0.0);
  out.value.lse.assign(n_l, -kInf), out.err.lse.assign(n_l, 0.0), out.weight_spread.assign(n_l, 0.0);
  const double P = double(in.partials);
  std::vector<double> w(size_t(in.partials)), eta(size_t(in.partials));
  for (int64_t r = 0; r < in.rows; ++r)
    for (int64_t h = 0; h < in.heads; ++h) {
      const size_t at_l = size_t(h * in.rows + r);
      double m = -kInf;
      for (int64_t q = 0; q < in.partials; ++q) m = std::max(m, in.lse[size_t(lse_at(in, q, h, r))]);
      if (m == -kInf) continue;  // exact: o = 0, lse = -inf
      // Weights e_p = exp(lse_p - m): the argument rounds once (u |delta|), exp within 2 ulp; each
      // weight's absolute error is eta_p (plus kDroppedWeight for a dropped one).
      double sum = 0, e_s = 0, spread = 0;
      for (int64_t q = 0; q < in.partials; ++q) {
        const double x = in.lse[size_t(lse_at(in, q, h, r))];
        const double delta = x == -kInf ? -kInf : x - m;
        if (x != -kInf) spread = std::max(spread, std::fabs(delta));
        if (!(delta >= kDropArg)) {
          w[size_t(q)] = 0, eta[size_t(q)] = x == -kInf ? 0.0 : kDroppedWeight;
        } else {
          w[size_t(q)] = std::exp(delta);
          eta[size_t(q)] = w[size_t(q)] * (kExpU + 1.01 * kU * std::fabs(delta)) * kSlack;
        }
        sum += w[size_t(q)];
        e_s += eta[size_t(q)];
      }
      out.weight_spread[at_l] = spread;
      e_s = (e_s + gamma(P) * sum) * kSlack;  // |sum - exact sum|: the weights' errors and P - 1 adds
      const double r_s = e_s / (sum - e_s);   // relative; sum >= 1 - 4u (the max's weight is exp(0))
      const double log_s = std::log(sum), lse = m + log_s;
      out.value.lse[at_l] = lse;
      out.err.lse[at_l] = (-std::log1p(-r_s) + kExpU * std::fabs(log_s) + kU * std::fabs(lse)) * kSlack;
      for (int64_t c = 0; c < in.d_v; ++c) {
        double acc = 0, mag = 0, e_n = 0;
        for (int64_t q = 0; q < in.partials; ++q) {
          const double o = in.o[size_t(o_at(in, q, r, h, c))];
          acc += w[size_t(q)] * o;
          mag += w[size_t(q)] * std::fabs(o);
          e_n += eta[size_t(q)] * std::fabs(o);
        }
        e_n = (e_n + gamma(P + 1) * mag) * kSlack;  // products and adds of the numerator
        const size_t at = size_t((r * in.heads + h) * in.d_v + c);
        const double o = acc / sum;
        out.value.o[at] = o;
        out.o_mag[at] = mag / sum;
        // |N'/S' - N/S| <= (|N' - N| + |N/S| |S' - S|) / S, S >= S' - e_s, |N/S| <= (mag + e_n) / (S' - e_s).
        const double low = sum - e_s;
        out.err.o[at] = ((e_n + (mag + e_n) / low * e_s) / low + kU * std::fabs(o)) * kSlack;
      }
    }
  return out;
}

}  // namespace fc::ref
