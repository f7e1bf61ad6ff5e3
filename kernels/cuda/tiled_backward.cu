// cuda_tiled backward by recomputation (FlashAttention-2): P is rebuilt from the saved lse, never
// stored. Kernels, in launch order:
//   bwd_prep  D_i = rowsum(d_o_i * o_i) (fp32), and zero the fp32 d_q accumulator
//   bwd_kv    a CTA owns kBlockN keys of one kv head; it walks every query tile of every query head
//             sharing that kv head (GQA sums in registers), keeping d_k, d_v in registers. With
//             kAtomicDq it also adds its dS K share of d_q into the accumulator with fp32 atomics.
//   bwd_dq_convert  d_q = T(scale * accumulator)                          (atomic variant)
//   bwd_dq    deterministic variant: a CTA owns a query tile, walks the key tiles and recomputes
//             P and dS once more; d_q stays in registers, so its bits never depend on timing.
// Each warp owns 16 rows (keys in bwd_kv, queries in bwd_dq); layouts as in mma.cuh.
#include <cuda_runtime.h>

#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mutant_switch.cuh"
#include "kernels/cuda/nonfinite.cuh"
#include "kernels/cuda/static_switch.cuh"
#include "kernels/cuda/tiled_backward.cuh"
#include "kernels/cuda/tiled_traits.hpp"
#include "contract/rules.h"

