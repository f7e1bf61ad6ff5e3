// The seeds' worked examples (docs/laws.md) as golden fixtures, for cpu_tiled with fp64 storage at
// every block size 1..N (block_m and block_n independently) in both loop orders, and for cpu_naive.
// Each printed figure is checked to its printed precision: |x - printed| <= half a unit of its
// last printed digit.
#include "tests/catch.hpp"
#include <cmath>
#include <string>

#include "kernels/tests/test_util.hpp"

namespace {

using namespace fc;
using fc::test::make_inputs;

// Half a unit in the last place of a figure printed with `digits` decimals.
double half_unit(int digits) { return 0.5 * std::pow(10.0, -digits); }

struct GoldenCase {
  Config cfg;
  std::string name;
};

// Every (block_m, block_n) in 1..n x 1..n, both loop orders, for cpu_tiled; one run for cpu_naive.
std::vector<std::pair<const Kernel*, GoldenCase>> every_run(int32_t n) {
  std::vector<std::pair<const Kernel*, GoldenCase>> runs;
  const Kernel* tiled = find_kernel("cpu_tiled");
  const Kernel* naive = find_kernel("cpu_naive");
  REQUIRE(tiled != nullptr);
  REQUIRE(naive != nullptr);
  for (LoopOrder order : {LoopOrder::FA2, LoopOrder::FA1})
    for (int32_t bm = 1; bm <= n; ++bm)
      for (int32_t bn = 1; bn <= n; ++bn)
        runs.push_back(
            {tiled,
             {test::tile_config(bm, bn, order), "cpu_tiled " + std::to_string(bm) + "x" + std::to_string(bn) +
                                                    (order == LoopOrder::FA1 ? " FA1" : " FA2")}});
  runs.push_back({naive, {Config{}, "cpu_naive"}});
  return runs;
}

// One query row of scores s (scale 1, d = n_k): q = e_0, k_j = s_j e_0, v = identity, so that
// o is the softmax row itself; d_o = e_0 makes d_v[j][0] = P_j (the backward's resurrected P).
Inputs one_row(const std::vector<double>& s) {
  const Problem p{.n_q = 1, .n_k = int32_t(s.size()), .d = int32_t(s.size()), .dtype = DType::F64, .scale = 1.0};
  const size_t n = s.size();
  std::vector<double> q(n, 0.0), d_o(n, 0.0);        // (n_q = 1, d = n)
  std::vector<double> k(n * n, 0.0), v(n * n, 0.0);  // (n_k = n, d = n)
  q[0] = d_o[0] = 1.0;
  for (size_t j = 0; j < n; ++j) {
    k[j * n] = s[j];
    v[j * n + j] = 1.0;
  }
  return make_inputs(p, q, k, v, d_o);
}

}  // namespace

TEST_CASE("forward of the 3x2 worked example gives the printed O", "[cpu]") {
  const Problem p{.n_q = 3, .n_k = 3, .d = 2, .dtype = DType::F64, .scale = 1.0};
  const Inputs in = make_inputs(p, {1, 0, 0, 2, 1, 1}, {1, 1, 0, 1, 2, 0}, {1, 0, 0, 1, 1, 1});
  const double o_printed[] = {0.910, 0.755, 0.532, 0.532, 0.845, 0.578};  // (n_q, d)
  for (const auto& [kern, c] : every_run(3)) {
    INFO(c.name);
    const Outputs out = test::run(*kern, in, c.cfg);
    for (int i = 0; i < 6; ++i) CHECK(std::fabs(out.o.get(i) - o_printed[i]) <= half_unit(3));
  }
}

TEST_CASE("forward of the row [2,1,3,0] gives the printed softmax and l", "[cpu]") {
  const Inputs in = one_row({2, 1, 3, 0});
  const double p_printed[] = {0.2369, 0.0871, 0.6439, 0.0321};
  for (const auto& [kern, c] : every_run(4)) {
    INFO(c.name);
    const Outputs out = test::run(*kern, in, c.cfg, DType::F64);
    for (int j = 0; j < 4; ++j) CHECK(std::fabs(out.o.get(j) - p_printed[j]) <= half_unit(4));
    // The seed's final l = 1.5530 against the final max m = 3: l = exp(lse - m).
    CHECK(std::fabs(std::exp(out.lse.get(0) - 3.0) - 1.5530) <= half_unit(4));
  }
}

TEST_CASE("forward of the row [101,100,102] gives the printed softmax and l", "[cpu]") {
  const Inputs in = one_row({101, 100, 102});
  const double p_printed[] = {0.245, 0.090, 0.665};
  for (const auto& [kern, c] : every_run(3)) {
    INFO(c.name);
    const Outputs out = test::run(*kern, in, c.cfg, DType::F64);
    for (int j = 0; j < 3; ++j) CHECK(std::fabs(out.o.get(j) - p_printed[j]) <= half_unit(3));
    CHECK(std::fabs(std::exp(out.lse.get(0) - 102.0) - 1.5032) <= half_unit(4));  // r = 1.5032
  }
}

TEST_CASE("backward of the row [101,100,102] resurrects P2 = 0.090", "[cpu]") {
  const Inputs in = one_row({101, 100, 102});
  const double p_printed[] = {0.245, 0.090, 0.665};
  for (const auto& [kern, c] : every_run(3)) {
    INFO(c.name);
    const Outputs out = test::run(*kern, in, c.cfg, DType::F64);
    // d_v = Pᵀ d_o with d_o = e_0: d_v[j][0] = P_j, recomputed from lse alone.
    for (int j = 0; j < 3; ++j) CHECK(std::fabs(out.d_v.get(j * 3) - p_printed[j]) <= half_unit(3));
    CHECK(std::fabs(out.d_v.get(1 * 3) - 0.090) <= half_unit(3));  // P2, the seed's resurrection
  }
}
