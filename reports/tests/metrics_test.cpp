// The report's metrics held to values computed by hand (in the comments), not by the code under
// test: ULP spacing and ordinals against IEEE bit patterns, every metric of a 4-element fp16 tensor
// with planted errors, and a tensor of several chunks against a plain scan, serial and threaded.
#include "tests/catch.hpp"
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "reference/parallel.hpp"
#include "reports/metrics.hpp"

using namespace fc;
using namespace fc::report;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
}  // namespace

TEST_CASE("ulp_of is the spacing of the output type at a value", "[cpu]") {
  CHECK(ulp_of(DType::F16, 1.0) == std::ldexp(1, -10));
  CHECK(ulp_of(DType::F16, 1.99) == std::ldexp(1, -10));
  CHECK(ulp_of(DType::F16, -2.0) == std::ldexp(1, -9));
  CHECK(ulp_of(DType::F16, 0.0) == std::ldexp(1, -24));   // fp16's subnormal spacing
  CHECK(ulp_of(DType::F16, 1e-6) == std::ldexp(1, -24));  // below 2^-14: subnormal
  CHECK(ulp_of(DType::F16, 65504.0) == 32.0);             // the largest binade, [2^15, 2^16)
  CHECK(ulp_of(DType::F16, 1e6) == 32.0);                 // beyond the range: the last spacing
  CHECK(ulp_of(DType::BF16, 1.0) == std::ldexp(1, -7));
  CHECK(ulp_of(DType::F32, 1.0) == std::ldexp(1, -23));
  CHECK(ulp_of(DType::F32, 0.0) == std::ldexp(1, -149));
}

TEST_CASE("ordinal numbers the values of a type like their bit patterns", "[cpu]") {
  // For positive values the ordinal is the IEEE encoding read as an integer.
  CHECK(ordinal(DType::F16, 0.0) == 0);
  CHECK(ordinal(DType::F16, std::ldexp(1, -24)) == 1);       // 0x0001
  CHECK(ordinal(DType::F16, std::ldexp(1, -14)) == 0x0400);  // smallest normal
  CHECK(ordinal(DType::F16, 1.0) == 0x3C00);
  CHECK(ordinal(DType::F16, 1.0 + std::ldexp(1, -10)) == 0x3C01);
  CHECK(ordinal(DType::F16, 65504.0) == 0x7BFF);
  CHECK(ordinal(DType::F16, kInf) == 0x7C00);
  CHECK(ordinal(DType::F16, -1.0) == -0x3C00);
  CHECK(ordinal(DType::BF16, 1.0) == 0x3F80);
  CHECK(ordinal(DType::F32, 1.0) == 0x3F800000);
  CHECK(ordinal(DType::F32, std::ldexp(1, -149)) == 1);
  CHECK(ordinal(DType::F64, 1.0) == 0x3FF0000000000000);
}

namespace {
// fp16's value of bit pattern b (sign clear, finite): IEEE binary16 decoded by hand.
double f16_value(uint32_t b) {
  const int e = int(b >> 10), f = int(b & 0x3ff);
  return e == 0 ? std::ldexp(f, -24) : std::ldexp(1024 + f, e - 25);
}
}  // namespace

TEST_CASE("ordinal and ulp_of follow the bit patterns of random values of each type", "[cpu]") {
  // For a positive finite value the ordinal is its bit pattern read as an integer, and the spacing is
  // the distance to the value of the next pattern; here taken from the patterns, not from the code.
  std::mt19937_64 rng(2026);
  struct TypeLine {
    DType t;
    int bits;  // exponent and fraction bits
    uint32_t inf;
  };
  int64_t bad = 0, checked = 0;
  const TypeLine lines[] = {{DType::F16, 15, 0x7c00}, {DType::BF16, 15, 0x7f80}, {DType::F32, 31, 0x7f800000}};
  for (const TypeLine& c : lines) {
    auto value = [&](uint32_t b) {
      if (c.t == DType::F16) return f16_value(b);
      return double(std::bit_cast<float>(c.t == DType::BF16 ? b << 16 : b));
    };
    for (int k = 0; k < 20000; ++k) {
      const uint32_t b = uint32_t(rng()) & ((uint32_t(1) << c.bits) - 1);
      if (b + 1 >= c.inf) continue;  // the largest finite value's spacing: the ulp_of test above
      const double x = value(b), step = value(b + 1) - x;
      bad += ordinal(c.t, x) != int64_t(b) || ordinal(c.t, -x) != -int64_t(b) || ulp_of(c.t, x) != step ||
             ulp_of(c.t, -x) != step;
      ++checked;
    }
    bad += ordinal(c.t, kInf) != int64_t(c.inf) || ordinal(c.t, -kInf) != -int64_t(c.inf);
  }
  CHECK(checked > 50000);
  CHECK(bad == 0);
}

