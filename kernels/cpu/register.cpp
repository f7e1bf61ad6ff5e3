// The CPU rows of the kernel table: cpu_naive (the same-precision baseline) and cpu_tiled (the
// FlashAttention algorithm, any tile shape, both loop orders). Both implement every variant of
// contract v2, so each variant's laws have a correct subject.
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/merge.hpp"
#include "kernels/registry.hpp"

namespace fc {

namespace {

bool cpu_supports(const Problem& p) { return well_formed(p); }

KernelInfo cpu_info(const char* name, const char* description) {
  KernelInfo i;
  i.name = name;
  i.device = "cpu";
  i.description = description;
  i.dtypes = {DType::F16, DType::BF16, DType::F32, DType::F64};
  i.masks = {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight};
  i.gqa = true;
  i.backward = true;
  i.variants = all_variants();
  return i;
}

// Representative tile shapes for block-size invariance: degenerate 1x1, square, GPU-like, and an
// odd shape that leaves ragged edge tiles; each in both loop orders.
std::vector<Config> tiled_configs() {
  std::vector<Config> out;
  const int32_t shapes[][2] = {{1, 1}, {16, 16}, {64, 64}, {128, 64}, {17, 33}};
  for (LoopOrder order : {LoopOrder::FA2, LoopOrder::FA1})
    for (const auto& s : shapes) {
      Config c;
      c.block_m = s[0];
      c.block_n = s[1];
      c.order = order;
      out.push_back(c);
    }
  return out;
}

// Split-KV configs for split_invariance: 2 and 3 splits of the 16 x 16 and 17 x 33 tilings (FA2), each
// judged against the same tiling unsplit.
std::vector<Config> tiled_split_configs() {
  std::vector<Config> out;
  const int32_t shapes[][2] = {{16, 16}, {17, 33}};
  for (const auto& s : shapes)
    for (int32_t splits : {2, 3}) {
      Config c;
      c.block_m = s[0], c.block_n = s[1], c.splits = splits;
      out.push_back(c);
    }
  return out;
}

}  // namespace

KernelInfo cpu::merge_info(const char* name, const char* description) {
  KernelInfo i;
  i.name = name;
  i.device = "cpu";
  i.kind = KernelKind::Merge;
  i.description = description;
  i.merge_dtypes = {DType::F16, DType::BF16, DType::F32};
  i.masks = {};  // a merge kernel claims no attention problem
  i.backward = false;
  return i;
}

void register_cpu_kernels(std::vector<Kernel>& out) {
  Kernel naive;
  naive.info = cpu_info("cpu_naive",
                        "3-pass attention with S, P (and dP, dS) materialised in the storage type; "
                        "products accumulate in Config.accum (F32 default, F16, F64; F64 storage: F64); "
                        "fp16 S overflows past 65504 like any same-precision baseline");
  naive.info.configs = {Config{}};
  naive.info.stores_s_p = true;
  // Not sinks: with P stored in storage, the error model's charge for a sink's weight is not yet sound
  // (check --kernel cpu_naive --seed 20 --law reference: lse off by 4.93e-6 over a bound of 3.97e-6 with
  // a sink at the top score), so the baseline declines them until it is (docs/DECISIONS.md).
  naive.info.variants.sinks = false;
  naive.info.arithmetic = cpu::naive_arithmetic;
  // Rows never interact. Its scores come from Eigen's vectorised products (a key's dot may take a
  // packet or a tail path) and its P is normalised by an order-dependent sum: nothing else is shared.
  naive.info.exact = {.rows = true, .d_q_rows = true};
  naive.supports = cpu_supports;
  naive.forward = [](const Inputs& in, const Config& c, Outputs& out) { cpu::naive_forward(in, c, out); };
  naive.backward = [](const Inputs& in, const Config& c, Outputs& out) { cpu::naive_backward(in, c, out); };
  out.push_back(std::move(naive));

  Kernel tiled;
  tiled.info = cpu_info("cpu_tiled",
                        "FlashAttention emulation: online softmax over any kBlockM x kBlockN (default 64x64), "
                        "FA2 or FA1 loop order, P and dS rounded to storage before their GEMMs; "
                        "accum F32 (default) or F16 (one rounding per multiply-add) or F64 (F64 storage: F64); "
                        "backward by recomputation from lse");
  tiled.info.any_tile = true;
  tiled.info.configs = tiled_configs();
  tiled.info.split_configs = tiled_split_configs();
  tiled.info.arithmetic = cpu::tiled_arithmetic;
  // Rows never interact (d_q summed over keys in order); a score is one dot in index order times the
  // scale; a weight is exp(s - m) with m the running max at its tile's end (FA2) or its tile's own
  // max (FA1); s - m is computed from s itself.
  // A key a mask hides is skipped, a tile of hidden keys rescales by exp(0) = 1 (FA2): mask_walk.
  tiled.info.exact = {.rows = true,
                      .d_q_rows = true,
                      .shared_scores = true,
                      .tile_weights = true,
                      .exact_scores = true,
                      .mask_walk = true};
  tiled.supports = cpu_supports;
  tiled.forward = [](const Inputs& in, const Config& c, Outputs& out) { cpu::tiled_forward(in, c, out); };
  tiled.backward = [](const Inputs& in, const Config& c, Outputs& out) { cpu::tiled_backward(in, c, out); };
  out.push_back(std::move(tiled));

  Kernel merge;
  merge.info = cpu::merge_info("cpu_merge",
                               "merge states (o_p, lse_p) -> (o, lse) in fp32, partials in index order, the largest "
                               "lse subtracted, empty rows (0, -inf)");
  merge.merge = [](const MergeInputs& in, MergeOutputs& out) { cpu::merge_states(in, out); };
  out.push_back(std::move(merge));
}

}  // namespace fc
