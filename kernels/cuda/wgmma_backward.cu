// cuda_wgmma backward by recomputation on Hopper's warpgroup tensor cores and TMA (sm_90a): the
// key-tile pass of tiled_backward.cu's pipeline (bwd_prep and the d_q conversion are shared).
// A CTA is one producer warpgroup and kWG consumer warpgroups and owns kBlockN = 64 kWG keys of one
// kv head; consumer c owns 64 of them, with d_k, d_v in registers for the whole walk. The producer
// streams q and d_o tiles (kBlockM queries, two stages) of every query head sharing the kv head, with
// their lse2 and D (from padded copies bwd_prep writes, so every block is one in-bounds TMA box). Per
// step, all in the transposed (keys x queries) orientation so P^T and dS^T come out of the
// accumulators in the register A layout of the next GEMM:
//   S^T  = K Q^T, dP^T = V dO^T             wgmma, both operands K-major in shared memory
//   P^T  = exp2(S^T scale log2 e - lse2),  dS^T = P^T (dP^T - D)   (fp32, as tiled_backward.cu)
//   dV  += P^T dO,  dK += dS^T Q            wgmma, A from registers (T), B N-major
//   dQ  += dS K                              dS^T staged in shared memory (A M-major); the fp32 block
//                                            goes through shared memory into a TMA reduce-add
// The work of a step is ordered so the tensor cores have a GEMM in flight through most of the
// element-wise work: P^T is computed while dP^T's GEMM runs, dS^T is staged while dV's runs.
// Queries per step: 64 at d = 128, 128 at d = 64 (the GEMMs of a small head dim are short; a longer
// step amortises the element-wise work and halves the steps). Consumer c computes a (64, 64) block of
// the step's d_q from all keys of the tile -- columns [64 c, 64 c + 64) at d = 128, query rows
// [64 c, 64 c + 64) at d = 64 -- after a consumer barrier that makes every dS^T row visible.
// The deterministic variant runs this kernel without the d_q GEMM (kAtomicDq = false) and takes d_q
// from wgmma_backward_dq.cu, which owns query rows and needs no atomics.
#include <cuda.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/cuda/mutant_switch.cuh"
#include "kernels/cuda/nonfinite.cuh"
#include "kernels/cuda/static_switch.cuh"
#include "kernels/cuda/tiled_backward.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/wgmma_ops.cuh"
#include "kernels/cuda/wgmma_traits.hpp"
#include "contract/rules.h"

