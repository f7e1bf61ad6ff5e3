// cuda_naive (naive.cu): three kernels with S and P in HBM in the storage type, the GPU's
// same-precision baseline. Any head dim, no tiles, forward only.
#pragma once

#include "kernels/cuda/launchers.hpp"

namespace fc::cuda {

struct NaiveTraits {
  static constexpr char kName[] = "cuda_naive";
  static constexpr char kDescription[] =
      "three kernels, S and P materialised in HBM in the storage type (fp32 accumulate)";
  static constexpr DType kDTypes[] = {DType::F16, DType::BF16};
  static constexpr bool kHopperOnly = false;
  static constexpr bool kStoresSP = true;
  // Rows never interact; nothing else is shared between two runs. Fields: rows, d_q_rows,
  // shared_scores, tile_weights, exact_scores.
  static constexpr Exactness kExact{true, false, false, false, false};

  // Launcher (the tile is ignored). Workspace: S and P, (b, h_q, n_q, n_k) each in the storage type.
  static cudaError_t forward(const Problem& p, Tile t, const ForwardArgs& a, void* workspace, cudaStream_t stream);
  static size_t forward_workspace_bytes(const Problem& p);
  static bool supports(const Problem& p);  // the launch grid's limits
  // Its arithmetic (arithmetic.cpp; the tiles are ignored): fmaf chains, S and P rounded to storage.
  static Arithmetic arithmetic(const Problem& p, Tile forward, Tile backward, bool deterministic);
};

}  // namespace fc::cuda
