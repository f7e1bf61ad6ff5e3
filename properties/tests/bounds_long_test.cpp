// The error model at long rows, where the accumulation chain a kernel really has dominates: FA2
// order adds key by key into one running accumulator, a recursive sum whose worst case grows with
// the number of visible keys, not with the tile. The adversarial input: q = k = 0 (every weight
// exactly 1 before normalisation), v = [1, x, x, ...] with x = 0.51 ulp(1): each x added to a
// running sum near 1 rounds up by 0.49 ulp, so the error grows linearly with n_k.
#include <catch2/catch.hpp>

#include <cmath>

#include "properties/execute.hpp"

namespace {

using namespace fc;

// One query, one head, d = 1: v_0 = 1, v_j = x for j > 0 (q = k = 0).
Inputs adversarial_row(DType t, int32_t n_k, double x) {
  const Problem p{.n_q = 1, .n_k = n_k, .d = 1, .dtype = t, .scale = 1.0};
  Inputs in{p, HostTensor(t, shape_q(p)), HostTensor(t, shape_kv(p)), HostTensor(t, shape_kv(p)),
            HostTensor(t, shape_q(p))};
  for (int64_t j = 0; j < n_k; ++j) in.v.set(j, j == 0 ? 1.0 : x);
  in.d_o.set(0, 1.0);
  return in;
}

// o's measured/bound (> 1 fails) for kernel k under cfg.
double o_ratio(const Kernel& k, const Inputs& in, const Config& cfg) {
  const props::Run r = props::execute(k, in, cfg, false);
  REQUIRE(r.error.empty());
  const props::Oracle o = props::oracle(k, in, cfg);
  const double err = std::fabs(r.out.o.get(0) - o.ref.value.o[0]);
  INFO("o = " << r.out.o.get(0) << ", reference " << o.ref.value.o[0] << ", bound " << o.bounds.o[0]);
  return err / o.bounds.o[0];
}

constexpr double kHalfUlpPlus = 0.51 * 0x1p-23;  // 0.51 ulp(1) in fp32

}  // namespace

TEST_CASE("cpu_tiled's FA2 chain stays within the bound on an adversarial row of 1024 keys", "[cpu]") {
  const Kernel& k = *find_kernel("cpu_tiled");
  const Config cfg{64, 64, LoopOrder::FA2};
  const double ratio = o_ratio(k, adversarial_row(DType::F32, 1024, kHalfUlpPlus), cfg);
  CHECK(ratio <= 1.0);
  CHECK(ratio > 0.3);  // and the bound is not vacuous: the case is near the chain's worst
}

TEST_CASE("cpu_tiled's FA2 chain stays within the bound on an adversarial row of 32768 keys", "[cpu][long]") {
  const Kernel& k = *find_kernel("cpu_tiled");
  const Config cfg{64, 64, LoopOrder::FA2};
  const double ratio = o_ratio(k, adversarial_row(DType::F32, 32768, kHalfUlpPlus), cfg);
  CHECK(ratio <= 1.0);
  CHECK(ratio > 0.3);
}
