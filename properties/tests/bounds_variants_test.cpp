// The error model on the variants (docs/error-model.md, "Variants"): correct kernels stay inside
// the bound on every variant alone and mixed, in every storage type and loop order; a variant
// mutant and an error injected just above the bound are caught.
#include "tests/catch.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/mutants/variant_faulty.hpp"
#include "properties/generators.hpp"
#include "properties/tests/bounds_util.hpp"
#include "properties/variant_gen.hpp"
#include "verdict/verdict.hpp"

namespace {

using namespace fc;
using test_bounds::worst_ratio;

Inputs make_inputs(DType t, int32_t n_q, int32_t n_k, int32_t d, Mask mask, uint64_t seed, int32_t batch = 1) {
  props::Case c;
  c.in.p.dtype = t, c.in.p.n_q = n_q, c.in.p.n_k = n_k, c.in.p.d = d, c.in.p.mask = mask;
  c.in.p.batch = batch, c.in.p.heads_q = 2, c.in.p.heads_kv = 1;
  c.in.p.scale = default_scale(d);
  props::fill_values(c, 2, seed, true, 1e9);
  return c.in;
}

Inputs with_alibi(Inputs in, double steep) {
  in.p.alibi = true;
  in.alibi_slopes = HostTensor(DType::F32, {in.p.heads_q});
  for (int64_t h = 0; h < in.p.heads_q; ++h) in.alibi_slopes.set(h, steep * std::exp2(-4.0 * double(h + 1)));
  return in;
}

// One of each variant (and both causal alignments) applied to a dense case by `which`.
Inputs one_variant(int which, const Inputs& dense, props::Rng& rng, std::string* how) {
  Inputs in = dense;
  Problem& p = in.p;
  switch (which) {
    case 0: p.window_left = 5, p.window_right = 3, *how = "window (5, 3)"; break;
    case 1: p.window_left = 0, p.window_right = 0, *how = "window (0, 0)"; break;
    case 2: p.window_left = 17, p.window_right = -1, *how = "window (17, -1)"; break;
    case 3: p.softcap = 0.5, *how = "softcap 0.5"; break;
    case 4: p.softcap = 30, *how = "softcap 30"; break;
    case 5: in = with_alibi(in, 1), *how = "ALiBi"; break;
    case 6: in = with_alibi(in, 64), *how = "steep ALiBi"; break;
    case 7: in = props::with_d_v(in, 7), *how = "d_v 7"; break;
    case 8: in = props::with_d_v(in, 40), *how = "d_v 40"; break;
    case 9: {
      const props::SeqLens lens = props::draw_lengths(rng, p.batch, p.n_q, p.n_k);
      in = props::to_varlen(in, lens), *how = props::describe(lens);
      break;
    }
    case 10: {
      const props::SeqLens lens = props::draw_lengths(rng, p.batch, p.n_q, p.n_k);
      std::string paged;
      in = props::to_paged(props::to_varlen(in, lens), props::draw_page_size(rng), true, rng, &paged);
      *how = props::describe(lens) + "; " + paged;
      break;
    }
    case 11: in = props::with_sinks(in, rng, how); break;
    case 12: {
      const props::SeqLens lens = props::draw_lengths(rng, p.batch, p.n_q, p.n_k);
      std::string sinks;
      in = props::to_varlen(props::with_sinks(in, rng, &sinks), lens), *how = sinks + "; " + props::describe(lens);
      break;
    }
    case 13: {  // rows of no key under a window: o = 0, lse = the sink
      std::string sinks;
      in = props::with_sinks(in, rng, &sinks);
      in.p.window_left = 0, in.p.window_right = 0, *how = sinks + "; window (0, 0)";
      if (in.p.mask == Mask::None) in.p.mask = Mask::CausalBottomRight;
      break;
    }
    case 14: in = props::with_mask_tensor(in, true, {}, rng, how); break;  // boolean
    case 15: in = props::with_mask_tensor(in, false, {DType::F32, DType::F16, DType::BF16}, rng, how); break;
    case 16: in = props::with_block_mask(in, rng, how); break;
    case 17: {  // an additive mask and a block mask together, with sinks
      std::string block, sinks;
      in = props::with_block_mask(
          props::with_mask_tensor(props::with_sinks(in, rng, &sinks), false, {DType::F32}, rng, how), rng, &block);
      *how += "; " + block + "; " + sinks;
      break;
    }
    default: in = props::with_variants(all_variants(), in, 8, rng, how);
  }
  return in;
}

}  // namespace

TEST_CASE("error bounds hold for correct kernels on every variant", "[cpu]") {
  const Kernel clean = mutants::make_variant_faulty_kernel(mutants::VariantFault::None, "variant_none", "no fault");
  Config fa1;
  fa1.order = LoopOrder::FA1;
  int runs = 0;
  for (DType t : {DType::F16, DType::BF16, DType::F32, DType::F64})
    for (int which = 0; which < 21; ++which) {
      const uint64_t seed = uint64_t(which) * 7 + uint64_t(t);
      const Mask mask = Mask(which % 3);
      const Inputs dense = make_inputs(t, 19, 29, 12, mask, seed, 3);
      props::Rng rng(seed);
      std::string how;
      const Inputs in = one_variant(which, dense, rng, &how);
      for (const Kernel* k : {find_kernel("cpu_tiled"), find_kernel("cpu_naive"), &clean}) {
        if (t == DType::F64 && k == &clean) continue;  // the variant mutants' kernel: fp16/bf16/fp32
        for (Config cfg : {Config{8, 5}, Config{4, 16}, fa1}) {
          if (k != find_kernel("cpu_tiled") && cfg.order == LoopOrder::FA1) continue;
          if (!claims(*k, in)) continue;  // cpu_naive declines sinks (kernels/cpu/register.cpp)
          if (cfg.block_n == 0) cfg.block_m = 4, cfg.block_n = 8;
          INFO(k->info.name << " " << dtype_name(t) << " " << mask_name(mask) << " " << how << " tiles " << cfg.block_m
                            << "x" << cfg.block_n);
          CHECK(worst_ratio(*k, in, cfg) <= 1.0);
          ++runs;
        }
      }
    }
  CHECK(runs > 300);
}

