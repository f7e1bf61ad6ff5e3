// The certified oracle's error-free product (Ozaki splitting, certified_gemm.cpp) against exact
// multiprecision dot products: |A·Bᵀ - (hi + lo)| <= bound for every element, on inputs that take
// each path (one dense pair, sparse corrections on either side, several dense pairs, remainders,
// the plain mode) — and the bound is tight enough to see a one-ulp change of hi.
#include "tests/catch.hpp"
#include <Eigen/Core>
#include <cmath>
#include <random>

#include "reference/certified_internal.hpp"
#include "reference/exact_mp.hpp"

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