namespace fc::cuda {

// Queries per step: the N of S^T and dP^T, the K of dV and dK (wgmma_traits.hpp).
template <int kD>
constexpr int bwd_block_m() {
  return tile_for(WgmmaTraits::kBackwardDefault, kD).block_m;
}

// The mbarriers of the pipeline: k and v resident for the CTA's life (one arrival: the producer's
// expect_tx), then kQdoStages stages each of the q / d_o full barriers (the same) and their empty
// barriers (one arrival per consumer warp).
constexpr int kQdoStages = 2;
struct BwdPipeline {
  Mbarrier kv_full;
  Mbarrier qdo_full[kQdoStages], qdo_empty[kQdoStages];
};

// Per query of a q / d_o stage: lse in base 2 (-inf past n_q) and D (0 past n_q), both by TMA.
template <int kBlockM>
struct WgmmaBwdRows {
  float lse2[kQdoStages][kBlockM];  // (2, kBlockM)
  float dd[kQdoStages][kBlockM];    // (2, kBlockM)
};

// What follows the k, v, q and d_o tiles in shared memory. With kAtomicDq: the dS^T stages of the d_q
// GEMM, the rows, the consumers' fp32 d_q blocks of the TMA reduce-add, the barriers.
template <class T, int kBlockM, int kBlockN, int kWG, bool kAtomicDq>
struct WgmmaBwdStepStorage {
  alignas(kSw128Align) T ds[kQdoStages][kBlockN * kBlockM];  // dS^T (keys, queries), SW128 panels of queries
  WgmmaBwdRows<kBlockM> rows;
  alignas(kSw128Align) float dq[kWG][64 * 64];  // a consumer's (64, 64) d_q block, SW128 fp32 panels
  BwdPipeline bar;
  static_assert(sizeof(ds[0]) % kSw128Align == 0 && sizeof(dq[0]) % kSw128Align == 0,
                "every stage and block starts on a swizzle atom");
};
// Without (the deterministic variant, d_q from wgmma_backward_dq.cu): the rows and the barriers.
template <class T, int kBlockM, int kBlockN, int kWG>
struct WgmmaBwdStepStorage<T, kBlockM, kBlockN, kWG, false> {
  WgmmaBwdRows<kBlockM> rows;
  BwdPipeline bar;
};

// Shared memory of one CTA (wgmma.cuh's sw128_storage). (Outside an anonymous namespace: the sm_80
// pass, which compiles no kernel body, would warn that its members go unused.)
template <class T, int kD, int kWG, bool kAtomicDq>
struct WgmmaBwdStorage {
  static constexpr int kBlockN = 64 * kWG, kBlockM = bwd_block_m<kD>();
  alignas(kSw128Align) T k[kBlockN * kD];                // (kBlockN, kD), resident
  alignas(kSw128Align) T v[kBlockN * kD];                // (kBlockN, kD), resident
  alignas(kSw128Align) T q[kQdoStages][kBlockM * kD];    // (2, kBlockM, kD)
  alignas(kSw128Align) T d_o[kQdoStages][kBlockM * kD];  // (2, kBlockM, kD)
  WgmmaBwdStepStorage<T, kBlockM, kBlockN, kWG, kAtomicDq> step;
  static_assert(sizeof(q[0]) % kSw128Align == 0, "every stage of the ring starts on a swizzle atom");
};

namespace {

// kFault: a planted fault of a CUDA mutant, Fault::None for the real kernel; the body reads what it
// changes from FaultTraits<kFault> (mutant_traits.hpp).
template <class T, int kD, int kWG, bool kAtomicDq, Fault kFault = Fault::None>
__global__ void __launch_bounds__((kWG + 1) * 128, 1)
    wgmma_bwd_kv_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                        const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                        const __grid_constant__ CUtensorMap tm_lse2, const __grid_constant__ CUtensorMap tm_dd,
                        const __grid_constant__ CUtensorMap tm_dq, const BwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = WgmmaBwdStorage<T, kD, kWG, kAtomicDq>;
  using F = FaultTraits<kFault>;
  constexpr int kBlockM = S::kBlockM, kBlockN = S::kBlockN, kConsumers = 128 * kWG;
  constexpr int kMB = kBlockM / 8, kDB = kD / 8, kPanels = kD / 64;
  constexpr uint32_t kKVBytes = sizeof(S::k), kQBytes = sizeof(S::q[0]);
  // The consumers' (64, 64) d_q blocks: by d columns (d = 128) or by query rows (d = 64).
  static_assert(kWG == 2 && (kD == 128 ? kBlockM == 64 : kBlockM == 128), "two (64, 64) d_q blocks per step");
  constexpr int kDqRow0 = kBlockM == 128 ? 64 : 0, kDqCol0 = kD == 128 ? 64 : 0;  // times the consumer index
  using ConsumerSync = NamedSync<kConsumers, 128>;
  extern __shared__ unsigned char smem_raw[];
  const SharedStorageRef<S> sm = sw128_storage<S>(smem_raw);
  S& smem = sm.s;
  BwdPipeline& bar = smem.step.bar;
  WgmmaBwdRows<kBlockM>& rows = smem.step.rows;
  const uint32_t s_k = sm.addr(smem.k), s_v = sm.addr(smem.v), s_q = sm.addr(smem.q), s_do = sm.addr(smem.d_o);
  const float* const s_lse2 = sm.ptr(rows.lse2[0]);  // (2, kBlockM)
  const float* const s_dd = sm.ptr(rows.dd[0]);      // (2, kBlockM)

  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.x * kBlockN, h_kv = blockIdx.y, b = blockIdx.z;
  const int group = p.heads_q / p.heads_kv;
  // Query tiles [mb_begin, mb_end) can see some key of this tile.
  const int64_t off = rules::causal_offset(p.mask, p.n_q, p.n_k);
  const int mb_end = (p.n_q + kBlockM - 1) / kBlockM;
  int mb_begin = 0;
  if (p.mask != Mask::None) {
    const int64_t first = rules::first_query_tile(p.mask, p.n_q, p.n_k, n0, kBlockM);
    mb_begin = first < mb_end ? int(first) : mb_end;
  }
  const int n_mb = mb_end - mb_begin, n_iters = group * n_mb;

