// cuda_wgmma deterministic d_q (sm_90a): the atomic-free half of the wgmma backward's deterministic
// variant (wgmma_backward.cu computes d_k, d_v). A CTA is one producer warpgroup and two consumer
// warpgroups and owns 128 query rows of one head, 64 per consumer, with d_q in registers for the
// whole walk over the key tiles those rows can see; d_q is written once, so the result is bitwise
// repeatable. The producer streams q and d_o once, then k and v tiles (two stages each, mbarrier
// full / empty pairs, as wgmma_forward.cu). Per key tile, in the forward's (queries x keys)
// orientation:
//   S  = q k^T, dP = d_o v^T               wgmma, both operands K-major in shared memory
//   P  = exp2(S scale log2 e - lse2),  dS = P (dP - D)   (fp32; the same expressions as the key-tile
//                                           kernel, from the same padded lse2 / D)
//   dQ += dS k                              wgmma, A from registers (T), B = k N-major
// dQ of tile n is still on the tensor cores while S and dP of tile n + 1 are issued, and P of a tile
// is computed while its dP GEMM runs.
#include <cuda.h>
#include <cuda_runtime.h>

#include "kernels/cuda/forward_common.cuh"
#include "kernels/cuda/nonfinite.cuh"
#include "kernels/cuda/static_switch.cuh"
#include "kernels/cuda/tiled_backward.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/wgmma_ops.cuh"
#include "kernels/cuda/wgmma_traits.hpp"
#include "contract/rules.h"

namespace fc::cuda {

// Shared memory of one CTA (wgmma.cuh's sw128_storage): q and d_o resident, the k and v rings, and
// their KvPipeline. (Outside an anonymous namespace: the sm_80 pass, which compiles no kernel body,
// would warn that its members go unused.)
template <class T, int kD>
struct WgmmaDqStorage {
  // (queries per CTA, keys per tile) of wgmma_traits.hpp: two consumers of 64 query rows.
  static constexpr int kBlockM = tile_for(WgmmaTraits::kDqTile, kD).block_m;
  static constexpr int kBlockN = tile_for(WgmmaTraits::kDqTile, kD).block_n;
  static_assert(kBlockM == 128, "two consumer warpgroups of 64 query rows");
  alignas(kSw128Align) T q[kBlockM * kD];             // (kBlockM, kD)
  alignas(kSw128Align) T d_o[kBlockM * kD];           // (kBlockM, kD)
  alignas(kSw128Align) T k[kKvStages][kBlockN * kD];  // (2, kBlockN, kD)
  alignas(kSw128Align) T v[kKvStages][kBlockN * kD];  // (2, kBlockN, kD)
  KvPipeline bar;
  static_assert(sizeof(k[0]) % kSw128Align == 0, "every stage of the ring starts on a swizzle atom");
};

namespace {

template <class T, int kD>
__global__ void __launch_bounds__(384, 1)
    wgmma_bwd_dq_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                        const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                        const BwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = WgmmaDqStorage<T, kD>;
  constexpr int kBlockM = S::kBlockM, kBlockN = S::kBlockN, kNB = kBlockN / 8, kDB = kD / 8, kPanels = kD / 64;
  constexpr uint32_t kQBytes = sizeof(S::q), kKVBytes = sizeof(S::k[0]);
  using ConsumerSync = NamedSync<256, 128>;
  extern __shared__ unsigned char smem_raw[];
  const SharedStorageRef<S> sm = sw128_storage<S>(smem_raw);
  S& smem = sm.s;
  KvPipeline& bar = smem.bar;  // resident_full: q and d_o
  const uint32_t s_q = sm.addr(smem.q), s_do = sm.addr(smem.d_o), s_k = sm.addr(smem.k), s_v = sm.addr(smem.v);

  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // longest causal rows first: better tail balance
  const int h = blockIdx.y, b = blockIdx.z, h_kv = h / (p.heads_q / p.heads_kv);
  const int m0 = m_block * kBlockM;
  const int n_tiles = rules::key_tile_count(p.mask, p.n_q, p.n_k, m0, kBlockM, kBlockN);

  if (threadIdx.x == 0) init_kv_pipeline(sm, bar, 8);
  __syncthreads();  // the last CTA-wide barrier

