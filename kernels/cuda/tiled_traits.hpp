// cuda_tiled (mma.sync; tiled_forward.cu, tiled_backward.cu, tiled_backward_dq.cu): the dtypes, head
// dims and tiles it is built for, the registry's configs, and its launchers. The one place these are
// named: the launchers instantiate what is listed here (static_switch.cuh), kernel_table.cpp makes the
// registry row of it, and the benchmark asks the library for the tiles. Adding a tile is a line here.
#pragma once

#include "kernels/cuda/arithmetic.hpp"
#include "kernels/cuda/launchers.hpp"

namespace fc::cuda {

// A forward tile of cuda_tiled: (kBlockM, kBlockN), the 16-row m-tiles per warp, and the head dim it is
// built for (0: every head dim).
struct TiledForwardTile {
  int block_m = 0;
  int block_n = 0;
  int warp_m_tiles = 1;
  int d = 0;
};

struct TiledTraits {
  static constexpr char kName[] = "cuda_tiled";
  static constexpr char kDescription[] =
      "FlashAttention-2 on mma.sync tensor cores: fp32 accumulate, P rounded to storage, recompute backward";
  static constexpr DType kDTypes[] = {DType::F16, DType::BF16};
  static constexpr int kHeadDims[] = {64, 128};
  static constexpr bool kHopperOnly = false;
  static constexpr bool kLargeOffsets = true;  // every element offset is 64-bit
  // Rows never interact in the forward (the backward's d_q is summed by atomics or a reduce-add); S
  // is an MMA chain over d, the same for every key and tile; P = exp2(s c - m) with m the running max
  // at the tile's end. The scale is folded with log2 e before the max is subtracted, so scores are
  // never exact. Fields: rows, d_q_rows, shared_scores, tile_weights, exact_scores.
  static constexpr Exactness kExact{true, false, true, true, false};

  // Forward tiles (kBlockM, kBlockN) and the 16-row m-tiles a warp owns, per tile by what ran fastest
  // on the H200: 1 keeps the warp's q fragments in registers, 2 reads them from shared memory at every
  // k-step but feeds each k / v fragment to two m-tiles (FlashAttention-2's layout).
  static constexpr TiledForwardTile kForwardTiles[] = {{64, 64, 1}, {128, 64, 2}, {128, 32, 2}, {128, 128, 1, 64}};
  static constexpr DimTile kForwardDefault[] = {{64, {128, 64}}, {128, {128, 32}}};  // fastest measured
  // The tile a Config without one runs (the registry's first config, for every head dim).
  static constexpr DimTile kConfigDefault[] = {{0, {64, 64}}};

  // Backward tiles (queries per step, keys per CTA); the deterministic d_q kernel's own tile (queries
  // per CTA, keys per step) is fixed.
  static constexpr BuiltTile kBackwardTiles[] = {{128, 128, 64}, {64, 64}, {64, 128}, {32, 64, 128}};
  static constexpr DimTile kBackwardDefault[] = {{64, {128, 128}}, {128, {64, 64}}};  // fastest measured
  static constexpr Tile kDqTile{64, 32};

  // The registry's configs (block-size invariance ranges over them; the first is the default) and the
  // backward tile each runs with per head dim, so that the law covers every backward tile too.
  static constexpr ConfigTile kConfigs[] = {
      {{64, 64}, 64, {128, 128}}, {{64, 64}, 128, {64, 64}},    //
      {{128, 64}, 64, {64, 64}},  {{128, 64}, 128, {64, 128}},  //
      {{128, 32}, 64, {64, 128}}, {{128, 32}, 128, {32, 64}},
  };

  // Launchers (tile {0, 0}: the default for p.d). Backward workspace: the fp32 d_q accumulator and D
  // (tiled_backward.cuh).
  static cudaError_t forward(const Problem& p, Tile t, const ForwardArgs& a, void* workspace, cudaStream_t stream);
  static size_t forward_workspace_bytes(const Problem&) { return 0; }
  static cudaError_t backward(const Problem& p, Tile t, bool deterministic, const BackwardArgs& a, void* workspace,
                              cudaStream_t stream);
  static size_t backward_workspace_bytes(const Problem& p);
  static bool supports(const Problem&) { return true; }  // no limit beyond the lists above
  // Its arithmetic on the tiles a config runs (arithmetic.hpp): tensor-core chains, the forward
  // tile's rows and keys, the backward's keys per CTA for d_q's partial sums.
  static Arithmetic arithmetic(const Problem& p, Tile forward, Tile backward, bool deterministic) {
    return flash_tensor_core_arithmetic(p, forward, backward, deterministic);
  }
};

}  // namespace fc::cuda
