// The certified forward's MPFR path (certified_internal.hpp, mp_row): rows whose double-double
// scores are too coarse for the exponentials (huge scores: the low-part terms grow like u^2 |s|,
// 1e-12 at |s| = 1e18; huge ALiBi biases; a softcap so large that fp64's tanh costs more than
// 2^-30) get their scores again in MPFR at kMpBits bits, softcap and bias included, and
// x_j = s_j - s_max there, before rounding x_j to xh + xl. Every MPFR operation rounds once with
// relative error <= 2^-kMpBits (no underflow or overflow in MPFR's exponent range).
#include <mpfr.h>

#include <bit>
#include <cmath>
#include <cstdlib>

#include "reference/certified_internal.hpp"
#include "reference/exact_sum.hpp"

namespace fc::ref::cert {

namespace {

constexpr mpfr_prec_t kMpBits = 256;
const double kMpUnit = std::ldexp(1.0, -int(kMpBits));

class Mp {
 public:
  Mp() { mpfr_init2(x_, kMpBits); }
  ~Mp() { mpfr_clear(x_); }
  Mp(const Mp&) = delete;
  Mp& operator=(const Mp&) = delete;
  mpfr_ptr get() { return x_; }

 private:
  mpfr_t x_;
};

// |x| rounded up to a double (an upper bound on the magnitude of an MPFR value).
double mag_up(mpfr_srcptr x) { return std::fabs(mpfr_get_d(x, MPFR_RNDA)); }

class Mpz {
 public:
  Mpz() { mpz_init(x_); }
  ~Mpz() { mpz_clear(x_); }
  Mpz(const Mpz&) = delete;
  Mpz& operator=(const Mpz&) = delete;
  mpz_ptr get() { return x_; }