TEST_CASE("histogram bins put each value where the documented edges say", "[cpu]") {
  CHECK(ulp_bin(0) == 0);
  CHECK(ulp_bin(1) == 1);
  CHECK(ulp_bin(2) == 2);
  CHECK(ulp_bin(3) == 3);
  CHECK(ulp_bin(4) == 3);
  CHECK(ulp_bin(5) == 4);
  CHECK(ulp_bin(8) == 4);
  CHECK(ulp_bin(9) == 5);
  CHECK(ulp_bin(int64_t(1) << 20) == 21);
  CHECK(ulp_bin((int64_t(1) << 20) + 1) == 22);
  CHECK(ratio_bin(0.0) == 0);
  CHECK(ratio_bin(1e-6) == 1);  // an edge opens the next bin
  CHECK(ratio_bin(0.999) == 18);
  CHECK(ratio_bin(1.0) == 19);
  CHECK(ratio_bin(10.0) == 22);
  CHECK(ratio_bin(kInf) == 22);
  CHECK(ratio_bin(kNaN) == 22);
  // Everywhere: the index std::upper_bound gives over the edges (kRatioEdges ascend), at each edge and
  // its neighbours, at every power of two, at random magnitudes, and below zero.
  const auto search = [](double r) {
    return int(std::upper_bound(kRatioEdges.begin(), kRatioEdges.end(), r) - kRatioEdges.begin());
  };
  std::vector<double> at = {-kInf, -1.0, -0.0, 0x1p-1074, std::numeric_limits<double>::max()};
  for (const double e : kRatioEdges) at.insert(at.end(), {e, std::nextafter(e, 0.0), std::nextafter(e, kInf), -e});
  for (int e = -1074; e <= 1023; ++e)
    at.insert(at.end(), {std::ldexp(1.0, e), std::nextafter(std::ldexp(1.0, e), 0.0)});
  std::mt19937_64 rng(3);
  for (int k = 0; k < 100000; ++k)
    at.push_back(std::ldexp(std::uniform_real_distribution<double>(1, 2)(rng), int(rng() % 60) - 40));
  for (const double r : at) {
    INFO(r);
    CHECK(ratio_bin(r) == search(r));
  }
}

TEST_CASE("quantile is the lower nearest rank, NaN last", "[cpu]") {
  CHECK(quantile({}, 0.5) == 0);
  CHECK(quantile({4, 1, 3, 2}, 0.5) == 2);   // sorted 1 2 3 4, index floor(0.5 * 3) = 1
  CHECK(quantile({4, 1, 3, 2}, 0.99) == 3);  // index floor(2.97) = 2
  CHECK(quantile({4, 1, 3, 2}, 1.0) == 4);
  CHECK(std::isnan(quantile({kNaN, 1, 2}, 1.0)));
}

namespace {
// An fp16 output of four elements; every value is exact in fp16.
//   ref = 1 + 2^-12, 0.5, -(2 + 2^-9), 0.25       got = 1, 0.5, -2, 0.25 + 2^-12
//   got - ref = -2^-12, 0, +2^-9, +2^-12
const double a = std::ldexp(1, -12), b = std::ldexp(1, -9);
const std::vector<double> want = {1 + a, 0.5, -(2 + b), 0.25};  // ref
const std::vector<double> got = {1, 0.5, -2, 0.25 + a};
const std::vector<double> mag = {2, 1, 4, 0.5};  // o's scale sum_j P|v|
const std::vector<double> bound = {std::ldexp(1, -11), std::ldexp(1, -20), std::ldexp(1, -8), std::ldexp(1, -11)};
}  // namespace

