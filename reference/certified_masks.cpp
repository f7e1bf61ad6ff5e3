// The certified oracle on problems with a mask tensor or a block mask (contract v3, dense): a row's
// visible keys are no longer one range, which the float64 walk (certified.cpp) assumes, so these
// problems take the exact oracle's maths in MPFR at kMaskBits bits and certify each value by a crude
// rigorous bound (docs/error-model.md, "Mask tensors"): |value - exact| <= 2^-52 |value| + E_t with
//   E_lse = u 64 N (S + 1),            E_o = u 64 N^2 (S + 1)(V + 1),   E_dv = u 64 N^2 (S + 1)(G + 1),
//   E_dq  = u 64 N^3 (S + 1)(G + 1)(V + 1)(c K + 1),   E_dk = the same with Q for K,
// u = 2^-kMaskBits, N = n_q + n_k + d + d_v + 8 (every chain is shorter), S the largest |score| (with
// ALiBi's bias, the additive mask and the sinks), Q, K, V, G the largest finite |q|, |k|, |v|, |d_o|
// and c = |scale|: every MPFR operation rounds once by at most u relative, a weight's argument errs
// by at most u N (S + 1) (relative error of P), and each output sums at most N such terms of the
// magnitudes named. The first term is the rounding to double. The factors are formed in log2 (no
// overflow); a bound past 2^1000 is +inf (no claim). Non-finite values (the rows a NaN or an infinity reaches) get an infinite error; the exact
// -inf of an empty row's lse an error of 0. Problems are small here (mask laws draw them so).
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>

#include <mpfr.h>

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

// 2^(sum of log2 terms - kMaskBits), +inf past 2^1000.
double bound(std::initializer_list<double> factors) {
  double l2 = std::log2(64.0) - double(kMaskBits);
  for (double f : factors) l2 += std::log2(f);
  return l2 > 1000 ? INFINITY : std::exp2(l2) * (1 + 0x1p-40);
}

void certify(const std::vector<double>& value, double e, std::vector<double>& err) {
  err.assign(value.size(), 0.0);
  for (size_t x = 0; x < value.size(); ++x) {
    const double v = value[x];
    err[x] = std::isfinite(v) ? 0x1p-52 * std::fabs(v) + e
                              : (v == -std::numeric_limits<double>::infinity() ? 0.0 : INFINITY);
  }
}

}  // namespace

// Frees this thread's MPFR constant caches (log 2, pi, ...) when the oracle returns: the audit runs it
// on worker threads, whose caches would otherwise outlive them (LeakSanitizer reports them at exit).
struct ThreadCacheRelease {
  ~ThreadCacheRelease() { mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE); }
};

Certified certified_masked(const Problem& p, const Tensors64& in) {
  const ThreadCacheRelease release;  // first declared: runs after every MPFR value below is gone
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
  const double N = double(p.n_q) + p.n_k + p.d + head_dim_v(p) + 8;
  certify(c.value.lse, bound({N, S + 1}), c.err.lse);
  certify(c.value.o, bound({N, N, S + 1, V + 1}), c.err.o);
  certify(c.value.d_v, bound({N, N, S + 1, G + 1}), c.err.d_v);
  certify(c.value.d_q, bound({N, N, N, S + 1, G + 1, V + 1, sc * K + 1}), c.err.d_q);
  certify(c.value.d_k, bound({N, N, N, S + 1, G + 1, V + 1, sc * Q + 1}), c.err.d_k);
  c.o_mag.assign(c.value.o.size(), 0.0);  // not computed on this path (a benchmark's scale, not a bound)
  return c;
}

}  // namespace fc::ref