  if (wg == 0) {  // producer
    setmaxnreg_dec<24>();
    if (threadIdx.x == 0 && n_tiles > 0) {
      const int bh_q = b * p.heads_q + h, bh_kv = b * p.heads_kv + h_kv;
      const uint32_t qdo_full = sm.addr(bar.resident_full);
      mbar_arrive_expect_tx(qdo_full, 2 * kQBytes);
      for (int c = 0; c < kPanels; ++c) {
        tma_load_3d(s_q + c * kBlockM * 128, &tm_q, 64 * c, m0, bh_q, qdo_full);
        tma_load_3d(s_do + c * kBlockM * 128, &tm_do, 64 * c, m0, bh_q, qdo_full);
      }
      tma_stream_kv<kPanels, kBlockN>(&tm_k, &tm_v, s_k, s_v, kKVBytes, n_tiles, bh_kv, sm, bar);
    }
    return;
  }
  setmaxnreg_inc<240>();

  const int cw = wg - 1;                          // consumer warpgroup: rows [64 cw, 64 cw + 64) of the tile
  const int64_t row0 = m0 + cw * 64 + warp * 16;  // this warp's first query row
  // Per row g, g + 8: lse in base 2 and D, from the prep pass's padded copies (-inf and 0 past n_q,
  // and m0 + 128 <= n_q_pad), as the key-tile kernel reads them.
  float lse2[2], dd[2];
  int64_t nv[2];  // visible keys of the row: a prefix [0, nv) (attention.h)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = row0 + g + 8 * r, x = (int64_t(b) * p.heads_q + h) * p.n_q_pad + i;
    lse2[r] = p.lse2_pad[x];
    dd[r] = p.dd_pad[x];
    nv[r] = i < p.n_q ? n_visible(p.mask, i, p.n_q, p.n_k) : 0;
  }
  float dq[kDB][4];              // (16 rows, kD) per warp, fp32: the first dQ GEMM overwrites it
  float s[kNB][4], dp[kNB][4];   // (16 rows, kBlockN keys): S then P; dP
  uint32_t sa[kBlockN / 16][4];  // dS in T: register A fragments of dQ += dS k

  // Descriptors (address field += byte offset >> 4). S, dP: A = this consumer's 64 rows of q / d_o
  // (K-major), B = the k / v stage (K-major): a k-step is 32 bytes along a row, panels every 4.
  // dQ: B = the k stage N-major, a k-step is 16 key rows (2048 bytes), d panels kBlockN * 128 apart.
  const uint64_t desc_q = sw128_desc(s_q + cw * 64 * 128, 16, 1024),
                 desc_do = sw128_desc(s_do + cw * 64 * 128, 16, 1024);
  const uint64_t desc_k = sw128_desc(s_k, 16, 1024), desc_v = sw128_desc(s_v, 16, 1024);
  const uint64_t desc_kt = sw128_desc(s_k, kBlockN * 128, 1024);
  auto release = [&](Mbarrier& empty) {  // this warp no longer reads the stage
    __syncwarp();                        // every lane's accesses are ordered before lane 0's (release) arrive
    if (lane == 0) mbar_arrive(sm.addr(empty));
  };