TEST_CASE("measure gives the hand-computed metrics of a planted fp16 error", "[cpu]") {
  const TensorMetrics m = measure(got, want, bound, DType::F16, {Scale::Elementwise, &mag});
  CHECK(m.count == 4);
  CHECK(m.max_abs == b);
  CHECK(m.rmse == std::sqrt((a * a + b * b + a * a) / 4));
  CHECK(m.bias == b / 4);  // (-a + 0 + b + a) / 4
  // scaled: a/2, 0, b/4, a/0.5 -> max is b/4 = 2a/0.5... both 2^-11
  CHECK(m.max_scaled == std::ldexp(1, -11));
  const double ref_sq = (1 + a) * (1 + a) + 0.25 + (2 + b) * (2 + b) + 0.0625;
  CHECK(m.rel_norm == std::sqrt((2 * a * a + b * b) / ref_sq));
  // ULPs of the reference: 1+a: 2^-10 (0.25 ulp), 0.5: 0, 2+b: 2^-9 (1 ulp), 0.25: 2^-12 (1 ulp).
  CHECK(m.ulp_max == 1);
  CHECK(m.ulp_mean == (0.25 + 0 + 1 + 1) / 4);
  // sign(ref) (got - ref): -a, 0, -b (ref < 0, got - ref > 0: toward zero), +a.
  CHECK(m.bias_mag == -b / 4);
  CHECK(m.bias_rel == (-b / 4) / std::sqrt((a * a + b * b + a * a) / 4));
  CHECK(m.ulp_p99 == 1);     // sorted 0 .25 1 1, index floor(0.99 * 3) = 2
  CHECK(m.excess_p99 == 1);  // sorted 0 0 1 1, index 2
  // Steps from ref rounded once: fl16(1+a) = 1 (a is below half an ulp): 0; exact: 0;
  // 2+b is exact in fp16, got = -2 is 1 step away; 0.25 exact, got 1 step away.
  CHECK(m.excess_max == 1);
  CHECK(m.correctly_rounded == 2);
  CHECK(m.ulp_hist[0] == 2);
  CHECK(m.ulp_hist[1] == 2);
  // error / bound: 2^-12 / 2^-11, 0, 2^-9 / 2^-8, 2^-12 / 2^-11 = 0.5, 0, 0.5, 0.5.
  CHECK(m.has_bound);
  CHECK(m.ratio_max == 0.5);
  CHECK(m.ratio_p50 == 0.5);  // sorted 0 .5 .5 .5, index 1
  CHECK(m.ratio_p99 == 0.5);
  CHECK(m.ratio_hist[0] == 1);
  CHECK(m.ratio_hist[18] == 3);  // [0.5, 1)
  CHECK(m.worst == 0);           // the first of the largest ratios
  CHECK(m.worst_got == 1);
  CHECK(m.worst_ref == 1 + a);
  CHECK(m.nonfinite_mismatch == 0);
}

// Whether an element is within its bound is verdict::hold's to say (verdict/tests/verdict_test.cpp).
TEST_CASE("measure gives an element beyond its bound its ratio and names it the worst", "[cpu]") {
  std::vector<double> tight = bound;
  tight[2] = std::ldexp(1, -10);  // error 2^-9 is twice this
  const TensorMetrics m = measure(got, want, tight, DType::F16, {Scale::Elementwise, &mag});
  CHECK(m.ratio_max == 2);
  CHECK(m.worst == 2);
  CHECK(m.ratio_hist[20] == 1);  // 2 opens [2, 5)
}

TEST_CASE("measure counts non-finite agreement and disagreement", "[cpu]") {
  const std::vector<double> r = {1, -kInf, 1, kNaN};
  const std::vector<double> g = {kNaN, -kInf, 1, kNaN};
  const TensorMetrics m = measure(g, r, {1, 1, 1, 1}, DType::F32, {Scale::Absolute});
  CHECK(m.nonfinite_mismatch == 1);
  CHECK(m.nonfinite_match == 2);  // -inf = -inf, NaN where the reference is NaN
  CHECK(m.count == 1);
  const TensorMetrics unbounded = measure(g, r, {}, DType::F32, {Scale::Absolute});
  CHECK_FALSE(unbounded.has_bound);
  CHECK(unbounded.nonfinite_mismatch == 1);
}

