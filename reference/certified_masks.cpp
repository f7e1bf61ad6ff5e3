// The certified oracle on problems with a mask tensor or a block mask (contract v3, dense): a row's
// visible keys are no longer one range, which the float64 walk (certified.cpp) assumes, so these
// problems take the exact oracle's maths in MPFR at kMaskBits bits and certify each value by a crude
// rigorous bound (docs/error-model.md, "Mask tensors"):
//   |value - exact| <= 2^-52 |value| + E,  E = 2^-kMaskBits 64 N^3 (S + 1)(Q + 1)(K + 1)(V + 1)(G + 1)(c + 1)
// where N = n_k + d + d_v + 8 bounds every chain's length, S the largest |score| (with ALiBi's bias
// and the additive mask), Q, K, V, G the largest finite |q|, |k|, |v|, |d_o| and c = |scale|: every
// MPFR operation rounds once by at most 2^-kMaskBits relative, no chain is longer than N, and every
// intermediate is bounded by those magnitudes (P in [0, 1]). The first term is the rounding to
// double. Non-finite values (the rows a NaN or an infinity reaches) get an infinite error; the exact
// -inf of an empty row's lse an error of 0. Problems are small here (mask laws draw them so).
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/certified.hpp"
#include "reference/exact_mp.hpp"

namespace fc::ref {

namespace {

constexpr unsigned kMaskBits = 256;

double finite_max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double e : x)
    if (std::isfinite(e)) m = std::max(m, std::fabs(e));
  return m;
}

void certify(const std::vector<double>& value, double e, std::vector<double>& err) {
  err.assign(value.size(), 0.0);
  for (size_t x = 0; x < value.size(); ++x) {
    const double v = value[x];
    err[x] = std::isfinite(v) ? 0x1p-52 * std::fabs(v) + e : (v == -std::numeric_limits<double>::infinity() ? 0.0
                                                                                                             : INFINITY);
  }
}

}  // namespace

Certified certified_masked(const Problem& p, const Tensors64& in) {
  detail::PrecisionGuard guard(kMaskBits);
  const detail::TensorsMP t{detail::to_mp(in.q), detail::to_mp(in.k), detail::to_mp(in.v), detail::to_mp(in.d_o),
                            in.seq};
  const detail::ResultMP r = detail::exact_mp(p, t);
  Certified c;
  c.value = Result64{detail::to_double(r.o), detail::to_double(r.lse), detail::to_double(r.d_q),
                     detail::to_double(r.d_k), detail::to_double(r.d_v)};
  const double Q = finite_max_abs(in.q), K = finite_max_abs(in.k), V = finite_max_abs(in.v);
  const double G = finite_max_abs(in.d_o), sc = std::fabs(p.scale);
  double S = sc * double(p.d) * Q * K + finite_max_abs(in.seq.mask);
  if (p.softcap > 0) S = std::min(S, p.softcap);
  if (p.alibi) S += finite_max_abs(in.seq.alibi_slopes) * double(std::max(p.n_q, p.n_k));
  if (p.sinks) S = std::max(S, finite_max_abs(in.seq.sinks));
  const double N = double(p.n_k) + p.d + head_dim_v(p) + 8;
  const double E = std::ldexp(64 * N * N * N * (S + 1) * (Q + 1) * (K + 1) * (V + 1) * (G + 1) * (sc + 1),
                              -int(kMaskBits));
  certify(c.value.o, E, c.err.o);
  certify(c.value.lse, E, c.err.lse);
  certify(c.value.d_q, E, c.err.d_q);
  certify(c.value.d_k, E, c.err.d_k);
  certify(c.value.d_v, E, c.err.d_v);
  c.o_mag.assign(c.value.o.size(), 0.0);  // not computed on this path (a benchmark's scale, not a bound)
  return c;
}

}  // namespace fc::ref
