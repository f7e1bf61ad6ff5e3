// The certified oracle's error-free product (Ozaki splitting, certified_gemm.cpp) against exact
// multiprecision dot products: |A·Bᵀ - (hi + lo)| <= bound for every element, on inputs that take
// each path (one dense pair, sparse corrections on either side, several dense pairs, remainders,
// the plain mode) — and the bound is tight enough to see a one-ulp change of hi; and the exact
// accumulator of the MPFR path's dot products.
#include "tests/catch.hpp"
#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "reference/certified_internal.hpp"
#include "reference/exact_mp.hpp"
#include "reference/exact_sum.hpp"

namespace fc::ref::cert {
namespace {

using detail::mp;

Mat random_rows(Index rows, Index d, uint64_t seed, int bits, int spread) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist;
  std::uniform_int_distribution<int> ex(-spread, spread);
  Mat a(rows, d);  // (rows, d): values with `bits` significant bits, exponents spread by +-spread
  for (Index i = 0; i < a.size(); ++i) {
    int e = 0;
    const double f = std::frexp(dist(rng), &e);
    a.data()[i] = std::ldexp(std::round(std::ldexp(f, bits)), e - bits + ex(rng));
  }
  return a;
}

// Largest |exact - (hi + lo)| / bound over all elements (inf if a nonzero error has a zero bound).
double worst_ratio(const Mat& a, const Mat& b, const ExactProduct& p) {
  detail::PrecisionGuard guard(256);
  double worst = 0;
  for (Index i = 0; i < a.rows(); ++i)
    for (Index j = 0; j < b.rows(); ++j) {
      mp dot = 0;
      for (Index l = 0; l < a.cols(); ++l) dot += mp(a(i, l)) * mp(b(j, l));
      const mp got = mp(p.hi(i, j)) + mp(p.any_lo ? p.lo_at(i, j) : 0.0);
      const double err = mp(abs(dot - got)).convert_to<double>(), bound = p.bound(i, j);
      if (err > 0) worst = std::max(worst, bound > 0 ? err / bound : INFINITY);
    }
  return worst;
}

TEST_CASE("exact_abt: fp16-like inputs are exact with one dense GEMM plus sparse corrections", "[cpu]") {
  Mat a = random_rows(40, 128, 1, 11, 2), b = random_rows(36, 128, 2, 11, 2);
  a(3, 7) = std::ldexp(a(3, 7), -20);  // a few entries far below their row max: slice 2, sparse
  b(5, 9) = std::ldexp(b(5, 9), -22);
  const ExactProduct p = exact_abt(a, b, 0);
  CHECK(p.any_lo);
  CHECK(p.lo.size() == 0);       // no dense low part: the corrections were sparse
  CHECK(p.lo_rows.rows() >= 1);  // ... on A's side
  CHECK(p.lo_cols.cols() >= 1);  // ... and on B's side
  CHECK(worst_ratio(a, b, p) <= 1);
}

TEST_CASE("exact_abt: fp32-like and spread fp64 inputs take several dense pairs and remainders", "[cpu]") {
  for (auto [bits, spread] : {std::pair{24, 4}, std::pair{53, 30}, std::pair{53, 300}}) {
    INFO("bits " << bits << " spread " << spread);
    const Mat a = random_rows(24, 64, 3 + bits, bits, spread), b = random_rows(20, 64, 5 + bits, bits, spread);
    const ExactProduct p = exact_abt(a, b, 0);
    CHECK(p.lo.size() != 0);
    CHECK(worst_ratio(a, b, p) <= 1);
  }
}

TEST_CASE("exact_abt plain mode: the float32 |A||B| bound covers the fp64 GEMM's error", "[cpu]") {
  const Mat a = random_rows(30, 128, 7, 53, 20), b = random_rows(30, 128, 8, 53, 20);
  const ExactProduct p = exact_abt(a, b, 0, /*allow_plain=*/true);
  REQUIRE(p.abs_f.size() != 0);  // wide inputs: plain mode was chosen
  CHECK_FALSE(p.any_lo);
  CHECK(worst_ratio(a, b, p) <= 1);
}

TEST_CASE("exact_abt: the bound sees a one-ulp change of hi (negative control)", "[cpu]") {
  const Mat a = random_rows(8, 128, 9, 11, 2), b = random_rows(8, 128, 10, 11, 2);
  ExactProduct p = exact_abt(a, b, 0);
  REQUIRE(worst_ratio(a, b, p) <= 1);
  p.hi(2, 3) = std::nextafter(p.hi(2, 3), INFINITY);
  CHECK(worst_ratio(a, b, p) > 1);
}

}  // namespace
}  // namespace fc::ref::cert