namespace fc::cuda {
namespace {

// One warp per padded query row (bh, i), i < n_q_pad; rows past n_q only write the padding.
__global__ void __launch_bounds__(256) bwd_prep_kernel(BwdParams p, bool zero_acc) {
  const int64_t prow = int64_t(blockIdx.x) * 8 + threadIdx.x / 32, prows = int64_t(p.batch) * p.heads_q * p.n_q_pad;
  const int lane = threadIdx.x % 32;
  if (prow >= prows) return;
  const int64_t bh = prow / p.n_q_pad, i = prow % p.n_q_pad, row = bh * p.n_q + i;
  if (i >= p.n_q) {
    if (lane == 0) p.lse2_pad[prow] = rules::neg_inf<float>(), p.dd_pad[prow] = 0.f;
    return;
  }
  float dot = 0.f;
  for (int c = lane; c < p.d; c += 32) {
    const int64_t x = row * p.d + c;
    dot += to_f(p.dtype, p.d_o, x) * to_f(p.dtype, p.o, x);  // o as stored (rounded), like autograd
    if (zero_acc) p.dq_acc[x] = 0.f;
  }
  for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
  if (lane == 0) {
    p.dd[row] = dot;
    p.dd_pad[prow] = dot;
    p.lse2_pad[prow] = p.lse[row] * float(rules::kLog2e);
  }
}

template <class T>
__global__ void __launch_bounds__(256) bwd_dq_convert_kernel(const float* acc, T* d_q, int64_t n, float scale) {
  for (int64_t x = blockIdx.x * int64_t(256) + threadIdx.x; x < n; x += int64_t(gridDim.x) * 256)
    d_q[x] = Storage<T>::from_float(acc[x] * scale);
}

// d_q = T(scale * acc) from an accumulator padded to n_q_pad rows per head (b, h_q, n_q_pad, d): the
// layout of Fault::TiledDqAccPad32 only (FlashAttention-2's dq_accum), read with 64-bit offsets.
template <class T>
__global__ void __launch_bounds__(256)
    bwd_dq_convert_padded_kernel(const float* acc, T* d_q, int64_t n, int n_q, int n_q_pad, int d, float scale) {
  for (int64_t x = blockIdx.x * int64_t(256) + threadIdx.x; x < n; x += int64_t(gridDim.x) * 256) {
    const int64_t row = x / d, c = x % d, bh = row / n_q, i = row % n_q;
    d_q[x] = Storage<T>::from_float(acc[(bh * n_q_pad + i) * d + c] * scale);
  }
}

// What follows a key-tile CTA's tiles in shared memory: with kAtomicDq the dS^T tile of the d_q GEMM,
// then two stages of lse2 and D (fp32) per query.
template <class T, int kBlockM, int kBlockN, bool kAtomicDq>
struct TiledKvStepStorage {
  T ds[kBlockN * kBlockM];  // (kBlockN, kBlockM) dS^T, swizzled
  float lse2[2][kBlockM];   // (2, kBlockM) lse in base 2
  float dd[2][kBlockM];     // (2, kBlockM) D
};
template <class T, int kBlockM, int kBlockN>
struct TiledKvStepStorage<T, kBlockM, kBlockN, false> {
  float lse2[2][kBlockM];  // (2, kBlockM)
  float dd[2][kBlockM];    // (2, kBlockM)
};

// Shared memory of one CTA: the k and v tiles, two stages of q and d_o (swizzled, filled by cp.async in
// 16-byte chunks), then the step's part.
template <class T, int kD, int kBlockM, int kBlockN, bool kAtomicDq>
struct TiledKvStorage {
  alignas(128) T k[kBlockN * kD];  // (kBlockN, kD)
  T v[kBlockN * kD];               // (kBlockN, kD)
  T q[2][kBlockM * kD];            // (2, kBlockM, kD)
  T d_o[2][kBlockM * kD];          // (2, kBlockM, kD)
  TiledKvStepStorage<T, kBlockM, kBlockN, kAtomicDq> step;
};

// kFault: a planted fault of a CUDA mutant, Fault::None for the real kernel; the body reads what it
// changes from FaultTraits<kFault> (mutant_traits.hpp).
template <class T, int kD, int kBlockM, int kBlockN, bool kAtomicDq, Fault kFault = Fault::None>
__global__ void __launch_bounds__(kBlockN * 2) bwd_kv_kernel(const BwdParams p) {
  constexpr int kThreads = kBlockN * 2, kWarps = kBlockN / 16;
  constexpr int kMB = kBlockM / 8, kDB = kD / 8;
  static_assert(kBlockN % 16 == 0, "a warp owns 16 keys");
  static_assert(kBlockM % 32 == 0, "q and d_o are read two 8-query n-blocks at a time; dS^T rows are swizzled");
  static_assert(kD % 64 == 0, "d_q units of 32 columns; rows of k, v, q and d_o of 8 chunks");
  using S = TiledKvStorage<T, kD, kBlockM, kBlockN, kAtomicDq>;
  using F = FaultTraits<kFault>;
  static_assert(sizeof(S) <= kMaxSmemSm80, "shared memory of an sm_80 CTA");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  S& smem = *reinterpret_cast<S*>(smem_raw);
  T* s_k = smem.k;                   // (kBlockN, kD)
  T* s_v = smem.v;                   // (kBlockN, kD)
  T* s_q = smem.q[0];                // (2, kBlockM, kD)
  T* s_do = smem.d_o[0];             // (2, kBlockM, kD)
  float* s_lse = smem.step.lse2[0];  // (2, kBlockM), base 2
  float* s_dd = smem.step.dd[0];     // (2, kBlockM)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.x * kBlockN, h_kv = blockIdx.y, b = blockIdx.z;
  const int group = p.heads_q / p.heads_kv;
  const T* k = static_cast<const T*>(p.k) + offset_kv(p.pr, b, h_kv, n0);  // (kBlockN, kD) tile
  const T* v = static_cast<const T*>(p.v) + offset_kv(p.pr, b, h_kv, n0);  // (kBlockN, kD) tile

  // Query tiles [mb_begin, mb_end) can see some key of this tile.
  const int mb_end = (p.n_q + kBlockM - 1) / kBlockM;
  int mb_begin = 0;
  if (p.mask != Mask::None) {
    const int64_t first = rules::first_query_tile(p.mask, p.n_q, p.n_k, n0, kBlockM);
    mb_begin = first < mb_end ? int(first) : mb_end;
  }
  const int n_mb = mb_end - mb_begin, n_iters = group * n_mb;

  auto prefetch = [&](int it, int buf) {
    const int h = h_kv * group + it / n_mb, m0 = (mb_begin + it % n_mb) * kBlockM;
    const int64_t row0 = offset_lse(p.pr, b, h, m0);
    load_tile<kBlockM, kD, kThreads>(ring_stage(smem.q, buf), static_cast<const T*>(p.q) + row0 * kD, p.n_q - m0);
    load_tile<kBlockM, kD, kThreads>(ring_stage(smem.d_o, buf), static_cast<const T*>(p.d_o) + row0 * kD, p.n_q - m0);
    for (int x = threadIdx.x; x < kBlockM; x += kThreads) {
      const bool in = m0 + x < p.n_q;  // rows past n_q: lse = -inf makes their P exactly 0
      s_lse[buf * kBlockM + x] = in ? p.lse[row0 + x] * float(rules::kLog2e) : rules::neg_inf<float>();
      s_dd[buf * kBlockM + x] = in ? p.dd[row0 + x] : 0.f;
    }
  };

  float dk[kDB][4] = {}, dv[kDB][4] = {};  // (16, kD) per warp, fp32
  load_tile<kBlockN, kD, kThreads>(s_k, k, p.n_k - n0);
  load_tile<kBlockN, kD, kThreads>(s_v, v, p.n_k - n0);
  if (n_iters > 0) prefetch(0, 0);
  cp_async_commit();
  for (int it = 0; it < n_iters; ++it) {
    const int buf = it & 1, h = h_kv * group + it / n_mb, m0 = (mb_begin + it % n_mb) * kBlockM;
    cp_async_wait<0>();  // this step's q, d_o (issued one step ago) have landed
    __syncthreads();     // ... for every thread; and every warp is done with the previous step
    if (it + 1 < n_iters) prefetch(it + 1, buf ^ 1);  // into the buffers the previous step read
    cp_async_commit();
    // NaN blast radius: a masked dS = 0 times a non-finite k_j in the d_q GEMM would reach rows that
    // cannot see j; such elements of the resident k tile are zeroed once (rows that see j are inside
    // the radius: S^T then reads the zero too).
    if constexpr (kAtomicDq)
      if (it == 0) scrub_nonfinite<kBlockN, kD, kThreads>(s_k);  // ends in a barrier
    const T* s_qb = ring_stage(smem.q, buf);                     // (kBlockM, kD)
    const T* s_dob = ring_stage(smem.d_o, buf);                  // (kBlockM, kD)

    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys: (16, kBlockM) each.
    float pt[kMB][4] = {}, dpt[kMB][4] = {};  // (16, kBlockM) each: S^T then P^T; dP^T then dS^T
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t ka[4], va[4];  // (16, 16) A fragments of k and v
      ldmatrix_x4(ka, smem_addr(s_k + swz<kD>(warp * 16 + lane % 16, ks * 16 + 8 * (lane / 16))));
      ldmatrix_x4(va, smem_addr(s_v + swz<kD>(warp * 16 + lane % 16, ks * 16 + 8 * (lane / 16))));
#pragma unroll
      for (int mb = 0; mb < kMB; mb += 2) {
        uint32_t qb[4], ob[4];  // (16, 16) B fragments of q and d_o: two n-blocks each
        const int r = mb * 8 + lane % 8 + 8 * (lane / 16), c = ks * 16 + 8 * ((lane / 8) % 2);
        ldmatrix_x4(qb, smem_addr(s_qb + swz<kD>(r, c)));
        ldmatrix_x4(ob, smem_addr(s_dob + swz<kD>(r, c)));
        mma<T>(pt[mb], ka, qb[0], qb[1]);
        mma<T>(pt[mb + 1], ka, qb[2], qb[3]);
        mma<T>(dpt[mb], va, ob[0], ob[1]);
        mma<T>(dpt[mb + 1], va, ob[2], ob[3]);
      }
    }
    const bool need_mask = rules::key_tile_straddles(p.mask, p.n_q, p.n_k, m0, n0, kBlockN);
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int il = mb * 8 + 2 * t + e % 2;  // query column within the tile
        const int64_t i = m0 + il, j = n0 + warp * 16 + g + 8 * (e / 2);
        // P = exp2(x - lse2) with x = q.k * scale log2 e; an empty row (lse = -inf) gives P = 0.
        float pe = rules::recompute_p(pt[mb][e] * p.scale_log2, s_lse[buf * kBlockM + il],
                                      [](float x) { return exp2_approx(x); });
        const bool masked = need_mask && (j >= p.n_k || i >= p.n_q || !visible(p.mask, i, j, p.n_q, p.n_k));
        pt[mb][e] = masked ? 0.f : pe;
        // dS = P (dP - D); 0 where masked, whatever dP (a non-finite v_j)
        dpt[mb][e] = masked ? 0.f : pe * (dpt[mb][e] - s_dd[buf * kBlockM + il]);
      }
    // NaN blast radius: in a step straddling the mask, a masked dS = 0 times a non-finite q_i would reach
    // keys row i cannot see through dK; such elements of the q buffer are zeroed (S^T has read it).
    if (need_mask) {
      __syncthreads();                                                  // every warp's S^T has read this step's q
      scrub_nonfinite<kBlockM, kD, kThreads>(ring_stage(smem.q, buf));  // ends in a barrier
    }
    // dV += P^T dO and dK += dS^T Q; P and dS rounded to T as tensor-core operands.
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) {
      const uint32_t pa[4] = {Storage<T>::pack(pt[2 * kk][0], pt[2 * kk][1]),
                              Storage<T>::pack(pt[2 * kk][2], pt[2 * kk][3]),
                              Storage<T>::pack(pt[2 * kk + 1][0], pt[2 * kk + 1][1]),
                              Storage<T>::pack(pt[2 * kk + 1][2], pt[2 * kk + 1][3])};
      const uint32_t sa[4] = {Storage<T>::pack(dpt[2 * kk][0], dpt[2 * kk][1]),
                              Storage<T>::pack(dpt[2 * kk][2], dpt[2 * kk][3]),
                              Storage<T>::pack(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]),
                              Storage<T>::pack(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
#pragma unroll
      for (int db = 0; db < kDB; db += 2) {
        uint32_t ob[4], qb[4];  // (16, 16) B fragments of d_o and q (transposed): two n-blocks each
        const int r = kk * 16 + lane % 16, c = db * 8 + 8 * (lane / 16);
        ldmatrix_x4_trans(ob, smem_addr(s_dob + swz<kD>(r, c)));
        ldmatrix_x4_trans(qb, smem_addr(s_qb + swz<kD>(r, c)));
        mma<T>(dv[db], pa, ob[0], ob[1]);
        mma<T>(dv[db + 1], pa, ob[2], ob[3]);
        mma<T>(dk[db], sa, qb[0], qb[1]);
        mma<T>(dk[db + 1], sa, qb[2], qb[3]);
      }
      if constexpr (kAtomicDq) {       // stage dS^T (keys x queries) for the d_q GEMM below
        T* const s_ds = smem.step.ds;  // (kBlockN, kBlockM)
        const int row = warp * 16 + g;
        *reinterpret_cast<uint32_t*>(s_ds + swz<kBlockM>(row, kk * 16 + 2 * t)) = sa[0];
        *reinterpret_cast<uint32_t*>(s_ds + swz<kBlockM>(row + 8, kk * 16 + 2 * t)) = sa[1];
        *reinterpret_cast<uint32_t*>(s_ds + swz<kBlockM>(row, kk * 16 + 8 + 2 * t)) = sa[2];
        *reinterpret_cast<uint32_t*>(s_ds + swz<kBlockM>(row + 8, kk * 16 + 8 + 2 * t)) = sa[3];
      }
    }
    if constexpr (kAtomicDq) {
      __syncthreads();
      // d_q tile (kBlockM, kD) += dS K, in (16 rows, 32 columns) units spread over the warps.
      constexpr int kUnits = (kBlockM / 16) * (kD / 32);
      T* const s_ds = smem.step.ds;                         // (kBlockN, kBlockM)
      float* acc_bh = p.dq_acc + offset_q(p.pr, b, h, m0);  // (kBlockM, kD)
      if constexpr (F::kDqAccPadded32)  // (b, h_q, n_q_pad, kD), its offset in 32-bit int arithmetic
        acc_bh = p.dq_acc + element_offset<true>(((int64_t(b) * p.heads_q + h) * p.n_q_pad + m0) * kD);
      for (int u = warp; u < kUnits; u += kWarps) {
        const int r0 = (u / (kD / 32)) * 16, c0 = (u % (kD / 32)) * 32;
        float dq[4][4] = {};  // (16, 32) d_q unit of this warp
#pragma unroll
        for (int ks = 0; ks < kBlockN / 16; ++ks) {
          uint32_t a[4];  // (16, 16) A fragment of dS
          ldmatrix_x4_trans(
              a, smem_addr(s_ds + swz<kBlockM>(ks * 16 + lane % 8 + 8 * (lane / 16), r0 + 8 * ((lane / 8) % 2))));
#pragma unroll
          for (int cb = 0; cb < 4; cb += 2) {
            uint32_t kb[4];  // (16, 16) B fragment of k: two n-blocks
            ldmatrix_x4_trans(kb, smem_addr(s_k + swz<kD>(ks * 16 + lane % 16, c0 + cb * 8 + 8 * (lane / 16))));
            mma<T>(dq[cb], a, kb[0], kb[1]);
            mma<T>(dq[cb + 1], a, kb[2], kb[3]);
          }
        }
#pragma unroll
        for (int cb = 0; cb < 4; ++cb)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int row = r0 + g + 8 * r;
            if (m0 + row >= p.n_q) continue;
            float* dst = acc_bh + int64_t(row) * kD + c0 + cb * 8 + 2 * t;  // 8-byte aligned pair
            if constexpr (!F::kDqAtomicAdd) {  // not atomic: other CTAs add to the same rows
              float2* d2 = reinterpret_cast<float2*>(dst);
              const float2 x = *d2;
              *d2 = make_float2(x.x + dq[cb][2 * r], x.y + dq[cb][2 * r + 1]);
              continue;
            }
#if __CUDA_ARCH__ >= 900
            atomicAdd(reinterpret_cast<float2*>(dst), make_float2(dq[cb][2 * r], dq[cb][2 * r + 1]));
#else
            atomicAdd(dst, dq[cb][2 * r]);
            atomicAdd(dst + 1, dq[cb][2 * r + 1]);
#endif
          }
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = n0 + warp * 16 + g + 8 * r;
    if (j >= p.n_k) continue;
    T* dk_row = static_cast<T*>(p.d_k) + offset_kv(p.pr, b, h_kv, j);  // (kD)
    T* dv_row = static_cast<T*>(p.d_v) + offset_kv(p.pr, b, h_kv, j);  // (kD)
#pragma unroll
    for (int db = 0; db < kDB; ++db) {
      *reinterpret_cast<uint32_t*>(dk_row + db * 8 + 2 * t) =
          Storage<T>::pack(dk[db][2 * r] * p.scale, dk[db][2 * r + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(dv_row + db * 8 + 2 * t) = Storage<T>::pack(dv[db][2 * r], dv[db][2 * r + 1]);
    }
  }
}

// A mutant (kFault set) runs the atomic variant only.
template <class T, int kD, int kBlockM, int kBlockN, Fault kFault = Fault::None>
cudaError_t launch(const BwdParams& p, bool deterministic, cudaStream_t stream) {
  backward_prep(p, !deterministic, stream);
  using F = FaultTraits<kFault>;
  constexpr int smem_base = int(sizeof(TiledKvStorage<T, kD, kBlockM, kBlockN, false>));
  const dim3 grid((p.n_k + kBlockN - 1) / kBlockN, p.heads_kv, p.batch);
  cudaError_t e;
  if (!deterministic) {
    auto kernel = bwd_kv_kernel<T, kD, kBlockM, kBlockN, true, kFault>;
    constexpr int smem = int(sizeof(TiledKvStorage<T, kD, kBlockM, kBlockN, true>));
    if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) != cudaSuccess) return e;
    if constexpr (F::kDqAccPadded32) {  // the padded accumulator, zeroed whole
      const int64_t n = int64_t(p.batch) * p.heads_q * p.n_q_pad * kD;
      if ((e = cudaMemsetAsync(p.dq_acc, 0, size_t(n) * sizeof(float), stream)) != cudaSuccess) return e;
    }
    kernel<<<grid, kBlockN * 2, smem, stream>>>(p);
    if constexpr (F::kDqAccPadded32) {
      const int64_t n = int64_t(p.batch) * p.heads_q * p.n_q * kD;
      const unsigned blocks = unsigned((n + 255) / 256 < 65536 ? (n + 255) / 256 : 65536);
      bwd_dq_convert_padded_kernel<T>
          <<<blocks, 256, 0, stream>>>(p.dq_acc, static_cast<T*>(p.d_q), n, p.n_q, p.n_q_pad, kD, p.scale);
    } else {
      backward_dq_convert(p, stream);
    }
  } else if constexpr (kFault != Fault::None) {
    return cudaErrorInvalidValue;
  } else {
    auto kernel = bwd_kv_kernel<T, kD, kBlockM, kBlockN, false>;
    if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_base)) != cudaSuccess)
      return e;
    kernel<<<grid, kBlockN * 2, smem_base, stream>>>(p);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if ((e = tiled_backward_dq(p, stream)) != cudaSuccess) return e;
  }
  return cudaGetLastError();
}

}  // namespace