  if (threadIdx.x == 0) {
    mbar_init(sm.addr(bar.kv_full), 1);
    for (int i = 0; i < kQdoStages; ++i) {
      mbar_init(sm.addr(bar.qdo_full[i]), 1);
      mbar_init(sm.addr(bar.qdo_empty[i]), 4 * kWG);  // lane 0 of every consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();  // the last CTA-wide barrier

  constexpr int kConsumerRegs = kWG == 2 ? 240 : 0;  // as wgmma_forward.cu
  if (wg == 0) {                                     // producer
    if constexpr (kConsumerRegs > 0) setmaxnreg_dec<24>();
    if (threadIdx.x == 0 && n_iters > 0) {
      const int bh_kv = b * p.heads_kv + h_kv;
      const uint32_t kv_full = sm.addr(bar.kv_full);
      mbar_arrive_expect_tx(kv_full, 2 * kKVBytes);
      for (int c = 0; c < kPanels; ++c) {
        tma_load_3d(s_k + c * kBlockN * 128, &tm_k, 64 * c, n0, bh_kv, kv_full);
        tma_load_3d(s_v + c * kBlockN * 128, &tm_v, 64 * c, n0, bh_kv, kv_full);
      }
      for (PipelineState<kQdoStages> w{0}; w.count < n_iters; ++w) {
        const int it = w.count, st = w.index();
        const int bh_q = b * p.heads_q + h_kv * group + it / n_mb, m0 = (mb_begin + it % n_mb) * kBlockM;
        if (it >= kQdoStages) mbar_wait(sm.addr(bar.qdo_empty[st]), w.release_phase());
        mbar_arrive_expect_tx(sm.addr(bar.qdo_full[st]),
                              2 * kQBytes + uint32_t(sizeof(rows.lse2[0]) + sizeof(rows.dd[0])));
        for (int c = 0; c < kPanels; ++c) {
          tma_load_3d(s_q + st * kQBytes + c * kBlockM * 128, &tm_q, 64 * c, m0, bh_q, sm.addr(bar.qdo_full[st]));
          tma_load_3d(s_do + st * kQBytes + c * kBlockM * 128, &tm_do, 64 * c, m0, bh_q, sm.addr(bar.qdo_full[st]));
        }
        // lse2 and D of the step's queries, from the prep pass's padded copies (in bounds).
        tma_load_2d(sm.addr(rows.lse2[st]), &tm_lse2, m0, bh_q, sm.addr(bar.qdo_full[st]));
        tma_load_2d(sm.addr(rows.dd[st]), &tm_dd, m0, bh_q, sm.addr(bar.qdo_full[st]));
      }
    }
    return;
  }
  if constexpr (kConsumerRegs > 0) setmaxnreg_inc<kConsumerRegs>();

  const int cw = wg - 1;                              // consumer warpgroup: keys [64 cw, 64 cw + 64) of the tile
  const int key0 = n0 + cw * 64 + warp * 16;          // this warp's first key
  float dk[kDB][4] = {}, dv[kDB][4] = {};             // (16 keys, kD) per warp, fp32
  float st_[kMB][4], dpt[kMB][4];                     // (16 keys, kBlockM queries): S^T then P^T; dP^T then dS^T
  uint32_t pa[kBlockM / 16][4], sa[kBlockM / 16][4];  // P^T, dS^T in T: register A fragments

  // Descriptors (address field += byte offset >> 4). S^T, dP^T: A = this consumer's 64 rows of k / v
  // (K-major), B = the q / d_o stage (K-major): a k-step is 32 bytes along a row, panels every 4.
  // dV, dK: B = d_o / q N-major, a k-step is 16 query rows (2048 bytes), d panels kBlockM * 128 apart.
  // dQ: A = dS^T stage M-major (the consumer's 64-query panel), B = k N-major (its 64-column panel);
  // a k-step is 16 key rows.
  const uint64_t desc_k = sw128_desc(s_k + cw * 64 * 128, 16, 1024);
  const uint64_t desc_v = sw128_desc(s_v + cw * 64 * 128, 16, 1024);
  const uint64_t desc_q = sw128_desc(s_q, 16, 1024), desc_do = sw128_desc(s_do, 16, 1024);
  const uint64_t desc_q_t = sw128_desc(s_q, kBlockM * 128, 1024), desc_do_t = sw128_desc(s_do, kBlockM * 128, 1024);
  const uint64_t desc_ds = [&] {  // (the deterministic variant has no dS^T stages)
    if constexpr (kAtomicDq)
      return sw128_desc(sm.addr(smem.step.ds) + (cw * kDqRow0 / 64) * kBlockN * 128, kBlockN * 128, 1024);
    return uint64_t(0);
  }();
  const uint64_t desc_kq = sw128_desc(s_k + (cw * kDqCol0 / 64) * kBlockN * 128, kBlockN * 128, 1024);

  if (n_iters > 0) mbar_wait(sm.addr(bar.kv_full), 0);
  // NaN blast radius: a masked dS = 0 times a non-finite k_j in the d_q GEMM would reach rows that
  // cannot see j; such elements of the resident k tile are zeroed once (rows that see j are inside the
  // radius: S^T then reads the zero too).
  if constexpr (kAtomicDq)
    if (n_iters > 0 && scrub_nonfinite<kBlockN, kD, kConsumers, ConsumerSync>(sm.ptr(smem.k))) {
      fence_proxy_async();  // the scrub's stores must reach the GEMMs' reads
      ConsumerSync::sync();
    }
  for (PipelineState<kQdoStages> qdo{0}; qdo.count < n_iters; ++qdo) {
    const int it = qdo.count, st = qdo.index(), h = h_kv * group + it / n_mb, m0 = (mb_begin + it % n_mb) * kBlockM;
    mbar_wait(sm.addr(bar.qdo_full[st]), qdo.phase());
    // S^T and dP^T as two commit groups: P^T is computed from S^T while the dP^T GEMM still runs.
    wgmma_fence();
    wgmma_kmajor<T, kBlockM, kD>(reinterpret_cast<float(&)[kBlockM / 2]>(st_), desc_k, kBlockN * 128, desc_q,
                                 kBlockM * 128, st * kQBytes);
    wgmma_commit();
    wgmma_kmajor<T, kBlockM, kD>(reinterpret_cast<float(&)[kBlockM / 2]>(dpt), desc_v, kBlockN * 128, desc_do,
                                 kBlockM * 128, st * kQBytes);
    wgmma_commit();
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb) fence_operands(dpt[mb]);  // in flight: untouched until the wait below
    wgmma_wait<1>();
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb) fence_operands(st_[mb]);

    const bool need_mask =  // and queries past n_q
        rules::key_tile_straddles(p.mask, p.n_q, p.n_k, m0, n0, kBlockN) || m0 + kBlockM > p.n_q;
    const float* const lse2_st = s_lse2 + st * kBlockM;  // (kBlockM) base-2 lse of this step's queries
    const float* const dd_st = s_dd + st * kBlockM;      // (kBlockM) D
    // Key j is visible to the queries i in [first(j), n_q), relative to m0 (visible keys form a
    // prefix per query: attention.h); a key past n_k to none.
    int first[2], end_q = 0;
    if (need_mask) {
      end_q = p.n_q - m0 < kBlockM ? p.n_q - m0 : kBlockM;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t j = key0 + g + 8 * r;
        const int64_t f = j >= p.n_k ? int64_t(kBlockM) : p.mask == Mask::None ? 0 : j - off - m0;
        first[r] = f < 0 ? 0 : f > kBlockM ? kBlockM : int(f);
      }
    }
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb) {
      const float2 lse2 = *reinterpret_cast<const float2*>(lse2_st + mb * 8 + 2 * t);  // query columns il, il + 1
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int il = mb * 8 + 2 * t + e % 2;  // query column within the tile
        // P = exp2(x - lse2) with x = q.k * scale log2 e; an empty row (lse = -inf) gives P = 0.
        float pe = rules::recompute_p(st_[mb][e] * p.scale_log2, e % 2 ? lse2.y : lse2.x,
                                      [](float x) { return exp2_approx(x); });
        if (need_mask && (il < first[e / 2] || il >= end_q)) pe = 0.f;
        st_[mb][e] = pe;
      }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb) fence_operands(dpt[mb]);
    // dS = P (dP - D); where masked, 0 whatever dP (a non-finite v_j: 0 * inf). Two loops on a uniform
    // branch, so a step without masked pairs runs no compare.
    if (need_mask) {
#pragma unroll
      for (int mb = 0; mb < kMB; ++mb) {
        const float2 dd = *reinterpret_cast<const float2*>(dd_st + mb * 8 + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int il = mb * 8 + 2 * t + e % 2;
          dpt[mb][e] = il < first[e / 2] || il >= end_q ? 0.f : st_[mb][e] * (dpt[mb][e] - (e % 2 ? dd.y : dd.x));
        }
      }
    } else {
#pragma unroll
      for (int mb = 0; mb < kMB; ++mb) {
        const float2 dd = *reinterpret_cast<const float2*>(dd_st + mb * 8 + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) dpt[mb][e] = st_[mb][e] * (dpt[mb][e] - (e % 2 ? dd.y : dd.x));
      }
    }
    // P^T and dS^T rounded to T as tensor-core operands; two adjacent C blocks are one k-step.
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int mb = 2 * kk + x / 2, e = 2 * (x % 2);
        pa[kk][x] = Storage<T>::pack(st_[mb][e], st_[mb][e + 1]);
        sa[kk][x] = Storage<T>::pack(dpt[mb][e], dpt[mb][e + 1]);
      }

    // NaN blast radius: in a step straddling the mask, a masked dS = 0 times a non-finite q_i would reach
    // keys row i cannot see through dK; such elements of the q stage are zeroed (S^T has read it).
    if (need_mask) {
      ConsumerSync::sync();  // both consumers' S^T GEMMs have read the q stage
      if (scrub_nonfinite<kBlockM, kD, kConsumers, ConsumerSync>(sm.stage(smem.q, st))) {
        fence_proxy_async();  // the scrub's stores must reach the dK GEMM's reads
        ConsumerSync::sync();
      }
    }
    // dV += P^T dO first; dS^T goes to shared memory (for d_q) while it runs, then dK += dS^T Q. (The
    // stores read sa, which the PTX ISA forbids while a wgmma reading them is in flight.)
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      wgmma_rs_tb<T, kD>(reinterpret_cast<float(&)[kD / 2]>(dv), pa[kk],
                         desc_do_t + ((st * kQBytes + kk * 16 * 128) >> 4), 1);
    wgmma_commit();
    if constexpr (kAtomicDq) {  // dS^T (keys, queries) into the SW128 stage for the d_q GEMM
      const uint32_t ds = sm.addr(smem.step.ds[st]);
      if constexpr (F::kConsumer1DsDelayNs > 0)  // a race made to show on every step (FaultTraits)
        if (cw == 1) __nanosleep(F::kConsumer1DsDelayNs);
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int row = cw * 64 + warp * 16 + g + 8 * (x % 2), col = kk * 16 + 8 * (x / 2) + 2 * t;
          uint32_t at = sw128_offset<kBlockN>(row, col);
          if constexpr (!F::kDsSwizzled)  // the same panels, chunks unswizzled
            at = uint32_t((col / 64) * kBlockN * 128 + row * 128 + (col % 64) * 2);
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds + at), "r"(sa[kk][x]) : "memory");
        }
      fence_proxy_async();  // generic stores -> wgmma's async-proxy reads
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      wgmma_rs_tb<T, kD>(reinterpret_cast<float(&)[kD / 2]>(dk), sa[kk],
                         desc_q_t + ((st * kQBytes + kk * 16 * 128) >> 4), 1);
    wgmma_commit();
    if constexpr (kAtomicDq) {
      // This consumer's d_q block buffer: the previous step's reduce has read it before anyone writes.
      if (threadIdx.x % 128 == 0) bulk_wait_read<0>();
      if constexpr (F::kDqBarrierAllConsumers)
        ConsumerSync::sync();  // every consumer's dS^T rows are in the stage
      else
        named_barrier_sync<128>(2 + cw);  // this warpgroup only
      constexpr uint32_t kDsBytes = sizeof(smem.step.ds[0]);
      float dq[8][4];  // (16 queries, 64 columns) per warp
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBlockN / 16; ++ks)
        wgmma_ss_tt<T, 64>(reinterpret_cast<float(&)[32]>(dq), desc_ds + ((st * kDsBytes + ks * 16 * 128) >> 4),
                           desc_kq + ((ks * 16 * 128) >> 4), ks > 0);
      wgmma_commit();
      wgmma_wait<0>();
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) fence_operands(dq[nb]);
      // d_q += the block, by one TMA reduce-add from shared memory (rows past n_q are dropped by the
      // map's bounds) instead of 16 float2 atomics per thread.
      const uint32_t dq_buf = sm.addr(smem.step.dq[cw]);  // (64, 64) fp32, two SW128 panels of 32 columns
