// The chain weights (reference/bounds_chain.hpp): hand-counted roundings for each structure, and the
// bound they give held against the sums themselves, computed the way the chain says (fp32 round to
// nearest, and the tensor-core step of the H200 measurement (docs/error-model.md): addends aligned to the largest
// with 2 extra bits and truncated, the result truncated) on random and adversarial terms, exact sums
// alongside. Whether the hardware behaves like that model is kernels' GPU test's business.
#include "tests/catch.hpp"

#include <cmath>
#include <random>
#include <vector>

#include "reference/bounds.hpp"
#include "contract/tensor.hpp"
#include "reference/bounds_chain.hpp"
#include "tests/exact_sum.hpp"

namespace {

using namespace fc;
constexpr double kU = 0x1p-24;

using fc::testing::exact_sum;

// x truncated toward zero to a multiple of 2^e.
double trunc_to(double x, int e) { return std::ldexp(std::trunc(std::ldexp(x, -e)), e); }
// x truncated toward zero to fp32's 24 bits.
double trunc_f32(double x) {
  if (x == 0) return 0;
  int e;
  std::frexp(x, &e);
  return trunc_to(x, e - 24);
}

// One fused tensor-core step of the model: C and the products aligned to 2^-25 of the largest
// addend's leading power of two (truncated), summed exactly, the sum truncated to fp32.
double tc_step(double C, const std::vector<double>& p) {
  double big = std::fabs(C);
  for (double x : p) big = std::max(big, std::fabs(x));
  if (big == 0) return C;
  int e;
  std::frexp(big, &e);  // big in [2^(e-1), 2^e)
  std::vector<double> a{trunc_to(C, e - 1 - 25)};
  for (double x : p) a.push_back(trunc_to(x, e - 1 - 25));
  return trunc_f32(exact_sum(a));
}

// The chain's sum of terms (exact doubles) as computed, and its bound.
struct ChainRun {
  double computed, exact, bound;
};
ChainRun run_chain(const Chain& c, const std::vector<double>& x) {
  const int64_t n = int64_t(x.size());
  const ref::ChainWeights w = ref::chain_weights(c, n, false);
  double weighted = 0;
  for (int64_t j = 0; j < n; ++j) weighted += w.kappa[size_t(j)] * std::fabs(x[size_t(j)]);
  ChainRun r{0, exact_sum(x), weighted * w.scale() + w.floors()};
  if (c.adder == Adder::TensorCore) {
    double C = 0;
    for (int64_t g = 0; g < n; g += kTensorCoreFused)
      C = tc_step(C, std::vector<double>(x.begin() + g, x.begin() + std::min(n, g + kTensorCoreFused)));
    r.computed = C;
  } else if (c.lanes > 1) {  // lanes dealt lane_width at a time, pairs pre-summed, a tree at the end
    std::vector<float> lane(size_t(c.lanes), 0.f);
    for (int64_t j = 0; j < n; j += c.pre) {
      float pre = 0.f;
      for (int64_t t = j; t < std::min(n, j + c.pre); ++t) pre += float(x[size_t(t)]);
      float& acc = lane[size_t((j / c.lane_width) % c.lanes)];
      acc += pre;
    }
    for (size_t w2 = 1; w2 < lane.size(); w2 *= 2)
      for (size_t t = 0; t + w2 < lane.size(); t += 2 * w2) lane[t] += lane[t + w2];
    r.computed = lane[0];
  } else {
    float acc = 0.f;
    for (double v : x) acc += float(v);
    r.computed = acc;
  }
  return r;
}

std::vector<std::vector<double>> adversarial(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> n01;
  const double x = 0.51 * 0x1p-23;  // just over half an fp32 ulp of 1: each add rounds up
  std::vector<std::vector<double>> out(6, std::vector<double>(size_t(n)));
  for (int64_t j = 0; j < n; ++j) {
    out[0][size_t(j)] = j == 0 ? 1.0 : x;                                      // one large, a run of x
    out[1][size_t(j)] = j % 2 ? -1.0 : 1.0 + 0x1p-20;                          // alternating signs
    out[2][size_t(j)] = double(float(n01(rng)));                               // random
    out[3][size_t(j)] = j == n / 2 ? 1.0 : 0.99 * 0x1p-25;                     // tiny, under the grid
    out[4][size_t(j)] = double(float(std::ldexp(1.0 + j % 7, -int(j % 40))));  // spread exponents
    out[5][size_t(j)] = j == 0 ? 1.0 : 0.99 * 0x1p-25;                         // the grid's worst case
  }
  return out;
}

}  // namespace

