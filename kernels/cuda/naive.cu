// cuda_naive: standard attention as three kernels with S and P materialised in HBM in the storage
// type, the GPU's same-precision baseline (docs/architecture.md, oracle 4) and the quadratic-memory "crime
// scene" of the seeds. Plain CUDA-core GEMM tiles with fp32 accumulation; any head dim.
//   1. scores:  S = T(scale q k^T), invisible entries -inf            S: (b, h_q, n_q, n_k)
//   2. softmax: P = T(exp(S - max) / sum), lse = max + log(sum)       P: (b, h_q, n_q, n_k)
//   3. pv:      O = T(P v)
#include <cuda_runtime.h>

#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/naive_traits.hpp"
#include "kernels/cuda/static_switch.cuh"
#include "contract/rules.h"

namespace fc::cuda {
namespace {

constexpr int kTile = 64;  // output tile edge of the two GEMM kernels (16 x 16 threads, 4 x 4 each)
constexpr int kStep = 32;  // contraction chunk staged in shared memory

template <class T>
__global__ void __launch_bounds__(256) naive_scores_kernel(const T* q, const T* k, T* s, Problem p) {
  __shared__ float s_q[kTile][kStep + 1];  // (64, 32) padded: column reads hit distinct banks
  __shared__ float s_k[kTile][kStep + 1];  // (64, 32)
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q;
  const int64_t h_kv = h / (p.heads_q / p.heads_kv);
  const int i0 = blockIdx.y * kTile, j0 = blockIdx.x * kTile;
  const T* q_bh = q + offset_q(p, b, h, 0);      // (n_q, d)
  const T* k_bh = k + offset_kv(p, b, h_kv, 0);  // (n_k, d)
  float acc[4][4] = {};                          // (4, 4) outputs of this thread: rows ty + 16a, columns tx + 16e
  for (int c0 = 0; c0 < p.d; c0 += kStep) {
    for (int x = threadIdx.x; x < kTile * kStep; x += 256) {
      const int r = x / kStep, c = x % kStep;
      s_q[r][c] = (i0 + r < p.n_q && c0 + c < p.d) ? Storage<T>::to_float(q_bh[int64_t(i0 + r) * p.d + c0 + c]) : 0.f;
      s_k[r][c] = (j0 + r < p.n_k && c0 + c < p.d) ? Storage<T>::to_float(k_bh[int64_t(j0 + r) * p.d + c0 + c]) : 0.f;
    }
    __syncthreads();
    for (int c = 0; c < kStep; ++c)
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][e] = fmaf(s_q[ty + 16 * a][c], s_k[tx + 16 * e][c], acc[a][e]);
    __syncthreads();
  }
  const float scale = float(p.scale);
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t i = i0 + ty + 16 * a, j = j0 + tx + 16 * e;
      if (i >= p.n_q || j >= p.n_k) continue;
      const float x = visible(p.mask, i, j, p.n_q, p.n_k) ? acc[a][e] * scale : rules::neg_inf<float>();
      s[(bh * p.n_q + i) * p.n_k + j] = Storage<T>::from_float(x);  // S rounded to T: the baseline's point
    }
}

// One block per row: three sweeps over the row in HBM (max, sum, write P).
template <class T>
__global__ void __launch_bounds__(256) naive_softmax_kernel(const T* s, T* p_out, float* lse, int64_t n_k) {
  __shared__ float red[8];  // (8) one partial per warp
  const int64_t row = blockIdx.x;
  const T* s_row = s + row * n_k;  // (n_k)
  T* p_row = p_out + row * n_k;    // (n_k)
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  auto block_reduce = [&](float x, bool is_max) {
    for (int o = 16; o > 0; o /= 2) {
      const float y = __shfl_xor_sync(0xffffffffu, x, o);
      x = is_max ? rules::running_max(x, y) : x + y;
    }
    if (lane == 0) red[warp] = x;
    __syncthreads();
    x = red[0];
    for (int w = 1; w < 8; ++w) x = is_max ? rules::running_max(x, red[w]) : x + red[w];
    __syncthreads();
    return x;
  };
  float mx = rules::neg_inf<float>();
  for (int64_t j = threadIdx.x; j < n_k; j += 256) mx = rules::running_max(mx, Storage<T>::to_float(s_row[j]));
  mx = block_reduce(mx, true);
  const float shift = rules::safe_shift(mx);  // all masked: exp(-inf - 0) = 0 rather than NaN
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < n_k; j += 256) sum += expf(Storage<T>::to_float(s_row[j]) - shift);
  sum = block_reduce(sum, false);
  const float inv = rules::inv_l(sum);  // empty row: P = 0, o = 0 (contract)
  for (int64_t j = threadIdx.x; j < n_k; j += 256)
    p_row[j] = Storage<T>::from_float(expf(Storage<T>::to_float(s_row[j]) - shift) * inv);
  if (threadIdx.x == 0) lse[row] = rules::finalize_lse(mx, sum, [](float x) { return logf(x); });
}

