// cpu_tiled (every tile shape of a set, both loop orders) and cpu_naive with fp64 storage equal the
// exact oracle on every variant of contract v2 — varlen with zero-length sequences, paged K/V with
// shuffled and repeated pages, windows with either alignment, softcap, ALiBi, d_v != d — within
// issue 2's 1e-12 (relative to Σ_j P_ij |v_jk| for o, absolute for lse, normwise for gradients).
// A control shows fp32 storage misses it.
#include "tests/catch.hpp"
#include <cmath>

#include "kernels/tests/exact_expected.hpp"
#include "kernels/tests/test_util.hpp"
#include "kernels/tests/variant_inputs.hpp"
#include "reference/exact.hpp"
#include "reference/inputs64.hpp"

namespace {

using namespace fc;
using test::Expected;
using test::expected_of;
using test::worst_error;

constexpr double kTarget = 1e-12;

std::vector<test::VariantSpec> specs(DType t) {
  std::vector<test::VariantSpec> s;
  auto add = [&](test::VariantSpec v) {
    v.dtype = t;
    v.seed = s.size() + 1;
    s.push_back(v);
  };
  add({.mask = Mask::CausalBottomRight, .len_q = {3, 0, 5, 2}, .len_k = {4, 2, 0, 6}});
  add({.mask = Mask::CausalTopLeft, .len_q = {4, 2, 3}, .len_k = {7, 5, 9}, .page_size = 2, .repeat_pages = true});
  add({.mask = Mask::None, .n_q = 7, .n_k = 9, .window_left = 2, .window_right = 1});
  add({.mask = Mask::CausalBottomRight, .n_q = 9, .n_k = 6, .window_left = 1, .window_right = 3});
  add({.mask = Mask::CausalTopLeft, .n_q = 8, .n_k = 8, .window_left = 3, .window_right = 0});
  add({.mask = Mask::None, .n_q = 5, .n_k = 7, .softcap = 1.5, .range = 4});
  add({.heads_q = 3, .mask = Mask::None, .n_q = 5, .n_k = 8, .slopes = {0.5, 0.25, -0.125}});
  add({.heads_q = 2, .heads_kv = 2, .d = 5, .d_v = 3, .mask = Mask::CausalTopLeft, .n_q = 5, .n_k = 6});
  add({.heads_q = 4,
       .heads_kv = 2,
       .d_v = 6,
       .mask = Mask::CausalBottomRight,
       .len_q = {2, 5, 0},
       .len_k = {6, 4, 3},
       .page_size = 3,
       .window_left = 3,
       .window_right = 2,
       .softcap = 5,
       .slopes = {0.25, 0.5, 1.0, 0.125}});
  // Padded varlen (contract v3): 3 tokens of padding before every sequence and after the last.
  add({.heads_q = 2,
       .d_v = 6,
       .mask = Mask::CausalBottomRight,
       .len_q = {3, 0, 5, 2},
       .len_k = {4, 2, 0, 6},
       .pad = 3});
  return s;
}

}  // namespace

TEST_CASE("cpu_tiled and cpu_naive in fp64 equal the exact oracle on every variant", "[cpu]") {
  const Kernel& tiled = *find_kernel("cpu_tiled");
  const Kernel& naive = *find_kernel("cpu_naive");
  for (const test::VariantSpec& s : specs(DType::F64)) {
    const Inputs in = test::make_variant(s);
    REQUIRE(validate(in).empty());
    const Expected e = expected_of(in);
    INFO("spec " << s.seed);
    for (LoopOrder order : {LoopOrder::FA2, LoopOrder::FA1})
      for (auto [bm, bn] : {std::pair{1, 1}, std::pair{2, 3}, std::pair{3, 2}, std::pair{4, 4}, std::pair{64, 64}}) {
        INFO("tile " << bm << "x" << bn << (order == LoopOrder::FA1 ? " FA1" : " FA2"));
        CHECK(worst_error(test::run(tiled, in, test::tile_config(bm, bn, order), DType::F64), e) <= kTarget);
      }
    CHECK(worst_error(test::run(naive, in, Config{}, DType::F64), e) <= kTarget);
  }
}

TEST_CASE("cpu_tiled in fp32 misses the fp64 target on the variants", "[cpu]") {
  const Kernel& tiled = *find_kernel("cpu_tiled");
  for (const test::VariantSpec& s : specs(DType::F32)) {
    const Inputs in = test::make_variant(s);
    INFO("spec " << s.seed);
    const Expected e = expected_of(in);
    const double err = worst_error(test::run(tiled, in, test::tile_config(2, 2, LoopOrder::FA2), DType::F64), e);
    CHECK(err > kTarget);
    CHECK(std::isfinite(err));
  }
}