#pragma unroll
      for (int nb = 0; nb < 8; ++nb)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(
                           dq_buf + sw128_offset_f32<64>(warp * 16 + g + 8 * r, nb * 8 + 2 * t)),
                       "f"(dq[nb][2 * r]), "f"(dq[nb][2 * r + 1])
                       : "memory");
      fence_proxy_async();
      named_barrier_sync<128>(2 + cw);  // the warpgroup's block is written
      if (threadIdx.x % 128 == 0) {
        const int row0 = m0 + cw * kDqRow0, col0 = cw * kDqCol0, bh = b * p.heads_q + h;
        tma_reduce_add_3d(&tm_dq, dq_buf, col0, row0, bh);
        tma_reduce_add_3d(&tm_dq, dq_buf + 64 * 128, col0 + 32, row0, bh);
        bulk_commit();
      }
    } else {
      wgmma_wait<0>();
    }
#pragma unroll
    for (int db = 0; db < kDB; ++db) fence_operands(dk[db]), fence_operands(dv[db]);
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) fence_operands(pa[kk]), fence_operands(sa[kk]);
    __syncwarp();  // every lane's reads of the stage (lse2, D) are ordered before lane 0's (release) arrive
    if (lane == 0) mbar_arrive(sm.addr(bar.qdo_empty[st]));  // this warp no longer reads the q / d_o stage
  }

  if (kAtomicDq && threadIdx.x % 128 == 0) bulk_wait<0>();  // the last reduce has read its buffer (and landed)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = key0 + g + 8 * r;
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
#else
  __trap();  // built without sm_90a: the launchers check device_is_sm90() first
