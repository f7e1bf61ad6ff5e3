// The CPU rows of the kernel table: unique names, lookup, capabilities, claims(), and the kernels
// refusing malformed calls.
#include "tests/catch.hpp"
#include <algorithm>
#include <climits>
#include <set>
#include <stdexcept>

#include "kernels/tests/test_util.hpp"

using namespace fc;

TEST_CASE("registry lists cpu_naive and cpu_tiled under unique names", "[cpu]") {
  std::set<std::string> names;
  for (const Kernel& k : registry()) CHECK(names.insert(k.info.name).second);
  for (const char* name : {"cpu_naive", "cpu_tiled"}) {
    INFO(name);
    const Kernel* k = find_kernel(name);
    REQUIRE(k != nullptr);
    CHECK(k->info.name == name);
    CHECK(k->info.device == "cpu");
    CHECK_FALSE(k->info.mutant);
    CHECK(k->info.backward);
    CHECK(bool(k->forward));
    CHECK(bool(k->backward));
    CHECK(k->info.dtypes.size() == 4);
    CHECK(k->info.masks.size() == 3);
    CHECK_FALSE(k->info.configs.empty());
  }
  CHECK(find_kernel("no_such_kernel") == nullptr);
  const KernelInfo& tiled = find_kernel("cpu_tiled")->info;
  CHECK(tiled.any_tile);
  CHECK_FALSE(find_kernel("cpu_naive")->info.any_tile);
  auto has = [&](int32_t bm, int32_t bn, LoopOrder o) {
    return std::any_of(tiled.configs.begin(), tiled.configs.end(),
                       [&](const Config& c) { return c.block_m == bm && c.block_n == bn && c.order == o; });
  };
  for (LoopOrder o : {LoopOrder::FA2, LoopOrder::FA1}) {
    CHECK(has(1, 1, o));
    CHECK(has(17, 33, o));
    CHECK(has(64, 64, o));
  }
}

TEST_CASE("claims of the CPU kernels accept every dtype and mask and refuse malformed problems", "[cpu]") {
  for (const char* name : {"cpu_naive", "cpu_tiled"}) {
    INFO(name);
    const Kernel& k = *find_kernel(name);
    Problem p{.heads_q = 4, .heads_kv = 2, .n_q = 3, .n_k = 5, .d = 7};
    for (DType t : {DType::F16, DType::BF16, DType::F32, DType::F64})
      for (Mask m : {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight}) {
        p.dtype = t;
        p.mask = m;
        CHECK(claims(k, p));
      }
    Problem bad = p;
    bad.heads_kv = 3;  // 4 % 3 != 0
    CHECK_FALSE(claims(k, bad));
    bad = p;
    bad.scale = std::nan("");
    CHECK_FALSE(claims(k, bad));
    bad = p;
    bad.n_k = 0;
    CHECK_FALSE(claims(k, bad));
  }
}

TEST_CASE("forward of the CPU kernels refuses mistyped tensors and bad tiles", "[cpu]") {
  const Problem p{.n_q = 2, .n_k = 2, .d = 2, .dtype = DType::F16};
  Inputs in = test::random_inputs(p, 1);
  for (const char* name : {"cpu_naive", "cpu_tiled"}) {
    INFO(name);
    const Kernel& k = *find_kernel(name);
    CHECK_NOTHROW(run_forward(k, in));
    Inputs wrong = in;
    wrong.k = HostTensor(DType::F32, shape_kv(p));  // k in the wrong dtype
    CHECK_THROWS_AS(run_forward(k, wrong), std::invalid_argument);
    Inputs shaped = in;
    shaped.v = HostTensor(DType::F16, {1, 1, 3, 2});  // v with the wrong n_k
    CHECK_THROWS_AS(run_forward(k, shaped), std::invalid_argument);
  }
  Config neg;
  neg.block_m = -1;
  CHECK_THROWS_AS(run_forward(*find_kernel("cpu_tiled"), in, neg), std::invalid_argument);
  Config bf16_acc;
  bf16_acc.accum = DType::BF16;
  CHECK_THROWS_AS(run_forward(*find_kernel("cpu_tiled"), in, bf16_acc), std::invalid_argument);
}

// A tile larger than the problem is one tile: the same bits as the default 64 x 64 on a problem
// smaller than 64, however large the request (no allocation sized by the request).
TEST_CASE("forward of cpu_tiled takes tiles larger than the problem as one tile", "[cpu]") {
  const Problem p{
      .n_q = 5, .n_k = 7, .d = 3, .dtype = DType::F16, .mask = Mask::CausalBottomRight, .scale = default_scale(3)};
  const Inputs in = test::random_inputs(p, 5);
  const Kernel& tiled = *find_kernel("cpu_tiled");
  for (LoopOrder o : {LoopOrder::FA2, LoopOrder::FA1}) {
    const Outputs a = test::run(tiled, in, test::tile_config(0, 0, o));
    const Outputs b = test::run(tiled, in, test::tile_config(INT32_MAX, INT32_MAX, o));
    CHECK(a.o.bytes == b.o.bytes);
    CHECK(a.lse.bytes == b.lse.bytes);
    CHECK(a.d_q.bytes == b.d_q.bytes);
    CHECK(a.d_k.bytes == b.d_k.bytes);
    CHECK(a.d_v.bytes == b.d_v.bytes);
  }
}