 private:
  mpz_t x_;
};

// q·k (length d) exactly into acc, and sum_l |q_l k_l| (rounded) into abs_sum: each product is
// h + e exactly (TwoProd; e = 0 without the fma where both factors have at most 26 significant bits,
// as every fp32, fp16 and bf16 value does). False, with acc emptied, where a product is nonzero
// below 2^-968: there its low part may fall below the subnormal range and TwoProd is no longer exact.
bool exact_dot(const double* q, const double* k, Index d, ExactSum& acc, double& abs_sum) {
  constexpr uint64_t kLow27 = (uint64_t(1) << 27) - 1;
  for (Index l = 0; l < d; ++l) {
    const double a = q[l], b = k[l];
    abs_sum += std::fabs(a) * std::fabs(b);  // < 2^1001: finite
    if (a == 0 || b == 0) continue;
    const double h = a * b;
    if (!(std::fabs(h) >= 0x1p-968)) {
      acc.clear();
      return false;
    }
    acc.add(h);
    if (((std::bit_cast<uint64_t>(a) | std::bit_cast<uint64_t>(b)) & kLow27) != 0) acc.add(std::fma(a, b, -h));
  }
  return true;
}

}  // namespace

// Error of s_j = scale·sum_l q_l k_l: the dot product rounds once (exact_dot), or where a product
// underflows its d products and d - 1 sums each round once; then the scale product once. So
// |s_j - ŝ_j| <= gamma_mp(2d + 1) |scale| sum_l |q_l k_l| with gamma_mp(n) <= 2n·2^-kMpBits.
// Softcap c·tanh(s/c): the cap's derivative is at most 1, so s_j's error passes through unscaled,
// and the three roundings (s/c, tanh, times c) add <= 3·2^-kMpBits·c (|y| sech²(y) <= 1 and
// |tanh| <= 1). ALiBi: slope·|i' - j| is exact (24 + 31 bits), the subtraction one rounding; an
// additive mask value (exact) one more rounding. A hidden key (mask tensor, block mask) gets
// xh = -inf, xl = 0, no error, and takes no part in s_max (the row has a visible key: gather).
double mp_row(const GroupIn& g, Index r, double* xh, double* xl, double* err_x, double* mx_err) {
  const Index d = g.q.cols(), j0 = g.first[size_t(r)], j1 = g.key_end(r);
  std::vector<Mp> s(static_cast<size_t>(j1 - j0));
  std::vector<double> err_s(static_cast<size_t>(j1 - j0));
  Mp t, mx;
  ExactSum acc;
  Mpz z;
  const double gam_mp = 2.0 * double(2 * d + 4) * kMpUnit;
  const double cap = g.softcap;
  Index arg = -1;  // offset of the largest score in [j0, j1)
  auto hidden = [&](Index j) { return g.bias.size() && hidden_score(g.bias(r, j)); };
  for (Index j = j0; j < j1; ++j) {
    if (hidden(j)) continue;
    mpfr_ptr sj = s[size_t(j - j0)].get();
    double abs_sum = 0;  // sum_l |q_l k_l|, rounded: enlarged by (1 + 2 gamma(d + 1)) below
    if (exact_dot(&g.q(r, 0), &g.k(j, 0), d, acc, abs_sum)) {
      acc.round_into(sj, z.get());  // one rounding
    } else {  // a product's low part would be subnormal: each term in MPFR (2d roundings)
      mpfr_set_zero(sj, 1);
      abs_sum = 0;
      for (Index l = 0; l < d; ++l) {
        mpfr_set_d(t.get(), g.q(r, l), MPFR_RNDN);  // exact
        mpfr_mul_d(t.get(), t.get(), g.k(j, l), MPFR_RNDN);
        mpfr_add(sj, sj, t.get(), MPFR_RNDN);
        abs_sum += std::fabs(g.q(r, l)) * std::fabs(g.k(j, l));  // < 2^1001: finite
      }
    }
    mpfr_mul_d(sj, sj, g.scale, MPFR_RNDN);
    // abs_sum's own products may underflow: + d·2^-1074 before enlarging.
    double e = gam_mp * std::fabs(g.scale) * (abs_sum + double(d) * 0x1p-1074) * (1 + 2 * gamma(double(d + 1)));
    if (cap > 0) {
      mpfr_div_d(sj, sj, cap, MPFR_RNDN);
      mpfr_tanh(sj, sj, MPFR_RNDN);
      mpfr_mul_d(sj, sj, cap, MPFR_RNDN);
      e += 3.01 * kMpUnit * cap;
    }
    if (!g.slope.empty()) {
      mpfr_set_d(t.get(), g.slope[size_t(r)], MPFR_RNDN);                                         // exact
      mpfr_mul_si(t.get(), t.get(), long(std::labs(long(g.aligned[size_t(r)] - j))), MPFR_RNDN);  // exact
      mpfr_sub(sj, sj, t.get(), MPFR_RNDN);
      e += 1.01 * kMpUnit * mag_up(sj);
    }
    if (g.bias.size() && g.bias(r, j) != 0) {
      mpfr_add_d(sj, sj, g.bias(r, j), MPFR_RNDN);
      e += 1.01 * kMpUnit * mag_up(sj);
    }
    err_s[size_t(j - j0)] = e;
    if (arg < 0 || mpfr_cmp(sj, s[size_t(arg)].get()) > 0) arg = j - j0;
  }
  if (arg < 0) {  // no visible key (gather makes such a row empty before it gets here)
    for (Index j = j0; j < j1; ++j) xh[j] = -INFINITY, xl[j] = 0, err_x[j] = 0;
    *mx_err = 0;
    return -INFINITY;
  }
  mpfr_set(mx.get(), s[size_t(arg)].get(), MPFR_RNDN);  // exact (same precision)
  const double mx_d = mpfr_get_d(mx.get(), MPFR_RNDN);
  // |s_max - round(s_max)| <= u |round(s_max)| (or 0 when it is exact); inf if it overflowed.
  *mx_err = kU * std::fabs(mx_d);
  for (Index j = j0; j < j1; ++j) {
    if (hidden(j)) {
      xh[j] = -INFINITY, xl[j] = 0, err_x[j] = 0;
      continue;
    }
    mpfr_sub(t.get(), s[size_t(j - j0)].get(), mx.get(), MPFR_RNDN);  // x_j: one rounding
    const double h = mpfr_get_d(t.get(), MPFR_RNDN);
    const double ax = std::fabs(h) * (1 + 2 * kU) + 0x1p-1074;  // >= |x_j| up to 2^-kMpBits
    mpfr_sub_d(t.get(), t.get(), h, MPFR_RNDN);                 // rest: one rounding
    const double lo = mpfr_get_d(t.get(), MPFR_RNDN);           // |error| <= u|lo| + 2^-1074
    xh[j] = h;
    xl[j] = lo;
    // Errors of s_j and s_max, the two MPFR roundings (relative to |x_j|), and lo's rounding
    // (charged in forward's delta as kU·xl_max, plus the subnormal floor here).
    err_x[j] = err_s[size_t(j - j0)] + err_s[size_t(arg)] + 4 * kMpUnit * ax + 0x1p-1073;
  }
  return mx_d;
}

}  // namespace fc::ref::cert