#endif
}

template <class T, int kD, int kWG, bool kAtomicDq, Fault kFault = Fault::None>
cudaError_t launch_kv(const BwdParams& p, const CUtensorMap (&maps)[7], cudaStream_t stream) {
  using S = WgmmaBwdStorage<T, kD, kWG, kAtomicDq>;
  constexpr int kSmemBytes = sw128_smem_bytes<S>();
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an sm_90 CTA may have");
  auto kernel = wgmma_bwd_kv_kernel<T, kD, kWG, kAtomicDq, kFault>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid((p.n_k + S::kBlockN - 1) / S::kBlockN, p.heads_kv, p.batch);
  kernel<<<grid, (kWG + 1) * 128, kSmemBytes, stream>>>(maps[0], maps[1], maps[2], maps[3], maps[4], maps[5], maps[6],
                                                        p);
  return cudaGetLastError();
}

// A mutant (kFault set) runs the d_q-by-reduce variant only.
template <class T, int kD, int kWG, Fault kFault = Fault::None>
cudaError_t launch(const BwdParams& p, bool deterministic, cudaStream_t stream) {
  CUtensorMap maps[7];  // k, v, q, d_o, padded lse2, padded D, the fp32 d_q accumulator
  const Problem& pr = p.pr;
  if (!tensor_map(&maps[0], p.k, pr.dtype, kD, pr.n_k, pr.batch * pr.heads_kv, 64 * kWG) ||
      !tensor_map(&maps[1], p.v, pr.dtype, kD, pr.n_k, pr.batch * pr.heads_kv, 64 * kWG) ||
      !tensor_map(&maps[2], p.q, pr.dtype, kD, pr.n_q, pr.batch * pr.heads_q, bwd_block_m<kD>()) ||
      !tensor_map(&maps[3], p.d_o, pr.dtype, kD, pr.n_q, pr.batch * pr.heads_q, bwd_block_m<kD>()) ||
      !tensor_map_f32(&maps[4], p.lse2_pad, p.n_q_pad, pr.batch * pr.heads_q, bwd_block_m<kD>()) ||
      !tensor_map_f32(&maps[5], p.dd_pad, p.n_q_pad, pr.batch * pr.heads_q, bwd_block_m<kD>()) ||
      !tensor_map_f32_sw128(&maps[6], p.dq_acc, kD, pr.n_q, pr.batch * pr.heads_q, 64))
    return cudaErrorInvalidValue;
  backward_prep(p, !deterministic, stream);
  cudaError_t e;
  if (!deterministic) {
    if ((e = launch_kv<T, kD, kWG, true, kFault>(p, maps, stream)) != cudaSuccess) return e;
    backward_dq_convert(p, stream);
  } else if constexpr (kFault != Fault::None) {
    return cudaErrorInvalidValue;
  } else {
    if ((e = launch_kv<T, kD, kWG, false>(p, maps, stream)) != cudaSuccess) return e;
    if ((e = wgmma_backward_dq(p, stream)) != cudaSuccess) return e;  // d_q without atomics
  }
  return cudaGetLastError();
}

}  // namespace