  if (n_tiles > 0) mbar_wait(sm.addr(bar.resident_full), 0);
  for (PipelineState<kKvStages> kv{0}; kv.count < n_tiles; ++kv) {
    const int n = kv.count, cur = kv.index(), n0 = n * kBlockN;
    mbar_wait(sm.addr(bar.k_full[cur]), kv.phase());
    mbar_wait(sm.addr(bar.v_full[cur]), kv.phase());
    wgmma_fence();
    wgmma_kmajor<T, kBlockN, kD>(reinterpret_cast<float(&)[kBlockN / 2]>(s), desc_q, kBlockM * 128, desc_k,
                                 kBlockN * 128, cur * kKVBytes);
    wgmma_commit();
    wgmma_kmajor<T, kBlockN, kD>(reinterpret_cast<float(&)[kBlockN / 2]>(dp), desc_do, kBlockM * 128, desc_v,
                                 kBlockN * 128, cur * kKVBytes);
    wgmma_commit();
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) fence_operands(dp[nb]);  // in flight: untouched until the wait below
    wgmma_wait<1>();                                          // dQ of tile n - 1 and S of tile n are done
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) fence_operands(s[nb]);
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) fence_operands(sa[kk]);
    if (n > 0) release(bar.k_empty[cur ^ 1]);  // tile n - 1's k stage (the other of two): its dQ GEMM is done

    // Key j = n0 + col is visible to row i iff j < nv(i) (which also stops at n_k).
    int lim[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t x = nv[r] - n0;
      lim[r] = x < 0 ? 0 : x > kBlockN ? kBlockN : int(x);
    }
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        // P = exp2(x - lse2) with x = q.k * scale log2 e; an empty row (lse = -inf) gives P = 0.
        float pe = rules::recompute_p(s[nb][e] * p.scale_log2, lse2[e / 2], [](float x) { return exp2_approx(x); });
        if (nb * 8 + 2 * t + e % 2 >= lim[e / 2]) pe = 0.f;
        s[nb][e] = pe;
      }
    wgmma_wait<0>();  // dP of tile n is done: v's stage is free
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) fence_operands(dp[nb]);
    release(bar.v_empty[cur]);
    // dS = P (dP - D); where masked, 0 whatever dP (a non-finite v_j: 0 * inf). Two loops on a uniform
    // branch, so a tile without masked pairs runs no compare.
    const bool need_mask = rules::key_tile_straddles(p.mask, p.n_q, p.n_k, m0, n0, kBlockN);
    if (need_mask) {
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          dp[nb][e] = nb * 8 + 2 * t + e % 2 >= lim[e / 2] ? 0.f : s[nb][e] * (dp[nb][e] - dd[e / 2]);
    } else {
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[nb][e] = s[nb][e] * (dp[nb][e] - dd[e / 2]);
    }
    // dS rounded to T as the tensor-core operand; two adjacent C blocks are one k-step.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int nb = 2 * kk + x / 2, e = 2 * (x % 2);
        sa[kk][x] = Storage<T>::pack(dp[nb][e], dp[nb][e + 1]);
      }
    // NaN blast radius: in a tile straddling the mask, a masked dS = 0 times a non-finite k_j would reach
    // rows that cannot see j; such elements are zeroed for the dQ GEMM (S has read k already). Rows
    // that see j are inside the radius (their dS_ij is NaN but for a score of exactly -inf).
    if (need_mask) {
      ConsumerSync::sync();  // both consumers' S GEMMs have read this k stage
      if (scrub_nonfinite<kBlockN, kD, 256, ConsumerSync>(sm.stage(smem.k, cur))) {
        fence_proxy_async();  // the scrub's stores must reach the dQ GEMM's reads
        ConsumerSync::sync();
      }
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
      wgmma_rs_tb<T, kD>(reinterpret_cast<float(&)[kD / 2]>(dq), sa[kk],
                         desc_kt + ((cur * kKVBytes + kk * 16 * 128) >> 4), n > 0 || kk > 0);
    wgmma_commit();
  }
  wgmma_wait<0>();
#pragma unroll
  for (int db = 0; db < kDB; ++db) {
    fence_operands(dq[db]);
    if (n_tiles == 0) dq[db][0] = dq[db][1] = dq[db][2] = dq[db][3] = 0.f;  // no visible key: d_q = 0
  }
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) fence_operands(sa[kk]);

  store_dq_rows<T, kDB>(p, dq, b, h, row0);
#else
  __trap();  // built without sm_90a: the launchers check device_is_sm90() first
#endif
}

template <class T, int kD>
cudaError_t launch(const BwdParams& p, cudaStream_t stream) {
  using S = WgmmaDqStorage<T, kD>;
  constexpr int kSmemBytes = sw128_smem_bytes<S>();
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an sm_90 CTA may have");
  const Problem& pr = p.pr;
  CUtensorMap maps[4];  // q, d_o, k, v
  if (!tensor_map(&maps[0], p.q, pr.dtype, kD, pr.n_q, pr.batch * pr.heads_q, S::kBlockM) ||
      !tensor_map(&maps[1], p.d_o, pr.dtype, kD, pr.n_q, pr.batch * pr.heads_q, S::kBlockM) ||
      !tensor_map(&maps[2], p.k, pr.dtype, kD, pr.n_k, pr.batch * pr.heads_kv, S::kBlockN) ||
      !tensor_map(&maps[3], p.v, pr.dtype, kD, pr.n_k, pr.batch * pr.heads_kv, S::kBlockN))
    return cudaErrorInvalidValue;
  auto kernel = wgmma_bwd_dq_kernel<T, kD>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid((pr.n_q + S::kBlockM - 1) / S::kBlockM, pr.heads_q, pr.batch);
  kernel<<<grid, 384, kSmemBytes, stream>>>(maps[0], maps[1], maps[2], maps[3], p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t wgmma_backward_dq(const BwdParams& p, cudaStream_t stream) {
  return dtype_dim_switch<WgmmaTraits>(p.dtype, p.d, [&](auto type, auto dim) {
    return launch<typename decltype(type)::type, decltype(dim)::value>(p, stream);
  });
}

}  // namespace fc::cuda