TEST_CASE("error bounds are sharp on the variants: a mutant and an error just above the bound fail", "[cpu]") {
  // Softcap dropped: scores of a few units capped at 0.5 change o by far more than any rounding.
  const Kernel& dropped = *find_kernel("mutant_softcap_dropped");
  Inputs in = make_inputs(DType::F16, 16, 24, 16, Mask::None, 3);
  in.p.softcap = 0.5;
  CHECK(worst_ratio(dropped, in, Config{8, 8}) > 3.0);
  // A window's left edge one key too wide: one more key in every row; the bound is no excuse.
  const Kernel& wide = *find_kernel("mutant_window_left_wide");
  Inputs win = make_inputs(DType::F32, 16, 24, 16, Mask::CausalBottomRight, 4);
  win.p.window_left = 3, win.p.window_right = 0;
  CHECK(worst_ratio(wide, win, Config{8, 8}) > 3.0);

  // A sink forgotten in o's denominator, or in lse: a sink as heavy as the keys changes both by far
  // more than any rounding.
  Inputs sunk = make_inputs(DType::BF16, 16, 24, 16, Mask::CausalTopLeft, 5);
  sunk.p.sinks = true;
  sunk.sinks = HostTensor(DType::F32, {sunk.p.heads_q});
  sunk.sinks.set(0, 1.0), sunk.sinks.set(1, 2.5);
  CHECK(worst_ratio(*find_kernel("mutant_sink_not_in_denominator"), sunk, Config{8, 8}) > 3.0);
  CHECK(worst_ratio(*find_kernel("mutant_sink_not_in_lse"), sunk, Config{8, 8}) > 3.0);

  // A boolean mask read inverted, and an F32 additive mask read as F16: far outside every bound.
  props::Rng mrng(6);
  std::string how_m;
  Inputs mb = make_inputs(DType::F32, 12, 20, 8, Mask::None, 6);
  mb.p.mask_kind = MaskKind::Bool, mb.mask = HostTensor(DType::BOOL, {1, 1, 12, 20});
  for (int64_t x = 0; x < mb.mask.numel(); ++x) mb.mask.set(x, x % 3 != 0 ? 1.0 : 0.0);
  CHECK(worst_ratio(*find_kernel("mutant_mask_bool_inverted"), mb, Config{8, 8}) > 3.0);
  Inputs ma = mb;
  ma.p.mask_kind = MaskKind::Additive, ma.p.mask_dtype = DType::F32, ma.mask = HostTensor(DType::F32, {1, 1, 12, 20});
  for (int64_t x = 0; x < ma.mask.numel(); ++x) ma.mask.set(x, x % 3 != 0 ? 0.25 * double(x % 7) : -INFINITY);
  REQUIRE(worst_ratio(*find_kernel("mutant_mask_f32_as_f16"), ma, Config{8, 8}) > 3.0);
  CHECK(worst_ratio(*find_kernel("cpu_tiled"), ma, Config{8, 8}) <= 1.0);  // the same problem, read right

  // cpu_tiled's own output with one element of o moved just past its bound (on softcap + ALiBi +
  // window + varlen): the verdict flips there.
  props::Rng rng(11);
  std::string how;
  Inputs v = with_alibi(make_inputs(DType::F32, 20, 30, 8, Mask::CausalTopLeft, 9, 2), 1);
  v.p.softcap = 2, v.p.window_left = 6, v.p.window_right = 2;
  v = props::to_varlen(v, props::draw_lengths(rng, 2, 20, 30));
  const Kernel& tiled = *find_kernel("cpu_tiled");
  const Config cfg{4, 8};
  const verdict::Run r = verdict::execute(tiled, v, cfg, true);
  REQUIRE(r.error.empty());
  const ref::Certified c = verdict::certify(v);
  const ref::Bounds B = verdict::bounds_for(tiled, v, cfg, c);
  std::vector<double> o = r.out.o.to_f64();
  REQUIRE(ref::within_bound(o, c.value.o, B.o, DType::F32).ok);
  size_t x = size_t(std::max_element(B.o.begin(), B.o.end()) - B.o.begin());
  REQUIRE(B.o[x] > 0);
  for (double past : {1.0 + 0x1p-10, 1.01}) {
    std::vector<double> bad = o;
    bad[x] = double(float(c.value.o[x] + past * B.o[x]));
    if (std::fabs(bad[x] - c.value.o[x]) <= B.o[x]) bad[x] = std::nextafter(float(bad[x]), 1e30f);
    CHECK_FALSE(ref::within_bound(bad, c.value.o, B.o, DType::F32).ok);
  }
  // ... and the bound says something there: the correct kernel's own error is a sizeable part of it.
  CHECK(worst_ratio(tiled, v, cfg) > 0.05);
}
