// cuda_tiled deterministic d_q: a CTA owns kBlockM query rows (16 per warp) and walks the key tiles
// its rows can see, recomputing P from lse and dS = P (dP - D); d_q = scale dS K accumulates in
// registers in a fixed order, so the result is bitwise repeatable (no atomics). Costs one more
// recomputation of S and dP than the atomic variant.
#include <cuda_runtime.h>

#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/nonfinite.cuh"
#include "kernels/cuda/static_switch.cuh"
#include "kernels/cuda/tiled_backward.cuh"
#include "kernels/cuda/tiled_traits.hpp"
#include "contract/rules.h"

namespace fc::cuda {
namespace {

// Shared memory of one CTA: the q and d_o tiles, two stages of the k and v tiles, each swizzled
// (mma.cuh's swz) and filled by cp.async in 16-byte chunks.
template <class T, int kD, int kBlockM, int kBlockN>
struct TiledDqStorage {
  alignas(128) T q[kBlockM * kD];  // (kBlockM, kD)
  T d_o[kBlockM * kD];             // (kBlockM, kD)
  T k[2][kBlockN * kD];            // (2, kBlockN, kD)
  T v[2][kBlockN * kD];            // (2, kBlockN, kD)
};

template <class T, int kD, int kBlockM, int kBlockN>
__global__ void __launch_bounds__(kBlockM * 2) bwd_dq_kernel(const BwdParams p) {
  constexpr int kThreads = kBlockM * 2, kNB = kBlockN / 8, kDB = kD / 8;
  static_assert(kBlockM % 16 == 0, "a warp owns 16 query rows");
  static_assert(kBlockN % 16 == 0, "k and v are read two 8-key n-blocks at a time; dS K steps 16 keys");
  static_assert(kD % 64 == 0, "rows of q, d_o, k and v of at least 8 chunks");
  using S = TiledDqStorage<T, kD, kBlockM, kBlockN>;
  static_assert(sizeof(S) <= kMaxSmemSm80, "shared memory of an sm_80 CTA");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  S& smem = *reinterpret_cast<S*>(smem_raw);
  T* s_q = smem.q;     // (kBlockM, kD)
  T* s_do = smem.d_o;  // (kBlockM, kD)
  T* s_k = smem.k[0];  // (2, kBlockN, kD)
  T* s_v = smem.v[0];  // (2, kBlockN, kD)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int m_block = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int h_kv = h / (p.heads_q / p.heads_kv), m0 = m_block * kBlockM;
  const int64_t row0 = offset_lse(p.pr, b, h, m0);
  const T* k = static_cast<const T*>(p.k) + offset_kv(p.pr, b, h_kv, 0);  // (n_k, kD)
  const T* v = static_cast<const T*>(p.v) + offset_kv(p.pr, b, h_kv, 0);  // (n_k, kD)

  const int n_tiles = rules::key_tile_count(p.mask, p.n_q, p.n_k, m0, kBlockM, kBlockN);

  float lse2[2], dd[2];  // rows g and g + 8: lse in base 2 (-inf past n_q: P = 0), D
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = m0 + warp * 16 + g + 8 * r;
    lse2[r] = i < p.n_q ? p.lse[row0 + i - m0] * float(rules::kLog2e) : rules::neg_inf<float>();
    dd[r] = i < p.n_q ? p.dd[row0 + i - m0] : 0.f;
  }
  float dq[kDB][4] = {};                    // (16, kD) per warp, fp32
  uint32_t qf[kD / 16][4], of[kD / 16][4];  // (16, kD) q and d_o fragments of this warp
  if (n_tiles > 0) {
    load_tile<kBlockM, kD, kThreads>(s_q, static_cast<const T*>(p.q) + row0 * kD, p.n_q - m0);
    load_tile<kBlockM, kD, kThreads>(s_do, static_cast<const T*>(p.d_o) + row0 * kD, p.n_q - m0);
    load_tile<kBlockN, kD, kThreads>(s_k, k, p.n_k);
    load_tile<kBlockN, kD, kThreads>(s_v, v, p.n_k);
    cp_async_commit();
  }
  for (int n = 0; n < n_tiles; ++n) {
    const int n0 = n * kBlockN;
    cp_async_wait<0>();     // this tile's k, v (issued one tile ago) have landed
    __syncthreads();        // ... for every thread; and every warp is done with the previous tile
    if (n + 1 < n_tiles) {  // into the buffers the previous tile read
      const int buf = (n + 1) & 1;
      load_tile<kBlockN, kD, kThreads>(ring_stage(smem.k, buf), k + int64_t(n0 + kBlockN) * kD, p.n_k - n0 - kBlockN);
      load_tile<kBlockN, kD, kThreads>(ring_stage(smem.v, buf), v + int64_t(n0 + kBlockN) * kD, p.n_k - n0 - kBlockN);
    }
    cp_async_commit();
    if (n == 0) {
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        const int r = warp * 16 + lane % 16, c = ks * 16 + 8 * (lane / 16);
        ldmatrix_x4(qf[ks], smem_addr(s_q + swz<kD>(r, c)));
        ldmatrix_x4(of[ks], smem_addr(s_do + swz<kD>(r, c)));
      }
    }
    const T* s_kn = ring_stage(smem.k, n & 1);  // (kBlockN, kD)
    const T* s_vn = ring_stage(smem.v, n & 1);  // (kBlockN, kD)
    float s[kNB][4] = {}, dp[kNB][4] = {};      // (16, kBlockN): q.k and d_o.v
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks)
#pragma unroll
      for (int nb = 0; nb < kNB; nb += 2) {
        uint32_t kb[4], vb[4];  // (16, 16) B fragments of k and v: two n-blocks each
        const int r = nb * 8 + lane % 8 + 8 * (lane / 16), c = ks * 16 + 8 * ((lane / 8) % 2);
        ldmatrix_x4(kb, smem_addr(s_kn + swz<kD>(r, c)));
        ldmatrix_x4(vb, smem_addr(s_vn + swz<kD>(r, c)));
        mma<T>(s[nb], qf[ks], kb[0], kb[1]);
        mma<T>(s[nb + 1], qf[ks], kb[2], kb[3]);
        mma<T>(dp[nb], of[ks], vb[0], vb[1]);
        mma<T>(dp[nb + 1], of[ks], vb[2], vb[3]);
      }
    const bool need_mask = rules::key_tile_straddles(p.mask, p.n_q, p.n_k, m0, n0, kBlockN);
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = m0 + warp * 16 + g + 8 * (e / 2), j = n0 + nb * 8 + 2 * t + e % 2;
        // P = exp2(x - lse2), the same expression as bwd_kv, so both kernels see the same P.
        float pe = rules::recompute_p(s[nb][e] * p.scale_log2, lse2[e / 2], [](float x) { return exp2_approx(x); });
        const bool masked = need_mask && (j >= p.n_k || !visible(p.mask, i, j, p.n_q, p.n_k));
        s[nb][e] = masked ? 0.f : pe * (dp[nb][e] - dd[e / 2]);  // dS; 0 where masked, whatever dP
      }
    // NaN blast radius: a masked dS = 0 times a non-finite k_j would reach rows that cannot see j; in a
    // tile straddling the mask such elements are zeroed for the dQ GEMM (S has read k already).
    if (need_mask) {
      __syncthreads();                                                    // every warp's S has read this tile's k
      scrub_nonfinite<kBlockN, kD, kThreads>(ring_stage(smem.k, n & 1));  // ends in a barrier
    }
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint32_t a[4] = {Storage<T>::pack(s[2 * kk][0], s[2 * kk][1]), Storage<T>::pack(s[2 * kk][2], s[2 * kk][3]),
                             Storage<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             Storage<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int db = 0; db < kDB; db += 2) {
        uint32_t kb[4];  // (16, 16) B fragment of k (transposed): two n-blocks
        ldmatrix_x4_trans(kb, smem_addr(s_kn + swz<kD>(kk * 16 + lane % 16, db * 8 + 8 * (lane / 16))));
        mma<T>(dq[db], a, kb[0], kb[1]);
        mma<T>(dq[db + 1], a, kb[2], kb[3]);
      }
    }
  }
  cp_async_wait<0>();
  store_dq_rows<T, kDB>(p, dq, b, h, m0 + warp * 16);
}

template <class T, int kD>
cudaError_t launch(const BwdParams& p, cudaStream_t stream) {
  constexpr int kBlockM = TiledTraits::kDqTile.block_m, kBlockN = TiledTraits::kDqTile.block_n;
  constexpr int smem = int(sizeof(TiledDqStorage<T, kD, kBlockM, kBlockN>));
  auto kernel = bwd_dq_kernel<T, kD, kBlockM, kBlockN>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  kernel<<<dim3((p.n_q + kBlockM - 1) / kBlockM, p.heads_q, p.batch), kBlockM * 2, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t tiled_backward_dq(const BwdParams& p, cudaStream_t stream) {
  return dtype_dim_switch<TiledTraits>(p.dtype, p.d, [&](auto type, auto dim) {
    return launch<typename decltype(type)::type, decltype(dim)::value>(p, stream);
  });
}

}  // namespace fc::cuda