// ExactSum (reference/exact_sum.hpp, the MPFR path's dot products) against MPFR adding the same
// doubles at 2200 bits — exact, as every double is a multiple of 2^-1074 below 2^1024 — then rounding
// once: the same bits at 256 and at 53 bits, on terms across the whole double range (subnormals
// included), exact cancellations and sums of zero. One accumulator serves every trial: rounding
// empties it.
namespace fc::ref {
namespace {

TEST_CASE("ExactSum: the exact sum of doubles, rounded once, across the whole double range", "[cpu]") {
  std::mt19937_64 rng(25);
  auto random_double = [&](uint64_t e_lo, uint64_t e_hi) {
    const uint64_t biased = std::uniform_int_distribution<uint64_t>(e_lo, e_hi)(rng);
    return std::bit_cast<double>((rng() & 0x800fffffffffffffull) | (biased << 52));
  };
  ExactSum acc;
  mpz_t z;
  mpz_init(z);
  mpfr_t exact, want, got;
  mpfr_init2(exact, 2200);
  mpfr_inits2(256, want, got, (mpfr_ptr) nullptr);
  int cancelled = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 300)(rng);
    // Biased exponents: the whole range, subnormals and the lowest normals, a band of 100 binades.
    const int kind = trial % 3;
    const uint64_t e_lo = kind == 2 ? 1000 : 0, e_hi = kind == 0 ? 2046 : kind == 1 ? 60 : 1100;
    std::vector<double> x;
    for (int i = 0; i < n; ++i) x.push_back(random_double(e_lo, e_hi));
    if (trial % 5 == 0) {  // every term cancelled by its negative but one small one
      const size_t m = x.size();
      for (size_t i = 0; i < m; ++i) x.push_back(-x[i]);
      x.push_back(random_double(0, 3));
      std::shuffle(x.begin(), x.end(), rng);
      ++cancelled;
    }
    mpfr_set_zero(exact, 1);
    for (double t : x) REQUIRE(mpfr_add_d(exact, exact, t, MPFR_RNDN) == 0);  // exact at 2200 bits
    for (mpfr_prec_t prec : {mpfr_prec_t(256), mpfr_prec_t(53)}) {
      mpfr_set_prec(want, prec), mpfr_set_prec(got, prec);
      mpfr_set(want, exact, MPFR_RNDN);
      for (double t : x) acc.add(t);
      acc.round_into(got, z);
      CAPTURE(trial, n, prec);
      CHECK(mpfr_equal_p(want, got));
    }
  }
  CHECK(cancelled == 600);
  // A zero sum is +0; one subnormal alone is itself.
  acc.add(0x1p971), acc.add(-0x1p971), acc.add(-0.0);
  acc.round_into(got, z);
  CHECK((mpfr_zero_p(got) && mpfr_signbit(got) == 0));
  acc.add(0x1p-1074);
  acc.round_into(got, z);
  CHECK(mpfr_cmp_d(got, 0x1p-1074) == 0);
  // clear() empties it too.
  acc.add(1.0), acc.clear(), acc.add(0.5);
  acc.round_into(got, z);
  CHECK(mpfr_cmp_d(got, 0.5) == 0);
  // Negative control: where fp64 addition loses the answer entirely, the accumulator keeps it.
  double naive = 0;
  for (double t : {0x1p900, 1.0, -0x1p900}) naive += t, acc.add(t);
  acc.round_into(got, z);
  CHECK(naive == 0);
  CHECK(mpfr_cmp_d(got, 1.0) == 0);
  mpfr_clears(exact, want, got, (mpfr_ptr) nullptr);
  mpz_clear(z);
}

}  // namespace
}  // namespace fc::ref
