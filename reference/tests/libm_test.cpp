// The error model's assumptions about glibc (contract/arithmetic.h: declare_glibc_libm), measured
// over the arguments the CPU kernels give the functions: expf / exp of s - m <= 0 (every weight and
// rescale; the backward clamps s - lse at 0) and logf / log of a row sum l in [1, 2^20] (the largest
// weight is exp(0) = 1; at most 2^20 keys). Declared: within 1 ulp, as a relative error of at most
// 2^(1-p) of the exact result (2u); below the smallest normal within that plus half the smallest
// subnormal (the model's underflow floor); exp(0) exactly 1.
// Built twice: libm_test (label cpu) holds a strided sample of every float argument against MPFR;
// libm_long_test (FC_LIBM_EXHAUSTIVE, label long) holds every float argument against glibc's fp64
// exp and log, whose own error it measures against MPFR first and allows for.
#include "tests/catch.hpp"

#include <mpfr.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace {

// |y - f(x)| and |f(x)| from MPFR at 113 bits (the difference of an fp64 y from the exact value is
// exact to 2^-60 of it), rounded outward to double.
struct Err {
  double err, mag;
};
Err mp_err(int (*f)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t), double x, double y) {
  mpfr_t a, b;
  mpfr_init2(a, 113), mpfr_init2(b, 113);
  mpfr_set_d(a, x, MPFR_RNDN);  // exact: x is a double
  f(a, a, MPFR_RNDN);
  mpfr_set_d(b, y, MPFR_RNDN);
  mpfr_sub(b, b, a, MPFR_RNDN);
  const Err e{std::fabs(mpfr_get_d(b, MPFR_RNDA)), std::fabs(mpfr_get_d(a, MPFR_RNDZ))};
  mpfr_clear(a), mpfr_clear(b);
  return e;
}

// The error in units of the model's "ulp": 2^(1-p) of the exact value, after the underflow floor
// (half the smallest subnormal) is taken off.
double model_ulps(Err e, double unit_roundoff, double floor) {
  const double over = std::max(0.0, e.err - floor);
  return over == 0 ? 0.0 : over / (2 * unit_roundoff * e.mag);
}

// Every stride-th float in [a, b] (a, b of one sign), by bit pattern.
template <class F>
void each_float(float a, float b, uint32_t stride, F&& f) {
  uint32_t lo, hi;
  std::memcpy(&lo, &a, 4), std::memcpy(&hi, &b, 4);
  if (lo > hi) std::swap(lo, hi);
  for (uint64_t bits = lo; bits <= hi; bits += stride) {
    float x;
    const uint32_t v = uint32_t(bits);
    std::memcpy(&x, &v, 4);
    f(x);
  }
}

constexpr double kDeclaredUlps = 1;     // declare_glibc_libm
constexpr double kFloor32 = 0x1p-150;   // half fp32's smallest subnormal
constexpr double kFloor64 = 0x1p-1074;  // fp64's smallest subnormal, the model's floor (2^-1075 is no double)

}  // namespace

TEST_CASE("glibc exp(0) is exactly 1", "[cpu]") {
  CHECK(std::exp(0.0f) == 1.0f);
  CHECK(std::exp(-0.0f) == 1.0f);
  CHECK(std::exp(0.0) == 1.0);
  CHECK(std::log(1.0f) == 0.0f);
  CHECK(std::log(1.0) == 0.0);
}

#ifndef FC_LIBM_EXHAUSTIVE

TEST_CASE("glibc expf and logf are within the declared ulp on a sample of every float argument", "[cpu]") {
  double worst_exp = 0, worst_log = 0;
  each_float(-0.0f, -104.0f, 4099, [&](float x) {
    worst_exp = std::max(worst_exp, model_ulps(mp_err(mpfr_exp, x, double(std::exp(x))), 0x1p-24, kFloor32));
  });
  each_float(1.0f, 0x1p20f, 509, [&](float l) {
    worst_log = std::max(worst_log, model_ulps(mp_err(mpfr_log, l, double(std::log(l))), 0x1p-24, 0));
  });
  INFO("largest expf error " << worst_exp << ", logf error " << worst_log << " model ulps");
  CHECK(worst_exp <= kDeclaredUlps);
  CHECK(worst_log <= kDeclaredUlps);
}