TEST_CASE("measure scales by the tensor's largest value, or not at all", "[cpu]") {
  const std::vector<double> r = {2, -4}, g = {2.5, -4};
  CHECK(measure(g, r, {}, DType::F32, {Scale::TensorMax}).max_scaled == 0.125);  // 0.5 / 4
  CHECK(measure(g, r, {}, DType::F32, {Scale::Absolute}).max_scaled == 0.5);
  const std::vector<double> zero_mag = {0, 1};
  CHECK(std::isinf(measure(g, r, {}, DType::F32, {Scale::Elementwise, &zero_mag}).max_scaled));  // x/0
  const std::vector<double> zero_bound = {0, 0};
  const TensorMetrics m = measure(g, r, zero_bound, DType::F32, {Scale::Absolute});
  CHECK(std::isinf(m.ratio_max));                                                  // an error where the bound is 0
  CHECK(measure(r, r, zero_bound, DType::F32, {Scale::Absolute}).ratio_max == 0);  // exact: 0/0 counts as 0
}

// measure() scans chunks of 2^16 elements on the oracle's threads. A tensor of several chunks, with
// non-finite elements, equal worst ratios in two chunks and a NaN bound, gives the same bits serially
// and in parallel, and each count, maximum, quantile and the worst element agree with a plain scan
// written here.
TEST_CASE("measure over many chunks: thread-count independent, and the plain scan's answers", "[cpu]") {
  const size_t n = 3 * (size_t(1) << 16) + 17;
  std::vector<double> got(n), exact(n), bound(n);
  uint64_t x = 12345;
  auto next = [&] { return double((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 11) * 0x1p-53; };
  for (size_t i = 0; i < n; ++i) {
    exact[i] = 4 * next() - 2;
    got[i] = double(float(exact[i] + (next() - 0.5) * 1e-3));  // not a bf16 value: the steps vary widely
    bound[i] = 1e-3;
  }
  got[70000] = kNaN, exact[140000] = kInf, got[140000] = kInf;       // one mismatch, one match
  got[100] = exact[100] + 5e-3, got[150000] = exact[150000] + 5e-3;  // the worst ratio, 5, twice: the first wins
  std::vector<double> with_nan = bound;
  with_nan[160000] = kNaN;  // a NaN bound's ratio is NaN (when the error is not 0): the worst from then on

  for (const std::vector<double>* b : {&bound, &with_nan}) {
    TensorMetrics serial;
    {
      const fc::ref::SerialScope one(true);
      serial = measure(got, exact, *b, DType::BF16, Scale{Scale::TensorMax});
    }
    const TensorMetrics par = measure(got, exact, *b, DType::BF16, Scale{Scale::TensorMax});
    CHECK(std::memcmp(&serial.rmse, &par.rmse, sizeof(double)) == 0);
    CHECK(std::memcmp(&serial.bias_rel, &par.bias_rel, sizeof(double)) == 0);
    CHECK(std::memcmp(&serial.ulp_mean, &par.ulp_mean, sizeof(double)) == 0);
    CHECK(serial.ulp_hist == par.ulp_hist);
    CHECK(serial.ratio_hist == par.ratio_hist);
    CHECK(serial.worst == par.worst);
    CHECK(serial.ratio_p50 == par.ratio_p50);

    // The plain scan.
    int64_t count = 0, mismatch = 0, match = 0, worst = -1;
    double worst_key = -1, max_abs = 0;
    std::vector<double> ratios;
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(got[i]) || !std::isfinite(exact[i])) {
        (got[i] == exact[i] ? match : mismatch)++;
        continue;
      }
      ++count;
      const double ae = std::fabs(got[i] - exact[i]), r = ae == 0 ? 0.0 : ae / (*b)[i];
      max_abs = std::max(max_abs, ae);
      ratios.push_back(r);
      if (r > worst_key || (r != r && worst_key == worst_key)) worst_key = r, worst = int64_t(i);
    }
    CHECK(par.count == count);
    CHECK(par.nonfinite_match == match);
    CHECK(par.nonfinite_mismatch == mismatch);
    CHECK(par.max_abs == max_abs);
    CHECK(par.worst == worst);
    CHECK(par.worst == (b == &bound ? 100 : 160000));
    std::sort(ratios.begin(), ratios.end(), [](double a, double c) { return a < c || (a == a && c != c); });
    const auto at = [&](double q) { return ratios[size_t(std::floor(q * double(ratios.size() - 1)))]; };
    CHECK(par.ratio_p50 == at(0.50));
    CHECK(par.ratio_p90 == at(0.90));
    CHECK(par.ratio_p99 == at(0.99));
  }
}

