// cuda_wgmma (Hopper, sm_90a; wgmma_forward.cu, wgmma_backward.cu, wgmma_backward_dq.cu): the dtypes,
// head dims and tiles it is built for, the registry's configs, and its launchers. The one place these
// are named: the launchers instantiate what is listed here (static_switch.cuh), kernel_table.cpp makes
// the registry row of it, and the benchmark asks the library for the tiles. Adding a tile is a line here.
#pragma once

#include "kernels/cuda/arithmetic.hpp"
#include "kernels/cuda/launchers.hpp"

namespace fc::cuda {

struct WgmmaTraits {
  static constexpr char kName[] = "cuda_wgmma";
  static constexpr char kDescription[] =
      "Hopper (sm_90a only): TMA producer warpgroup, wgmma consumers, fp32 accumulate, P / dS rounded to storage; "
      "recompute backward with d_q by TMA reduce-add (deterministic: an atomic-free d_q kernel)";
  static constexpr DType kDTypes[] = {DType::F16, DType::BF16};
  static constexpr int kHeadDims[] = {64, 128};
  static constexpr bool kHopperOnly = true;
  static constexpr bool kLargeOffsets = true;  // 64-bit offsets; TMA coordinates are per head
  // As cuda_tiled's: rows never interact in the forward (the backward's d_q is summed by atomics or a reduce-add); S
  // is an MMA chain over d, the same for every key and tile; P = exp2(s c - m) with m the running max
  // at the tile's end. The scale is folded with log2 e before the max is subtracted, so scores are
  // never exact. Fields: rows, d_q_rows, shared_scores, tile_weights, exact_scores.
  static constexpr Exactness kExact{true, false, true, true, false};

  // Forward tiles (64 x consumer warpgroups, kBlockN). 192 x 128 at d = 128 would need more registers
  // than three consumers have: it is not built.
  static constexpr BuiltTile kForwardTiles[] = {{128, 128}, {128, 64}, {192, 64}, {64, 128}, {192, 128, 64}};
  // The fastest measured on the H200. At d = 64 the softmax, not the GEMMs, bounds a warpgroup: three
  // consumers keep the tensor cores busier.
  static constexpr DimTile kForwardDefault[] = {{64, {192, 128}}, {128, {128, 128}}};

  // Backward: one tile per head dim, (queries per step, keys per CTA = 64 x two consumers). A short
  // head dim's GEMMs are short: a longer query step amortises the element-wise work.
  static constexpr BuiltTile kBackwardTiles[] = {{128, 128, 64}, {64, 128, 128}};
  static constexpr DimTile kBackwardDefault[] = {{64, {128, 128}}, {128, {64, 128}}};
  // The deterministic d_q kernel (queries per CTA, keys per step): at d = 128 a consumer's S, dP and
  // d_q then fit its 240 registers.
  static constexpr DimTile kDqTile[] = {{64, {128, 128}}, {128, {128, 64}}};

  // The registry's configs (block-size invariance ranges over them; the first is the default): two
  // and three consumer warpgroups, two key-tile widths; the backward runs its one tile.
  static constexpr ConfigTile kConfigs[] = {{{128, 128}, 0, {}}, {{128, 64}, 0, {}}, {{192, 64}, 0, {}}};

  // Launchers (tile {0, 0}: the default for p.d); same arguments and workspace as cuda_tiled's.
  static cudaError_t forward(const Problem& p, Tile t, const ForwardArgs& a, void* workspace, cudaStream_t stream);
  static size_t forward_workspace_bytes(const Problem&) { return 0; }
  static cudaError_t backward(const Problem& p, Tile t, bool deterministic, const BackwardArgs& a, void* workspace,
                              cudaStream_t stream);
  static size_t backward_workspace_bytes(const Problem& p);
  static bool supports(const Problem&) { return true; }  // no limit beyond the lists above (and the device)
  // Its arithmetic on the tiles a config runs (arithmetic.hpp): cuda_tiled's, on its own tiles.
  static Arithmetic arithmetic(const Problem& p, Tile forward, Tile backward, bool deterministic) {
    return flash_tensor_core_arithmetic(p, forward, backward, deterministic);
  }
};

}  // namespace fc::cuda