TEST_CASE("glibc exp and log (fp64 storage) are within the declared ulp on a sample of their range", "[cpu]") {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> unit(0, 1);
  double worst_exp = 0, worst_log = 0;
  for (int s = 0; s < 50000; ++s) {
    // exp over [-745, 0] log-uniformly in |x| (small arguments matter most), log over [1, 2^20].
    const double x = -std::exp(std::log(1e-12) + unit(rng) * (std::log(745.0) - std::log(1e-12)));
    worst_exp = std::max(worst_exp, model_ulps(mp_err(mpfr_exp, x, std::exp(x)), 0x1p-53, kFloor64));
    const double l = std::exp2(unit(rng) * 20);
    worst_log = std::max(worst_log, model_ulps(mp_err(mpfr_log, l, std::log(l)), 0x1p-53, 0));
  }
  INFO("largest exp error " << worst_exp << ", log error " << worst_log << " model ulps");
  CHECK(worst_exp <= kDeclaredUlps);
  CHECK(worst_log <= kDeclaredUlps);
}

// Softcap's tanh (declare_glibc_libm: tanh_ulps = 2): tanhf at a strided sample of every positive
// float (tanh is odd; past 9 it rounds to 1), tanh (fp64 storage) log-uniformly over [1e-300, 20].
// The model's floor below the normal range is tanh_ulps times twice the underflow floor.
TEST_CASE("glibc tanhf and tanh are within the declared 2 ulp", "[cpu]") {
  constexpr double kTanhUlps = 2;
  double worst_f = 0, worst_d = 0;
  each_float(0x1p-149f, 16.0f, 4099, [&](float x) {
    worst_f = std::max(worst_f, model_ulps(mp_err(mpfr_tanh, x, double(std::tanh(x))), 0x1p-24, 4 * kFloor32));
  });
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int s = 0; s < 50000; ++s) {
    const double x = std::exp(std::log(1e-300) + unit(rng) * (std::log(20.0) - std::log(1e-300)));
    worst_d = std::max(worst_d, model_ulps(mp_err(mpfr_tanh, x, std::tanh(x)), 0x1p-53, 4 * kFloor64));
  }
  INFO("largest tanhf error " << worst_f << ", tanh error " << worst_d << " model ulps");
  CHECK(worst_f <= kTanhUlps);
  CHECK(worst_d <= kTanhUlps);
}

#else

TEST_CASE("glibc expf and logf are within the declared ulp at every float argument", "[cpu][long]") {
  // The fp64 reference first: its error against MPFR on a sample bounds how far it may be from the
  // exact value (relative), and that is allowed for below.
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> unit(0, 1);
  double rel64 = 0;
  for (int s = 0; s < 200000; ++s) {
    const double x = -unit(rng) * 104, l = std::exp2(unit(rng) * 20);
    const Err a = mp_err(mpfr_exp, x, std::exp(x)), b = mp_err(mpfr_log, l, std::log(l));
    rel64 = std::max({rel64, a.err / a.mag, l > 1 ? b.err / b.mag : 0.0});
  }
  REQUIRE(rel64 < 0x1p-50);
  const double slack = 2 * rel64;  // on the reference value and on the exact one it stands for
  double worst_exp = 0, worst_log = 0;
  each_float(-0.0f, -104.0f, 1, [&](float x) {
    const double ref = std::exp(double(x));
    const Err e{std::fabs(double(std::exp(x)) - ref) + slack * ref, ref * (1 - slack)};
    worst_exp = std::max(worst_exp, model_ulps(e, 0x1p-24, kFloor32));
  });
  each_float(0x1.000002p0f, 0x1p20f, 1, [&](float l) {
    const double ref = std::log(double(l));
    const Err e{std::fabs(double(std::log(l)) - ref) + slack * ref, ref * (1 - slack)};
    worst_log = std::max(worst_log, model_ulps(e, 0x1p-24, 0));
  });
  INFO("largest expf error " << worst_exp << ", logf error " << worst_log << " model ulps (fp64 reference within "
                             << rel64 << ")");
  CHECK(worst_exp <= kDeclaredUlps);
  CHECK(worst_log <= kDeclaredUlps);
}

#endif
