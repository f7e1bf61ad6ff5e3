// cuda_naive (naive.cu): three kernels with S and P in HBM in the storage type, the GPU's
// same-precision baseline. Any head dim, no tiles, forward only.
#pragma once

#include "kernels/cuda/arithmetic.hpp"
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
  static bool supports(const Problem& p);  // the launch grid's limits and kMaxWorkspace
  // Its arithmetic (no tiles; no backward: its gradient chains are never used). naive.cu: fmaf loops,
  // one accumulator per output element; the softmax's sum strided over 256 threads, a warp butterfly
  // each, then the 8 warps' sums in order; P = expf(s - m) / l rounded to storage before P V; expf
  // 2 ulp, logf 1 ulp (the CUDA programming guide's table).
  static Arithmetic arithmetic(const Problem& p, Tile, Tile, bool) {
    Arithmetic a = tensor_core_arithmetic(p.dtype, 1, 0, 0);
    a.s = a.pv = serial_chain(DType::F32, true);
    a.pv.block = 0;
    a.l = serial_chain(DType::F32, true);
    a.l.lanes = 256, a.l.lane_tree = 32;
    a.base2 = false;
    a.stores_s = a.p_normalised = true;
    return a;
  }
};

}  // namespace fc::cuda