size_t WgmmaTraits::backward_workspace_bytes(const Problem& p) { return backward_workspace_bytes_of(p); }

// The tile of wgmma_traits.hpp for p.d (keys per CTA = 64 x consumer warpgroups), for its dtypes.
cudaError_t WgmmaTraits::backward(const Problem& pr, Tile t, bool deterministic, const BackwardArgs& a, void* workspace,
                                  cudaStream_t stream) {
  if (!well_formed(pr) || !device_is_sm90()) return cudaErrorInvalidValue;
  if (t == Tile{}) t = tile_for(kBackwardDefault, pr.d);
  const BwdParams p = make_bwd_params(pr, a, workspace);
  return dtype_dim_switch<WgmmaTraits>(pr.dtype, pr.d, [&](auto type, auto dim) {
    using T = typename decltype(type)::type;
    constexpr int kD = decltype(dim)::value;
    return tile_switch<kBackwardTiles, kD>(t, [&](auto i) {
      constexpr BuiltTile x = kBackwardTiles[decltype(i)::value];
      static_assert(x.block_m == bwd_block_m<kD>() && x.block_n % 64 == 0, "one tile per head dim, 64 keys a consumer");
      return launch<T, kD, x.block_n / 64>(p, deterministic, stream);
    });
  });
}

// A CUDA mutant's backward (mutant_traits.hpp): its dtype and head dim, with its fault (the d_q
// reduce-add variant).
cudaError_t wgmma_backward_mutant(Fault f, const Problem& pr, const BackwardArgs& a, void* workspace,
                                  cudaStream_t stream) {
  if (!well_formed(pr) || !device_is_sm90()) return cudaErrorInvalidValue;
  const BwdParams p = make_bwd_params(pr, a, workspace);
  return mutant_switch<FaultSite::WgmmaBackward>(f, pr, [&](auto i) {
    constexpr CudaMutant m = kCudaMutants[decltype(i)::value];
    static_assert(m.backward.block_m == bwd_block_m<m.d>() && m.backward.block_n % 64 == 0, "the backward's tile");
    return launch<MutantStorage<decltype(i)::value>, m.d, m.backward.block_n / 64, m.fault>(p, false, stream);
  });
}

}  // namespace fc::cuda