void backward_prep(const BwdParams& p, bool zero_acc, cudaStream_t stream) {
  const int64_t prows = int64_t(p.batch) * p.heads_q * p.n_q_pad;
  bwd_prep_kernel<<<unsigned((prows + 7) / 8), 256, 0, stream>>>(p, zero_acc);
}

void backward_dq_convert(const BwdParams& p, cudaStream_t stream) {
  const int64_t n = int64_t(p.batch) * p.heads_q * p.n_q * p.d;
  const unsigned blocks = unsigned((n + 255) / 256 < 65536 ? (n + 255) / 256 : 65536);
  (void)dtype_switch<TiledTraits>(p.dtype, [&](auto type) {  // the wgmma backward's dtypes are the same
    using T = typename decltype(type)::type;
    bwd_dq_convert_kernel<T><<<blocks, 256, 0, stream>>>(p.dq_acc, static_cast<T*>(p.d_q), n, p.scale);
    return cudaSuccess;
  });
}

size_t TiledTraits::backward_workspace_bytes(const Problem& p) { return backward_workspace_bytes_of(p); }

size_t padded_dq_workspace_offset(const Problem& p) { return (backward_workspace_bytes_of(p) + 255) / 256 * 256; }

size_t padded_dq_workspace_bytes(const Problem& p) {
  return padded_dq_workspace_offset(p) + size_t(p.batch) * p.heads_q * padded_rows(p.n_q) * p.d * sizeof(float);
}