TEST_CASE("chain weights count every rounding a term goes through", "[cpu]") {
  Chain serial = serial_chain(DType::F32, true);
  auto kap = [](const Chain& c, int64_t n) {
    std::vector<double> k = ref::chain_weights(c, n, false).kappa;
    for (double& x : k) x /= kU;
    return k;
  };
  CHECK(kap(serial, 4) == std::vector<double>{3, 3, 2, 1});  // 0 + x_0 is exact
  serial.exact_products = false;
  CHECK(kap(serial, 3) == std::vector<double>{3, 3, 2});  // and each product rounds once
  Chain fa2 = serial_chain(DType::F32, true);
  fa2.block = 2, fa2.merge = Merge::Rescale;  // o *= alpha before tiles 1 and 2
  CHECK(kap(fa2, 6) == std::vector<double>{7, 7, 5, 4, 2, 1});
  Chain fa1 = fa2;
  fa1.merge = Merge::Serial, fa1.merge_old = 5, fa1.merge_new = 2;  // tile 0: 1 + (2 - 1) + 5; tile 1: 1 + 2
  CHECK(kap(fa1, 4) == std::vector<double>{7, 7, 3, 3});
  Chain atomic = fa2;
  atomic.merge = Merge::AnyOrder;  // 3 partials merged in any order: up to 2 adds for any of them
  CHECK(kap(atomic, 6) == std::vector<double>{3, 3, 3, 3, 3, 3});  // 1 in its tile, then 2 merges
  // CUDA's l: lane (j / 2) % 4, pairs summed first, a tile partial per lane, l = l corr + sum
  // (2 for the old, 1 for the new), a 4-lane butterfly (2 levels). Key 0: its pair (1), lane 0's
  // tile-0 partial holds only that pair (0), first merge (0), one later merge (2), the tree (2).
  Chain l = serial_chain(DType::F32, true);
  l.lanes = 4, l.lane_width = 2, l.pre = 2, l.lane_tree = 4, l.block = 8, l.merge = Merge::Serial;
  l.merge_old = 2, l.merge_new = 1;
  const std::vector<double> kl = kap(l, 16);
  CHECK(kl[0] == 5);
  CHECK(kl[9] == 1 + 0 + 1 + 2);
  // Tensor cores: 2 + 8 + 1 in a term's own step, 2 + 4 in each later one.
  CHECK(kap(tensor_core_chain(), 20) ==
        std::vector<double>{23, 23, 23, 23, 23, 23, 23, 23, 17, 17, 17, 17, 17, 17, 17, 17, 11, 11, 11, 11});
  Chain any;
  any.adder = Adder::AnyOrder, any.acc = DType::F32, any.exact_products = true;
  CHECK(kap(any, 5) == std::vector<double>{4, 4, 4, 4, 4});
  // A plain chain's weights from any subset of positions agree with the prefix walk.
  for (const Chain& c : {serial_chain(DType::F32, true), tensor_core_chain(), any})
    for (int64_t n : {1, 7, 8, 33}) {
      const ref::ChainWeights w = ref::chain_weights(c, n, false);
      for (int64_t t = 0; t < n; ++t)
        CHECK(ref::plain_kappa(c, t, n, t / kTensorCoreFused, (n + kTensorCoreFused - 1) / kTensorCoreFused) ==
              w.kappa[size_t(t)]);
    }
}

