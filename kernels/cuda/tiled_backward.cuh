// Parameters shared by the cuda_tiled backward kernels (tiled_backward.cu: prep, kv, convert;
// tiled_backward_dq.cu: the deterministic d_q kernel). Host and device.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "contract/attention.h"
#include "kernels/cuda/launchers.hpp"
#include "kernels/cuda/mma.cuh"
#include "contract/rules.h"

namespace fc::cuda {

struct BwdParams {
  Problem pr;
  const void* q;     // (b, h_q, n_q, d)
  const void* k;     // (b, h_kv, n_k, d)
  const void* v;     // (b, h_kv, n_k, d)
  const void* o;     // (b, h_q, n_q, d)
  const void* d_o;   // (b, h_q, n_q, d)
  const float* lse;  // (b, h_q, n_q), natural log
  void* d_q;         // (b, h_q, n_q, d)
  void* d_k;         // (b, h_kv, n_k, d)
  void* d_v;         // (b, h_kv, n_k, d)
  float* dq_acc;     // (b, h_q, n_q, d) fp32 workspace
  float* dd;         // (b, h_q, n_q) fp32 workspace: D = rowsum(d_o * o)
  int batch, heads_q, heads_kv, n_q, n_k, d;
  Mask mask;
  DType dtype;
  float scale;       // s = scale q.k
  float scale_log2;  // scale * log2(e)
  // Per query row, padded to n_q_pad (a multiple of 128) so that any 128-row block is one aligned,
  // in-bounds bulk copy (the wgmma backward): lse in base 2 (-inf past n_q) and D (0 past n_q).
  int n_q_pad;
  float* lse2_pad;  // (b, h_q, n_q_pad)
  float* dd_pad;    // (b, h_q, n_q_pad)
};

inline int padded_rows(int n_q) { return (n_q + 127) / 128 * 128; }

// Workspace layout: d_q accumulator, D, then (from a 256-byte boundary) the padded lse2 and D.
inline size_t backward_workspace_pad_offset(const Problem& pr) {
  const size_t rows = size_t(pr.batch) * pr.heads_q * pr.n_q;
  return ((rows * pr.d + rows) * sizeof(float) + 255) / 256 * 256;
}

// Backward workspace (both CUDA backwards): the fp32 d_q accumulator, D, and the padded lse2 and D.
inline size_t backward_workspace_bytes_of(const Problem& pr) {
  const size_t rows_pad = size_t(pr.batch) * pr.heads_q * padded_rows(pr.n_q);
  return backward_workspace_pad_offset(pr) + 2 * rows_pad * sizeof(float);
}

inline BwdParams make_bwd_params(const Problem& pr, const BackwardArgs& a, void* workspace) {
  float* acc = static_cast<float*>(workspace);
  const int64_t rows = int64_t(pr.batch) * pr.heads_q * pr.n_q;
  float* pad = reinterpret_cast<float*>(static_cast<char*>(workspace) + backward_workspace_pad_offset(pr));
  const int64_t rows_pad = int64_t(pr.batch) * pr.heads_q * padded_rows(pr.n_q);
  return BwdParams{pr,
                   a.q,
                   a.k,
                   a.v,
                   a.o,
                   a.d_o,
                   a.lse,
                   a.d_q,
                   a.d_k,
                   a.d_v,
                   acc,
                   acc + rows * pr.d,
                   pr.batch,
                   pr.heads_q,
                   pr.heads_kv,
                   pr.n_q,
                   pr.n_k,
                   pr.d,
                   pr.mask,
                   pr.dtype,
                   float(pr.scale),
                   float(pr.scale * rules::kLog2e),
                   padded_rows(pr.n_q),
                   pad,
                   pad + rows_pad};
}

// Element x of a 16-bit tensor whose dtype is known at run time only.
__device__ __forceinline__ float to_f(DType t, const void* base, int64_t x) {
  return t == DType::F16 ? __half2float(static_cast<const __half*>(base)[x])
                         : __bfloat162float(static_cast<const __nv_bfloat16*>(base)[x]);
}

// d_q = T(scale * acc) for one warp's query rows i0 + g and i0 + g + 8 of head (b, h), acc in the mma
// C layout (kDB blocks of 8 columns); rows past n_q are not written. Where both deterministic d_q
// kernels end.
template <class T, int kDB>
__device__ __forceinline__ void store_dq_rows(const BwdParams& p, const float (&acc)[kDB][4], int b, int h,
                                              int64_t i0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = i0 + g + 8 * r;
    if (i >= p.n_q) continue;
    T* dq_row = static_cast<T*>(p.d_q) + offset_q(p.pr, b, h, i);  // (kDB * 8)
#pragma unroll
    for (int db = 0; db < kDB; ++db)
      *reinterpret_cast<uint32_t*>(dq_row + db * 8 + 2 * t) =
          Storage<T>::pack(acc[db][2 * r] * p.scale, acc[db][2 * r + 1] * p.scale);
  }
}

// The passes around a key-tile kernel (tiled_backward.cu), shared by the mma.sync and wgmma backwards:
// D = rowsum(d_o * o) (and zero the fp32 d_q accumulator when it will take atomics), and
// d_q = T(scale * accumulator).
void backward_prep(const BwdParams& p, bool zero_acc, cudaStream_t stream);
void backward_dq_convert(const BwdParams& p, cudaStream_t stream);

// The deterministic d_q kernels, for d = 64 and 128: mma.sync (tiled_backward_dq.cu) and, on sm_90a,
// wgmma (wgmma_backward_dq.cu; it reads the padded lse2 / D that backward_prep writes).
cudaError_t tiled_backward_dq(const BwdParams& p, cudaStream_t stream);
cudaError_t wgmma_backward_dq(const BwdParams& p, cudaStream_t stream);

}  // namespace fc::cuda
