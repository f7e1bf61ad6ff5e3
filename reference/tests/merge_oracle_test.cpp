// The merge-state oracles: the certified merge against the exact one (MPFR, 256 bits) on random
// merges, empty rows, extreme lse and up to 16 partials, every element within its bound; the bound not
// vacuous; and a wrong answer outside it.
#include "tests/catch.hpp"
#include <cmath>
#include <limits>
#include <random>

#include "reference/merge.hpp"

namespace fc::ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

float f32(double x) { return float(x); }

// A merge of P partials, lse around `base` with `spread`, a share of empty partials and empty rows.
Merge64 draw(std::mt19937_64& rng, int64_t P, double base, double spread, double empty_rate) {
  Merge64 m{P, 3, 2, 5, {}, {}};
  std::normal_distribution<double> n(0, 1);
  std::uniform_real_distribution<double> u(0, 1);
  m.o.assign(size_t(P * m.rows * m.heads * m.d_v), 0.0);
  m.lse.assign(size_t(P * m.heads * m.rows), -kInf);
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t h = 0; h < m.heads; ++h) {
      const bool row_empty = r == 2 && h == 1;  // one row of only empty partials
      for (int64_t q = 0; q < P; ++q) {
        if (row_empty || u(rng) < empty_rate) continue;
        double l = double(f32(base + spread * n(rng)));
        if (std::isinf(l)) l = l > 0 ? 0x1.fffffep127 : -0x1.fffffep127;
        m.lse[size_t((q * m.heads + h) * m.rows + r)] = l;
        for (int64_t c = 0; c < m.d_v; ++c)
          m.o[size_t(((q * m.rows + r) * m.heads + h) * m.d_v + c)] = double(f32(n(rng)));
      }
    }
  return m;
}

void held(const Merge64& m) {
  const MergeResult64 ex = exact_merge(m);
  const CertifiedMerge ce = certified_merge(m);
  for (size_t x = 0; x < ex.lse.size(); ++x) {
    INFO("lse " << x << ": certified " << ce.value.lse[x] << " exact " << ex.lse[x] << " err " << ce.err.lse[x]);
    if (ex.lse[x] == -kInf) {
      CHECK(ce.value.lse[x] == -kInf);
    } else {
      CHECK(std::fabs(ce.value.lse[x] - ex.lse[x]) <= ce.err.lse[x]);
    }
  }
  for (size_t x = 0; x < ex.o.size(); ++x) {
    INFO("o " << x << ": certified " << ce.value.o[x] << " exact " << ex.o[x] << " err " << ce.err.o[x]);
    CHECK(std::fabs(ce.value.o[x] - ex.o[x]) <= ce.err.o[x]);
  }
}

}  // namespace

TEST_CASE("certified merge: |certified - exact| <= err, empty rows exact", "[cpu]") {
  std::mt19937_64 rng(7);
  for (int64_t P : {1, 2, 5, 16})
    for (double base : {0.0, -30.0, 1e3, -1e5, 1e30, -3e38, 3e38})
      for (double spread : {0.5, 40.0, 400.0})
        for (double empty : {0.0, 0.4}) {
          INFO("P " << P << " base " << base << " spread " << spread << " empty " << empty);
          held(draw(rng, P, base, spread, empty));
        }
}

TEST_CASE("certified merge: a row of only empty partials is (0, -inf) exactly, never NaN", "[cpu]") {
  Merge64 m{3, 1, 1, 2, std::vector<double>(6, 0.0), std::vector<double>(3, -kInf)};
  const CertifiedMerge c = certified_merge(m);
  CHECK(c.value.lse[0] == -kInf);
  CHECK(c.err.lse[0] == 0);
  CHECK(c.value.o[0] == 0);
  CHECK(c.value.o[1] == 0);
  CHECK(c.err.o[0] == 0);
  const MergeResult64 e = exact_merge(m);
  CHECK(e.lse[0] == -kInf);
  CHECK(e.o[0] == 0);
}

TEST_CASE("certified merge: the bound is not vacuous, and a wrong merge lies outside it", "[cpu]") {
  std::mt19937_64 rng(3);
  const Merge64 m = draw(rng, 8, 2.0, 4.0, 0.0);
  const CertifiedMerge c = certified_merge(m);
  const MergeResult64 e = exact_merge(m);
  for (size_t x = 0; x < c.err.o.size(); ++x) {
    if (c.o_mag[x] == 0) continue;
    CHECK(c.err.o[x] <= 1e-13 * c.o_mag[x]);
  }
  for (size_t x = 0; x < c.err.lse.size(); ++x)
    if (std::isfinite(c.value.lse[x])) CHECK(c.err.lse[x] <= 1e-13 * (1 + std::fabs(c.value.lse[x])));
  // Another merge (one lse one fp32 ulp higher): its exact result lies outside the bound.
  Merge64 w = m;
  w.lse[0] = double(std::nextafter(f32(w.lse[0]), 1e30f));  // one lse one fp32 ulp up: another merge
  const MergeResult64 ew = exact_merge(w);
  bool outside = false;
  for (size_t x = 0; x < e.o.size(); ++x) outside |= std::fabs(ew.o[x] - c.value.o[x]) > c.err.o[x];
  CHECK(outside);
}
}  // namespace fc::ref