TEST_CASE("chain bounds hold for fp32 and tensor-core sums, adversarial terms included", "[cpu]") {
  std::mt19937_64 rng(7);
  Chain l = serial_chain(DType::F32, true);
  l.lanes = 4, l.lane_width = 2, l.pre = 2, l.lane_tree = 4;
  for (const Chain& c : {serial_chain(DType::F32, true), tensor_core_chain(), l})
    for (int64_t n : {1, 2, 9, 100, 1000, 20000})
      for (const std::vector<double>& x : adversarial(n, rng)) {
        const ChainRun r = run_chain(c, x);
        INFO("adder " << int(c.adder) << " lanes " << c.lanes << " n " << n << " x[1] "
                      << x[std::min<size_t>(1, x.size() - 1)]);
        CHECK(std::fabs(r.computed - r.exact) <= r.bound);
      }
  // The first adversarial row is near the serial chain's worst case: the bound is tight there.
  const std::vector<double> row = adversarial(20000, rng)[0];
  const ChainRun r = run_chain(serial_chain(DType::F32, true), row);
  CHECK(std::fabs(r.computed - r.exact) > 0.4 * r.bound);
  // ... and tensor cores lose whole runs of addends under the grid: the model's charge is needed.
  const ChainRun t = run_chain(tensor_core_chain(), adversarial(20000, rng)[5]);
  CHECK(std::fabs(t.computed - t.exact) > 0.1 * t.bound);
}

TEST_CASE("chain bounds stay finite and hold past kappa = 1: long sums in an fp16 accumulator", "[cpu]") {
  // 4096 serial fp16 adds charge the first term 4096 u: kappa_max = 2, where the first-order cover
  // 1 / (1 - kappa_max) is vacuous and s = expm1(2) / 2 = 3.19 is not. The sums run in fp16, round to
  // nearest, term by term; the terms are fp16 values (exact products).
  const Chain c = serial_chain(DType::F16, true);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u01(0, 1);
  const double x = 0.51 * 0x1p-10;  // just over half an fp16 ulp of 1: each add to a partial near 1 rounds up
  double worst = 0;
  for (int64_t n : {64, 1024, 4096, 16384}) {
    const ref::ChainWeights w = ref::chain_weights(c, n, false);
    REQUIRE(std::isfinite(w.scale()));
    if (w.kappa_max < 1) CHECK(w.scale() <= 1 / (1 - w.kappa_max));  // never looser than the first-order cover
    std::vector<std::vector<double>> rows(4, std::vector<double>(size_t(n)));
    for (int64_t j = 0; j < n; ++j) {
      rows[0][size_t(j)] = j == 0 ? 1.0 : x;                                             // one large, a run of x
      rows[1][size_t(j)] = round_to(DType::F16, u01(rng));                               // softmax-like weights
      rows[2][size_t(j)] = round_to(DType::F16, (j % 2 ? -1 : 1) * u01(rng));            // both signs
      rows[3][size_t(j)] = round_to(DType::F16, std::ldexp(1.0 + j % 7, -int(j % 20)));  // spread exponents
    }
    for (const std::vector<double>& row : rows) {
      double acc = 0, weighted = 0;
      for (int64_t j = 0; j < n; ++j) {
        acc = round_to(DType::F16, acc + row[size_t(j)]);
        weighted += w.kappa[size_t(j)] * std::fabs(row[size_t(j)]);
      }
      const double exact = exact_sum(row), bound = weighted * w.scale() + w.floors();
      INFO("n " << n << " row[1] " << row[std::min<size_t>(1, row.size() - 1)]);
      REQUIRE(std::isfinite(bound));
      CHECK(std::fabs(acc - exact) <= bound);
      worst = std::max(worst, std::fabs(acc - exact) / bound);
    }
  }
  // The run of x sits near the chain's worst case: the bound is not slack there.
  CHECK(worst > 0.2);
}
