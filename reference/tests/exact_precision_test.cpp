// The exact oracle's precision knob and its own reading of the masks.
#include "tests/catch.hpp"
#include <cmath>
#include <random>

#include "contract/attention.h"
#include "reference/exact.hpp"
#include "reference/exact_mp.hpp"
#include "reference/visibility.hpp"

namespace fc::ref {
namespace {

using detail::mp;

TEST_CASE("visibility: the references' masks agree with fc::visible, and visible keys form a prefix", "[cpu]") {
  for (Mask m : {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight})
    for (int64_t n_q = 1; n_q <= 9; ++n_q)
      for (int64_t n_k = 1; n_k <= 9; ++n_k)
        for (int64_t i = 0; i < n_q; ++i) {
          int64_t count = 0;
          for (int64_t j = 0; j < n_k; ++j) {
            INFO(mask_name(m) << " n_q " << n_q << " n_k " << n_k << " i " << i << " j " << j);
            REQUIRE(sees(m, i, j, n_q, n_k) == visible(m, i, j, n_q, n_k));
            if (sees(m, i, j, n_q, n_k)) CHECK(j == count++);  // the certified oracle relies on this
          }
        }
}

// Precision: at b bits every rounding is within 2^-b relative; on this problem (n_k = 6, d = 4,
// O(1) data) the longest chain has < 2^5 roundings, so the 113-bit result is within 2^-108 of the
// 256-bit one relative to the magnitudes involved (1 + |x|). We check 2^-100 (the exact oracle's stated "~2^-100")
// and that the two precisions do differ somewhere, so the knob is live.
TEST_CASE("exact: 113 and 256 bits agree to 2^-100 relative, and the precision knob is live", "[cpu]") {
  const Problem p{.batch = 1,
                  .heads_q = 2,
                  .heads_kv = 1,
                  .n_q = 5,
                  .n_k = 6,
                  .d = 4,
                  .dtype = DType::F64,
                  .mask = Mask::CausalBottomRight,
                  .scale = 0.5};
  std::mt19937_64 rng(5);
  std::normal_distribution<double> dist;
  auto fill = [&](int64_t n) {
    std::vector<double> x(static_cast<size_t>(n));
    for (auto& e : x) e = dist(rng);
    return x;
  };
  const std::vector<double> q = fill(numel_q(p)), k = fill(numel_kv(p)), v = fill(numel_kv(p)),
                            d_o = fill(numel_q(p));  // the same inputs at both precisions
  auto run = [&](unsigned bits) {
    detail::PrecisionGuard guard(bits);
    return detail::exact_mp(p, {detail::to_mp(q), detail::to_mp(k), detail::to_mp(v), detail::to_mp(d_o)});
  };
  const unsigned before = mp::default_precision();
  const detail::ResultMP lo = run(113), hi = run(256);
  CHECK(mp::default_precision() == before);  // the guard restored the precision
  detail::PrecisionGuard guard(256);
  mp largest = 0;
  for (auto [a, b] : {std::pair{&lo.o, &hi.o}, std::pair{&lo.lse, &hi.lse}, std::pair{&lo.d_q, &hi.d_q},
                      std::pair{&lo.d_k, &hi.d_k}, std::pair{&lo.d_v, &hi.d_v}}) {
    REQUIRE(a->size() == b->size());
    for (size_t i = 0; i < a->size(); ++i) {
      if (boost::multiprecision::isinf((*b)[i])) {  // empty rows: lse = -inf at both precisions
        CHECK((*a)[i] == (*b)[i]);
        continue;
      }
      const mp rel = abs((*a)[i] - (*b)[i]) / (1 + abs((*b)[i]));
      CHECK(rel <= std::ldexp(1.0, -100));
      if (rel > largest) largest = rel;
    }
  }
  CHECK(largest > std::ldexp(1.0, -200));  // 113 bits really is coarser than 256
}

TEST_CASE("exact: the result is the 256-bit value rounded once to double", "[cpu]") {
  // o of a single visible key is v exactly; lse of a single key is its score exactly.
  const Problem p{.n_q = 2, .n_k = 2, .d = 1, .dtype = DType::F64, .mask = Mask::CausalTopLeft, .scale = 1.0};
  const Result64 r = exact(p, {{3.0, 1.0}, {0.1, 0.2}, {0.7, -0.3}, {}}, 256);
  CHECK(r.o[0] == 0.7);
  CHECK(r.lse[0] == 3.0 * 0.1);  // 0.30000000000000004 = fl(3 · fl(0.1)) is also the exact product rounded
}

}  // namespace
}  // namespace fc::ref