// The tiles of tiled_traits.hpp, for its dtypes and head dims.
cudaError_t TiledTraits::backward(const Problem& pr, Tile t, bool deterministic, const BackwardArgs& a, void* workspace,
                                  cudaStream_t stream) {
  if (!well_formed(pr)) return cudaErrorInvalidValue;
  if (t == Tile{}) t = tile_for(kBackwardDefault, pr.d);
  const BwdParams p = make_bwd_params(pr, a, workspace);
  return dtype_dim_switch<TiledTraits>(pr.dtype, pr.d, [&](auto type, auto dim) {
    using T = typename decltype(type)::type;
    constexpr int kD = decltype(dim)::value;
    return tile_switch<kBackwardTiles, kD>(t, [&](auto i) {
      constexpr BuiltTile x = kBackwardTiles[decltype(i)::value];
      return launch<T, kD, x.block_m, x.block_n>(p, deterministic, stream);
    });
  });
}

// A CUDA mutant's backward (mutant_traits.hpp): its one tile, dtype and head dim, with its fault
// (the atomic d_q variant).
cudaError_t tiled_backward_mutant(Fault f, const Problem& pr, const BackwardArgs& a, void* workspace,
                                  cudaStream_t stream) {
  if (!well_formed(pr)) return cudaErrorInvalidValue;
  BwdParams p = make_bwd_params(pr, a, workspace);
  if (f == Fault::TiledDqAccPad32)  // its padded accumulator past the workspace of the real kernel
    p.dq_acc = reinterpret_cast<float*>(static_cast<char*>(workspace) + padded_dq_workspace_offset(pr));
  return mutant_switch<FaultSite::TiledBackward>(f, pr, [&](auto i) {
    constexpr CudaMutant m = kCudaMutants[decltype(i)::value];
    return launch<MutantStorage<decltype(i)::value>, m.d, m.backward.block_m, m.backward.block_n, m.fault>(p, false,
                                                                                                           stream);
  });
}

}  // namespace fc::cuda