// measure_outputs reuses one MeasureScratch over a case's tensors: a scratch that held a larger
// tensor's arrays, then a smaller one's, then grows for a larger one again, changes no number.
TEST_CASE("measure with a reused scratch gives the numbers of a fresh one", "[cpu]") {
  uint64_t x = 777;
  auto next = [&] { return double((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 11) * 0x1p-53; };
  auto tensor = [&](size_t n, std::vector<double>& got, std::vector<double>& exact, std::vector<double>& bound) {
    got.resize(n), exact.resize(n), bound.assign(n, 1e-3);
    for (size_t i = 0; i < n; ++i) {
      exact[i] = 4 * next() - 2;
      got[i] = double(float(exact[i] + (next() - 0.5) * 1e-3));
    }
  };
  MeasureScratch scratch;
  for (const size_t n : {size_t(200000), size_t(70000), size_t(300001)}) {
    std::vector<double> got, exact, bound;
    tensor(n, got, exact, bound);
    for (const bool bounded : {true, false}) {  // (without a bound the ratios' array is not taken)
      const std::vector<double> b = bounded ? bound : std::vector<double>{};
      const TensorMetrics fresh = measure(got, exact, b, DType::BF16, Scale{Scale::TensorMax});
      const TensorMetrics reused = measure(got, exact, b, DType::BF16, Scale{Scale::TensorMax}, &scratch);
      CHECK(std::memcmp(&fresh.rmse, &reused.rmse, sizeof(double)) == 0);
      CHECK(fresh.ulp_p99 == reused.ulp_p99);
      CHECK(fresh.excess_p99 == reused.excess_p99);
      CHECK(fresh.ratio_p50 == reused.ratio_p50);
      CHECK(fresh.ratio_p90 == reused.ratio_p90);
      CHECK(fresh.ratio_p99 == reused.ratio_p99);
      CHECK(fresh.ulp_hist == reused.ulp_hist);
      CHECK(fresh.worst == reused.worst);
      CHECK(fresh.count == int64_t(n));
    }
  }
}

TEST_CASE("quantiles_parallel gives nth_element's quantiles, with any thread count", "[cpu]") {
  // Three arrays past the direct path (n / threads / 8 candidates, at least 2^16): spread values;
  // values bunched in one bucket of it (a second histogram); and mostly exact zeros with NaNs and
  // infinities (every bit decided, no candidates gathered). And a small one, gathered at once; and
  // small integers.
  std::mt19937_64 rng(25);
  std::normal_distribution<double> normal;
  std::vector<std::vector<double>> arrays(5);
  for (int k = 0; k < 6'000'000; ++k)
    arrays[0].push_back(std::fabs(normal(rng)) * std::ldexp(1.0, int(rng() % 40) - 20));
  for (int k = 0; k < 6'000'000; ++k) arrays[1].push_back(1.0 + std::ldexp(double(rng() % 5000), -30));
  for (int k = 0; k < 6'000'000; ++k) {
    const uint64_t r = rng() % 100;
    arrays[2].push_back(r < 80 ? 0.0 : r < 85 ? kNaN : r < 87 ? kInf : r < 90 ? -1.5 : double(r));
  }
  for (int k = 0; k < 1000; ++k) arrays[3].push_back(k % 7 == 0 ? kNaN : normal(rng));
  // Small integers, as measure's ULP steps: the median's bucket (1.0) past the direct path, all one
  // value (decided by the second histogram's least and greatest key, with no more passes).
  for (int k = 0; k < 6'000'000; ++k) {
    const uint64_t r = rng() % 100;
    arrays[4].push_back(r < 20 ? 0.0 : r < 95 ? 1.0 : r < 99 ? 2.0 : 7.0);
  }
  const std::vector<double> qs = {0.99, 0.9, 0.5, 0.0, 1.0, 0.83};
  for (size_t a = 0; a < arrays.size(); ++a) {
    const std::vector<double>& x = arrays[a];
    const std::vector<double> threaded = quantiles_parallel(x.data(), x.size(), qs);
    std::vector<double> serial;
    {
      const fc::ref::SerialScope one(true);
      serial = quantiles_parallel(x.data(), x.size(), qs);
    }
    for (size_t q = 0; q < qs.size(); ++q) {
      INFO("array " << a << " q " << qs[q]);
      const double want = quantile(x, qs[q]);  // nth_element over a copy
      const auto same = [&](double v) { return std::isnan(want) ? std::isnan(v) : v == want; };
      CHECK(same(threaded[q]));
      CHECK(same(serial[q]));
    }
  }
  CHECK(quantiles_parallel(nullptr, 0, {0.5}) == std::vector<double>{0.0});
}
