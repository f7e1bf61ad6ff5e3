// NaN blast radius for the tiled forward (docs/SEMANTICS.md). Host and device; included by tiled_forward.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "contract/attention.h"
#include "kernels/cuda/mma.cuh"

namespace fc::cuda {

// Who takes part in the barriers below: the whole CTA, or (a warp-specialised kernel) the kThreads
// threads that arrive at named barrier 1 -- the producer warps of wgmma_forward.cu never do.
struct CtaSync {
  static __device__ __forceinline__ int tid() { return threadIdx.x; }
  static __device__ __forceinline__ void sync() { __syncthreads(); }
  static __device__ __forceinline__ bool sync_or(bool x) { return __syncthreads_or(x); }
};
template <int kThreads, int kFirstThread>
struct NamedSync {
  static __device__ __forceinline__ int tid() { return int(threadIdx.x) - kFirstThread; }
  static __device__ __forceinline__ void sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory"); }
  static __device__ __forceinline__ bool sync_or(bool x) {
    uint32_t r;
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, 1, %2, p;\nselp.u32 %0, 1, 0, q;\n}\n"
                 : "=r"(r)
                 : "r"(uint32_t(x)), "n"(kThreads)
                 : "memory");
    return r != 0;
  }
};

// NaN blast radius (docs/SEMANTICS.md): in a tile straddling the mask, a row that cannot see key j still
// multiplies P_ij = 0 by v_j inside the mma, and 0 * NaN (or 0 * inf) = NaN would poison it. Where
// such a tile's v holds a non-finite value (rare: one scan of the tile, only on masked tiles), zero
// it in shared memory -- the blind rows then get exactly the bits of a finite run -- and true
// contributions are re-added (readd_nonfinite_v) from global memory for the rows that do see it.
template <int kBlockN, int kD, int kThreads, class Sync = CtaSync, class T>
__device__ bool scrub_nonfinite(T* tile) {
  constexpr uint16_t kExp = std::is_same_v<T, __half> ? 0x7C00 : 0x7F80;  // all-ones exponent: inf, NaN
  bool found = false;
#pragma unroll
  for (int c = Sync::tid(); c < kBlockN * kD / 8; c += kThreads) {
    uint16_t* x = reinterpret_cast<uint16_t*>(tile) + c * 8;  // one 16-byte chunk
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if ((x[e] & kExp) == kExp) x[e] = 0, found = true;
  }
  return Sync::sync_or(found);
}

// o += P_ij v_jk for every non-finite v_jk of this k/v tile that row i sees, P as the mma used it
// (rounded to T). P goes through the (kD, kBlockN) scratch s_p, kD rows per phase. Every thread of
// Sync calls it (it holds barriers).
template <int kD, int kBlockM, int kBlockN, int kMT, class Sync = CtaSync, class T>
__device__ __forceinline__ void readd_nonfinite_v(float (&o)[kMT][kD / 8][4],
                                                  const uint32_t (&pa)[kMT][kBlockN / 16][4],
                                                  T* s_p /* (kD, kBlockN) */, const T* v /* (n_k, kD) */, Mask mask,
                                                  int64_t n_q, int64_t n_k, int m0, int w0, int n0) {
  constexpr int kNB = kBlockN / 8, kDB = kD / 8;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int ph = 0; ph * kD < kBlockM; ++ph) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = w0 + mt * 16 + g + 8 * r - ph * kD;
        if (row < 0 || row >= kD) continue;
#pragma unroll
        for (int nb = 0; nb < kNB; ++nb)
          *reinterpret_cast<uint32_t*>(s_p + row * kBlockN + nb * 8 + 2 * t) = pa[mt][nb / 2][(nb % 2) * 2 + r];
      }
    Sync::sync();
    for (int jl = 0; jl < kBlockN && n0 + jl < n_k; ++jl) {
      const int64_t j = n0 + jl;
#pragma unroll
      for (int db = 0; db < kDB; ++db)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float vv = Storage<T>::to_float(v[j * kD + db * 8 + 2 * t + e]);
          if (isfinite(vv)) continue;
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int row = w0 + mt * 16 + g + 8 * r - ph * kD;
              if (row < 0 || row >= kD || !visible(mask, m0 + ph * kD + row, j, n_q, n_k)) continue;
              o[mt][db][2 * r + e] += Storage<T>::to_float(s_p[row * kBlockN + jl]) * vv;  // P as the mma used it
            }
        }
    }
    Sync::sync();
  }
}

}  // namespace fc::cuda
