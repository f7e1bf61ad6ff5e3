// Host-side entry points of the CUDA kernels, on device pointers. Declared here, defined at the bottom
// of each .cu file; the registry rows (cuda_kernels.cpp), the GPU tests and the benchmark call these.
// Layouts and dtypes are the contract's (kernels/attention.h); dtype must be F16 or BF16.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/attention.h"

namespace fc::cuda {

// Forward arguments: q (b, h_q, n_q, d), k and v (b, h_kv, n_k, d), o like q, lse (b, h_q, n_q) f32.
struct ForwardArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
};

// Backward arguments: o and lse from the forward; d_q like q, d_k and d_v like k.
struct BackwardArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* d_o = nullptr;
  const float* lse = nullptr;
  void* d_q = nullptr;
  void* d_k = nullptr;
  void* d_v = nullptr;
};

// A (kBlockM, kBlockN) tile configuration of cuda_tiled; {0, 0} asks for the default for d.
struct Tile {
  int block_m = 0;
  int block_n = 0;
};

// The forward tiles instantiated for head dim d (first = default), and whether p runs on them.
int tiled_forward_tiles(int d, Tile* out, int max_out);
bool tiled_forward_supports(const Problem& p, Tile t);
cudaError_t tiled_forward(const Problem& p, Tile t, const ForwardArgs& a, cudaStream_t stream);

// The Hopper forward (wgmma, sm_90a; wgmma_forward.cu): same contract and arguments as tiled_forward.
// Supported only where the current device has compute capability 9.x. Tiles: (64 * warpgroups, kBlockN).
bool device_is_sm90();
int wgmma_forward_tiles(int d, Tile* out, int max_out);
Tile wgmma_forward_default(int d);
bool wgmma_forward_supports(const Problem& p, Tile t);
cudaError_t wgmma_forward(const Problem& p, Tile t, const ForwardArgs& a, cudaStream_t stream);

// The Hopper backward (wgmma + TMA, sm_90a; wgmma_backward.cu): same contract, arguments and
// workspace as tiled_backward, one tile (128 keys per CTA; 64 queries per step at d = 128, 128 at
// d = 64). d_q by TMA reduce-add into the fp32 accumulator; the deterministic variant computes it
// instead with an atomic-free kernel (wgmma_backward_dq.cu) that owns query rows.
bool wgmma_backward_supports(const Problem& p);
cudaError_t wgmma_backward(const Problem& p, bool deterministic, const BackwardArgs& a, void* workspace,
                           cudaStream_t stream);

// Backward by recomputation. The tile is (queries per step, keys per CTA). Workspace: fp32 d_q
// accumulator (b, h_q, n_q, d) and D (b, h_q, n_q); query backward_workspace_bytes.
int tiled_backward_tiles(int d, Tile* out, int max_out);
bool tiled_backward_supports(const Problem& p, Tile t);
size_t tiled_backward_workspace_bytes(const Problem& p);
cudaError_t tiled_backward(const Problem& p, Tile t, bool deterministic, const BackwardArgs& a, void* workspace,
                           cudaStream_t stream);

// Naive three-kernel forward: S = scale q k^T and P = softmax(S) materialised in HBM in the storage
// type, then O = P v. Workspace: S and P, (b, h_q, n_q, n_k) each.
bool naive_forward_supports(const Problem& p);
size_t naive_forward_workspace_bytes(const Problem& p);
cudaError_t naive_forward(const Problem& p, const ForwardArgs& a, void* workspace, cudaStream_t stream);

}  // namespace fc::cuda