template <class T>
__global__ void __launch_bounds__(256) naive_pv_kernel(const T* p_in, const T* v, T* o, Problem p) {
  __shared__ float s_p[kTile][kStep + 1];  // (64 rows, 32 keys)
  __shared__ float s_v[kStep][kTile + 1];  // (32 keys, 64 columns of d)
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q;
  const int64_t h_kv = h / (p.heads_q / p.heads_kv);
  const int i0 = blockIdx.y * kTile, c0 = blockIdx.x * kTile;
  const T* p_bh = p_in + bh * p.n_q * int64_t(p.n_k);  // (n_q, n_k)
  const T* v_bh = v + offset_kv(p, b, h_kv, 0);        // (n_k, d)
  float acc[4][4] = {};                                // (4, 4) outputs of this thread: rows ty + 16a, columns tx + 16e
  int64_t nv[4];  // (4) visible keys of this thread's rows: the contraction stops there
#pragma unroll
  for (int a = 0; a < 4; ++a) nv[a] = n_visible(p.mask, i0 + ty + 16 * a, p.n_q, p.n_k);
  for (int j0 = 0; j0 < p.n_k; j0 += kStep) {
    for (int x = threadIdx.x; x < kTile * kStep; x += 256) {
      const int r = x / kStep, c = x % kStep;
      s_p[r][c] =
          (i0 + r < p.n_q && j0 + c < p.n_k) ? Storage<T>::to_float(p_bh[int64_t(i0 + r) * p.n_k + j0 + c]) : 0.f;
      const int kr = x / kTile, kc = x % kTile;
      s_v[kr][kc] =
          (j0 + kr < p.n_k && c0 + kc < p.d) ? Storage<T>::to_float(v_bh[int64_t(j0 + kr) * p.d + c0 + kc]) : 0.f;
    }
    __syncthreads();
    for (int c = 0; c < kStep; ++c)
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          // A key the row cannot see has P = 0, but 0 * NaN = NaN: skip it, so a non-finite v_j
          // reaches only the rows that see j (the contract's NaN blast radius).
          if (j0 + c < nv[a]) acc[a][e] = fmaf(s_p[ty + 16 * a][c], s_v[c][tx + 16 * e], acc[a][e]);
    __syncthreads();
  }
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t i = i0 + ty + 16 * a, c = c0 + tx + 16 * e;
      if (i < p.n_q && c < p.d) o[offset_q(p, b, h, i) + c] = Storage<T>::from_float(acc[a][e]);
    }
}

template <class T>
cudaError_t launch(const Problem& p, const ForwardArgs& a, void* workspace, cudaStream_t stream) {
  const int64_t rows = int64_t(p.batch) * p.heads_q * p.n_q;
  T* s = static_cast<T*>(workspace);  // (b, h_q, n_q, n_k)
  T* pm = s + rows * p.n_k;           // (b, h_q, n_q, n_k)
  const int bh = p.batch * p.heads_q;
  dim3 g1((p.n_k + kTile - 1) / kTile, (p.n_q + kTile - 1) / kTile, bh);
  naive_scores_kernel<T><<<g1, 256, 0, stream>>>(static_cast<const T*>(a.q), static_cast<const T*>(a.k), s, p);
  naive_softmax_kernel<T><<<dim3(unsigned(rows)), 256, 0, stream>>>(s, pm, a.lse, p.n_k);
  dim3 g3((p.d + kTile - 1) / kTile, (p.n_q + kTile - 1) / kTile, bh);
  naive_pv_kernel<T><<<g3, 256, 0, stream>>>(pm, static_cast<const T*>(a.v), static_cast<T*>(a.o), p);
  return cudaGetLastError();
}

}  // namespace

// S and P are materialised: past 16 GiB of them (2 x 65536^2 elements of 2 bytes per head) the kernel
// declines the problem rather than fail its allocation on a smaller device, or take most of a large one.
constexpr size_t kMaxWorkspace = size_t(1) << 34;

bool NaiveTraits::supports(const Problem& p) {
  return int64_t(p.n_q + kTile - 1) / kTile <= 65535 && int64_t(p.batch) * p.heads_q <= 65535 &&
         forward_workspace_bytes(p) <= kMaxWorkspace;
}

size_t NaiveTraits::forward_workspace_bytes(const Problem& p) {
  return 2 * size_t(p.batch) * p.heads_q * p.n_q * size_t(p.n_k) * 2;  // S and P, 2 bytes each
}

cudaError_t NaiveTraits::forward(const Problem& p, Tile, const ForwardArgs& a, void* workspace, cudaStream_t stream) {
  if (!well_formed(p) || !supports(p)) return cudaErrorInvalidValue;
  return dtype_switch<NaiveTraits>(
      p.dtype, [&](auto type) { return launch<typename decltype(type)::type>(p, a, workspace, stream); });
}

}  // namespace fc::cuda
