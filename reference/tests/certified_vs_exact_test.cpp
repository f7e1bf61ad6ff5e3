// The certified oracle against the exact one at 256 bits: every element within its bound, the bounds
// meeting the 1e-13 targets (so they are not vacuous), and the comparator's own negative controls.
#include "tests/catch.hpp"
#include <cmath>
#include <limits>
#include <tuple>

#include "certified_cases.hpp"
#include "reference/certified.hpp"
#include "reference/exact.hpp"

namespace fc::ref {
namespace {

using testing::first_violation;

constexpr double kTarget = 1e-13;  // the certified oracle's stated target for o (relative to o_mag) and gradients (normwise)

struct OracleRun {
  testing::CertifiedCase c;
  Result64 ex;
  Certified ce;
};

const std::vector<OracleRun>& runs() {
  static const std::vector<OracleRun> r = [] {
    std::vector<OracleRun> out;
    for (auto& c : testing::certified_cases()) {
      Result64 ex = exact(c.p, c.in, 256);
      Certified ce = certified(c.p, c.in);
      out.push_back({std::move(c), std::move(ex), std::move(ce)});
    }
    return out;
  }();
  return r;
}

TEST_CASE("certified: |certified - exact| <= err for o, lse, d_q, d_k, d_v", "[cpu]") {
  for (const OracleRun& r : runs()) {
    INFO(r.c.name);
    CHECK(first_violation(r.ce.value.o, r.ex.o, r.ce.err.o) == -1);
    CHECK(first_violation(r.ce.value.lse, r.ex.lse, r.ce.err.lse) == -1);
    CHECK(first_violation(r.ce.value.d_q, r.ex.d_q, r.ce.err.d_q) == -1);
    CHECK(first_violation(r.ce.value.d_k, r.ex.d_k, r.ce.err.d_k) == -1);
    CHECK(first_violation(r.ce.value.d_v, r.ex.d_v, r.ce.err.d_v) == -1);
  }
}

double frob(const std::vector<double>& x, int64_t begin, int64_t n) {
  double s = 0;
  for (int64_t i = begin; i < begin + n; ++i) s += x[size_t(i)] * x[size_t(i)];
  return std::sqrt(s);
}

TEST_CASE("certified: the bounds meet the 1e-13 targets", "[cpu]") {
  for (const OracleRun& r : runs()) {
    INFO(r.c.name);
    const Problem& p = r.c.p;
    const testing::Scales sc = testing::natural_scales(p, r.c.in);
    // o: err <= 1e-13 o_mag, plus the documented floor for weights below e^-699 (dropped): at most
    // n_k of them, each below 2^-1008, times the column's largest |v|.
    for (int64_t b = 0; b < p.batch; ++b)
      for (int32_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < p.n_q; ++i)
          for (int64_t k = 0; k < p.d; ++k) {
            double v_max = 0;
            for (int64_t j = 0; j < p.n_k; ++j)
              v_max = std::max(v_max, std::fabs(r.c.in.v[offset_kv(p, b, kv_head(p, h), j) + k]));
            const int64_t e = offset_q(p, b, h, i) + k;
            CHECK(r.ce.err.o[e] <= kTarget * sc.o_mag[e] + p.n_k * 0x1p-1008 * v_max);
          }
    for (size_t i = 0; i < r.ex.lse.size(); ++i)
      CHECK(r.ce.err.lse[i] <= kTarget * std::max(1.0, std::fabs(r.ex.lse[i])));
    // Gradients, normwise per (batch, kv head) group against the natural scales.
    const int64_t q_block = int64_t(p.heads_q / p.heads_kv) * p.n_q * p.d, kv_block = int64_t(p.n_k) * p.d;
    for (size_t g = 0; g < sc.dq.size(); ++g) {
      CHECK(frob(r.ce.err.d_q, int64_t(g) * q_block, q_block) <= kTarget * sc.dq[g]);
      CHECK(frob(r.ce.err.d_k, int64_t(g) * kv_block, kv_block) <= kTarget * sc.dk[g]);
      CHECK(frob(r.ce.err.d_v, int64_t(g) * kv_block, kv_block) <= kTarget * sc.dv[g]);
    }
  }
}

// Moves v[i] by more than err[i] (at least a few ulps, so rounding cannot undo it).
std::vector<double> pushed_out(std::vector<double> v, const std::vector<double>& err, size_t i) {
  const double ulp = std::nextafter(std::fabs(v[i]), INFINITY) - std::fabs(v[i]);
  v[i] += std::max(3 * err[i], 4 * ulp);
  return v;
}

TEST_CASE("certified comparator: flags values pushed beyond their bound and non-finite mismatches", "[cpu]") {
  const OracleRun& r = runs().at(1);  // f16 GQA, causal
  const Result64& v = r.ce.value;
  const Result64& e = r.ce.err;
  for (auto [val, ex, err] :
       {std::tuple{&v.o, &r.ex.o, &e.o}, std::tuple{&v.lse, &r.ex.lse, &e.lse}, std::tuple{&v.d_q, &r.ex.d_q, &e.d_q},
        std::tuple{&v.d_k, &r.ex.d_k, &e.d_k}, std::tuple{&v.d_v, &r.ex.d_v, &e.d_v}}) {
    REQUIRE(first_violation(*val, *ex, *err) == -1);
    const size_t i = val->size() / 2;
    CHECK(first_violation(pushed_out(*val, *err, i), *ex, *err) == long(i));
    std::vector<double> nan_err = *err;
    nan_err[i] = std::nan("");
    CHECK(first_violation(*val, *ex, nan_err) == long(i));  // a NaN bound is a failure
    std::vector<double> nan_val = *val;
    nan_val[i] = std::nan("");
    CHECK(first_violation(nan_val, *ex, *err) == long(i));
    std::vector<double> nan_ex = *ex;
    nan_ex[i] = std::nan("");
    CHECK(first_violation(*val, nan_ex, *err) == long(i));
  }
  std::vector<double> lse = r.ex.lse, err(lse.size(), 1.0);
  lse[0] = -std::numeric_limits<double>::infinity();
  std::vector<double> finite = lse;
  finite[0] = -1e300;
  CHECK(first_violation(finite, lse, err) == 0);  // -inf must be matched exactly, not within a bound
}

TEST_CASE("certified: a non-finite input leaves other rows certified and its rows NaN, uncertified", "[cpu]") {
  testing::CertifiedCase c = testing::certified_cases().at(1);  // f16 GQA 4/2, causal_top_left
  const Problem& p = c.p;
  c.in.q[size_t(offset_q(p, 0, 1, 3))] = std::nan("");  // batch 0, head 1, row 3
  const Result64 ex = exact(p, c.in, 256);
  const Certified ce = certified(p, c.in);
  CHECK(first_violation(ce.value.o, ex.o, ce.err.o) == -1);
  CHECK(first_violation(ce.value.d_q, ex.d_q, ce.err.d_q) == -1);
  CHECK(first_violation(ce.value.d_k, ex.d_k, ce.err.d_k) == -1);
  const int64_t poisoned = offset_q(p, 0, 1, 3), healthy = offset_q(p, 0, 1, 2);
  CHECK(std::isnan(ce.value.o[size_t(poisoned)]));
  CHECK(std::isinf(ce.err.o[size_t(poisoned)]));
  CHECK(std::isfinite(ce.value.o[size_t(healthy)]));
  CHECK(std::isfinite(ce.err.o[size_t(healthy)]));
  CHECK(std::isfinite(ce.value.o[size_t(offset_q(p, 1, 1, 3))]));  // the other batch is untouched
}

TEST_CASE("certified: a row whose scores overflow fp64 is NaN with an infinite bound", "[cpu]") {
  const Problem p{
      .n_q = 2,
      .n_k = 2,
      .d = 2,
      .dtype = DType::F64,
      .scale = 0x1p30  // row 0: scale · 2^499 · 2^499 = 2^1028 overflows; row 1 stays small
  };
  const double big = 0x1p499;
  const Tensors64 in{{big, 0, 1, 1}, {big, 0, 0, 1}, {1, 2, 3, 4}, {1, 1, 1, 1}};
  const Certified ce = certified(p, in);
  CHECK(std::isnan(ce.value.o[0]));
  CHECK(std::isinf(ce.err.o[0]));
  CHECK(std::isnan(ce.value.lse[0]));
  CHECK(std::isinf(ce.err.lse[0]));
  CHECK(std::isinf(ce.err.d_k[0]));  // row 0 sees both keys: their gradients carry no claim
  const Result64 ex = exact(p, in, 256);
  CHECK(std::isfinite(ex.o[0]));  // the maths is fine; certified only declines to certify it
  CHECK(std::fabs(ce.value.lse[1] - ex.lse[1]) <= ce.err.lse[1]);
}

}  // namespace
}  // namespace fc::ref
