// The seeds' golden fixtures as checks over any oracle (a function Problem, Tensors64 -> Result64),
// so exact and certified are held to the same printed numbers.
#pragma once

#include "tests/catch.hpp"
#include <cmath>
#include <functional>

#include "seed_fixtures.hpp"

namespace fc::ref::seeds {

using GoldenOracle = std::function<Result64(const Problem&, const Tensors64&)>;

inline void check_printed(const std::vector<double>& got, const std::vector<double>& want, int decimals) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", printed " << want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= printed_tol(decimals));
  }
}

inline void check_three_by_two(const GoldenOracle& oracle) {
  const SeedCase c = three_by_two();
  check_printed(oracle(c.p, c.in).o, kThreeByTwoO, 3);
}

inline void check_softmax_rows(const GoldenOracle& oracle) {
  const SeedCase a = softmax_row(kRow2130);
  check_printed(oracle(a.p, a.in).o, kRow2130Softmax, 4);
  const SeedCase b = softmax_row(kRow101);
  check_printed(oracle(b.p, b.in).o, kRow101Softmax, 3);
}

inline void check_row101_pour(const GoldenOracle& oracle) {
  const SeedCase c = row101_pour();
  check_printed(oracle(c.p, c.in).o, kRow101O, 3);
}

// P is not stored: the backward pass recomputes P_2 from the scores and the forward's lse.
// lse = m + log r, so r = e^(lse - m) must print as 1.5032 and e^(100 - lse) as 0.090; the
// oracle's own backward (d_v = Pᵀ d_o with d_o = [1, 0]) must agree.
inline void check_resurrection(const GoldenOracle& oracle) {
  const SeedCase c = row101_pour();
  const Result64 r = oracle(c.p, c.in);
  REQUIRE(r.lse.size() == 1);
  const double lse = r.lse[0];
  check_printed({std::exp(lse - kResurrectM)}, {kResurrectR}, 4);
  check_printed({std::exp(100 - lse)}, {kResurrectP2}, 3);
  REQUIRE(r.d_v.size() == 6);
  check_printed({r.d_v[2]}, {kResurrectP2}, 3);  // d_v row 1 (key s = 100), column 0
}

}  // namespace fc::ref::seeds
