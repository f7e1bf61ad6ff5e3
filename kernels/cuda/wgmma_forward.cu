// cuda_wgmma forward: the FlashAttention walk on Hopper's warpgroup tensor cores and TMA (sm_90a).
// A CTA is one producer warpgroup and kWG consumer warpgroups, and owns a (64 kWG, d) tile of q; each
// consumer owns 64 rows and walks the (kBlockN, d) tiles of k and v. One producer thread streams q,
// k and v with TMA into 128-byte-swizzled shared memory (two stages each, mbarrier full / empty
// pairs), so consumers never wait on each other. S = q k^T is a wgmma chain with both operands in
// shared memory; P stays in registers and o += P v takes it as the register A operand, v read
// N-major (transposed). The softmax of S_{n+1} runs while P_n v_n is on the tensor cores
// (FlashAttention-3's intra-warpgroup overlap). The numerics per row are tiled_forward.cu's
// (forward_common.cuh), so the two forwards differ only in how the GEMMs are fed -- which is what
// the block-size and cross-kernel laws then check.
#include <cuda.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/cuda/forward_common.cuh"
#include "kernels/cuda/mutant_switch.cuh"
#include "kernels/cuda/nonfinite.cuh"
#include "kernels/cuda/static_switch.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/wgmma_ops.cuh"
#include "kernels/cuda/wgmma_traits.hpp"

namespace fc::cuda {

// Shared memory of one CTA (wgmma.cuh's sw128_storage): the SW128 tiles, the scratch of the rare
// non-finite-v path, then the mbarriers. k, v and the scratch are one stage size each, back to back.
template <class T, int kD, int kBlockN, int kWG>
struct WgmmaFwdStorage {
  static constexpr int kBlockM = 64 * kWG;
  alignas(kSw128Align) T q[kBlockM * kD];             // (kBlockM, kD)
  alignas(kSw128Align) T k[kKvStages][kBlockN * kD];  // (2, kBlockN, kD)
  alignas(kSw128Align) T v[kKvStages][kBlockN * kD];  // (2, kBlockN, kD)
  T scratch[kD * kBlockN];                            // (kD, kBlockN): P of readd_nonfinite_v
  KvPipeline bar;
  static_assert(sizeof(k[0]) % kSw128Align == 0, "every stage of the ring starts on a swizzle atom");
};

namespace {

// kFault: a planted fault of a CUDA mutant, Fault::None for the real kernel; the body reads what it
// changes from FaultTraits<kFault> (mutant_traits.hpp).
template <class T, int kD, int kBlockN, int kWG, Fault kFault = Fault::None>
__global__ void __launch_bounds__((kWG + 1) * 128, 1)
    wgmma_forward_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                         const __grid_constant__ CUtensorMap tm_v, const FwdParams<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = WgmmaFwdStorage<T, kD, kBlockN, kWG>;
  using F = FaultTraits<kFault>;
  constexpr int kBlockM = S::kBlockM, kConsumers = 128 * kWG;
  constexpr int kNB = kBlockN / 8, kDB = kD / 8, kPanels = kD / 64;
  constexpr uint32_t kQBytes = sizeof(S::q), kKVBytes = sizeof(S::k[0]);
  static_assert(kD % 64 == 0 && kBlockN % 64 == 0, "SW128 panels are 64 columns wide");
  using ConsumerSync = NamedSync<kConsumers, 128>;
  extern __shared__ unsigned char smem_raw[];
  const SharedStorageRef<S> sm = sw128_storage<S>(smem_raw);
  S& smem = sm.s;
  KvPipeline& bar = smem.bar;
  const uint32_t s_q = sm.addr(smem.q), s_k = sm.addr(smem.k), s_v = sm.addr(smem.v);

  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // longest causal rows first: better tail balance
  const int h = blockIdx.y, b = blockIdx.z, h_kv = h / (p.heads_q / p.heads_kv);
  const int m0 = m_block * kBlockM;
  const int n_tiles = rules::key_tile_count(p.mask, p.n_q, p.n_k, m0, kBlockM, kBlockN);

  if (threadIdx.x == 0) init_kv_pipeline(sm, bar, 4 * kWG);
  __syncthreads();  // the last CTA-wide barrier: from here producer and consumers meet only on mbarriers

  // Register budgets once the roles split (65536 per SM, one CTA): the producer keeps 24, the
  // consumers share the rest. One consumer warpgroup already has 255 (256 threads in all).
  constexpr int kConsumerRegs = kWG == 2 ? 240 : kWG == 3 ? 160 : 0;
  static_assert(kConsumerRegs == 0 || 128 * 24 + kConsumers * kConsumerRegs <= 65536, "register file");
  if (wg == 0) {  // producer
    if constexpr (kConsumerRegs > 0) setmaxnreg_dec<24>();
    if (threadIdx.x == 0 && n_tiles > 0) {
      const int bh_q = b * p.heads_q + h, bh_kv = b * p.heads_kv + h_kv;
      const uint32_t q_full = sm.addr(bar.resident_full);
      mbar_arrive_expect_tx(q_full, kQBytes);
      for (int c = 0; c < kPanels; ++c) tma_load_3d(s_q + c * kBlockM * 128, &tm_q, 64 * c, m0, bh_q, q_full);
      tma_stream_kv<kPanels, kBlockN>(&tm_k, &tm_v, s_k, s_v, kKVBytes, n_tiles, bh_kv, sm, bar);
    }
    return;
  }
  if constexpr (kConsumerRegs > 0) setmaxnreg_inc<kConsumerRegs>();

  const int cw = wg - 1;                                             // consumer warpgroup
  const int w0 = cw * 64 + warp * 16;                                // first row of the warp in the tile
  const T* v = p.v + (int64_t(b) * p.heads_kv + h_kv) * p.n_k * kD;  // (n_k, kD): the rare re-add reads it
  float o[kDB][4] = {};  // (16, kD) per warp, fp32: the m64nkD accumulator of the warpgroup
  float m[2] = {rules::neg_inf<float>(), rules::neg_inf<float>()}, l[2] = {0.f, 0.f};  // rows g, g + 8
  float s[kNB][4];               // scores of key tile n + 1 (C layout), then its fp32 weights P
  float corr[2];                 // exp2(m_old - m_new) still owed to o
  uint32_t pa[kBlockN / 16][4];  // P of key tile n in T: register A fragments of o += P v

  // Descriptors move by adding (byte offset >> 4) to their address field: one base each, the rest
  // compile-time immediates. S = q k_n^T: kD / 16 k-steps of m64n{kBlockN}k16, both operands K-major;
  // a k-step moves 32 bytes along a 128-byte swizzled row and jumps panels every 4 steps; this
  // warpgroup's q rows start 64 cw rows into each panel. o += P v: v N-major, a k-step is 16 rows
  // (2048 bytes) down the tile, panels kBlockN * 128 bytes apart (the leading offset).
  const uint64_t desc_q = sw128_desc(s_q + cw * 64 * 128, 16, 1024);
  const uint64_t desc_k = sw128_desc(s_k, 16, 1024);
  const uint64_t desc_v = sw128_desc(s_v, kBlockN * 128, 1024);
  auto issue_scores = [&](int st) {
    wgmma_kmajor<T, kBlockN, kD>(reinterpret_cast<float(&)[kBlockN / 2]>(s), desc_q, kBlockM * 128, desc_k,
                                 kBlockN * 128, st * kKVBytes);
    wgmma_commit();
  };
  auto fence_all = [&] {
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) fence_operands(s[nb]);
#pragma unroll
    for (int db = 0; db < kDB; ++db) fence_operands(o[db]);
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) fence_operands(pa[kk]);
  };
  auto release = [&](Mbarrier& empty) {  // this warp no longer reads the stage
    __syncwarp();                        // every lane's accesses are ordered before lane 0's (release) arrive
    if (lane == 0) mbar_arrive(sm.addr(empty));
  };

  if (n_tiles > 0) {
    mbar_wait(sm.addr(bar.resident_full), 0);
    if constexpr (F::kWaitKFull) mbar_wait(sm.addr(bar.k_full[0]), 0);
    wgmma_fence();
    issue_scores(0);
    wgmma_wait<0>();
    fence_all();
    release(bar.k_empty[0]);
    softmax_update<T, kNB>(s, m, l, corr, p, rules::key_tile_straddles(p.mask, p.n_q, p.n_k, m0, 0, kBlockN), m0 + w0,
                           0);
    rescale_and_pack<T, kNB, kDB>(s, corr, o, pa);
  }
  // Step n issues S_{n+1} = q k_{n+1}^T, then o += P_n v_n, and runs the softmax of S_{n+1} while
  // P_n v_n is still on the tensor cores; only the rescale of o waits for it. kMore: a key tile n + 1
  // follows (two instantiations, not a run-time branch around the wgmma issue, which would make ptxas
  // serialize every wgmma of the kernel).
  auto step = [&](PipelineState<kKvStages> kv, auto more_tag) {
    constexpr bool kMore = decltype(more_tag)::value;
    PipelineState<kKvStages> kv_next = kv;  // key tile n + 1's
    ++kv_next;
    const int n0 = kv.count * kBlockN, cur = kv.index(), next = cur ^ 1;  // next: the other of the two stages
    // The stages the GEMMs read: the barriers', unless the ring wraps elsewhere (F::kRingStages): past
    // its last stage, it reads beyond the ring.
    const int cur_st = F::kRingStages == kKvStages ? cur : PipelineState<F::kRingStages>{kv.count}.index();
    const int next_st = F::kRingStages == kKvStages ? next : PipelineState<F::kRingStages>{kv_next.count}.index();
    if constexpr (kMore && F::kWaitKFull) mbar_wait(sm.addr(bar.k_full[next]), kv_next.phase());
    mbar_wait(sm.addr(bar.v_full[cur]), kv.phase());

    // NaN blast radius: a non-finite v in a tile straddling the mask is scrubbed to 0 here and its
    // true contributions re-added (o is at max m_n and holds no GEMM now).
    if (rules::key_tile_straddles(p.mask, p.n_q, p.n_k, m0, n0, kBlockN)) {
      T* const v_tile = sm.stage(smem.v, cur_st);
      if (scrub_nonfinite<kBlockN, kD, kConsumers, ConsumerSync>(v_tile)) {  // uniform over the consumers, rare
        float(&o1)[1][kDB][4] = reinterpret_cast<float(&)[1][kDB][4]>(o);
        const uint32_t(&pa1)[1][kBlockN / 16][4] = reinterpret_cast<const uint32_t(&)[1][kBlockN / 16][4]>(pa);
        readd_nonfinite_v<kD, kBlockM, kBlockN, 1, ConsumerSync>(o1, pa1, sm.ptr(smem.scratch), v, p.mask, p.n_q, p.n_k,
                                                                 m0, w0, n0);
        fence_proxy_async();  // the scrub's stores must reach wgmma's reads of v_n
        ConsumerSync::sync();
      }
    }

    wgmma_fence();
    if constexpr (kMore) issue_scores(next_st);
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
      wgmma_rs_tb<T, kD>(reinterpret_cast<float(&)[kD / 2]>(o), pa[kk],
                         desc_v + ((cur_st * kKVBytes + kk * 16 * 128) >> 4), 1);
    wgmma_commit();
    if constexpr (kMore) {
      wgmma_wait<1>();  // S_{n+1} is done; P_n v_n may still run
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) fence_operands(s[nb]);
      release(bar.k_empty[next]);
      softmax_update<T, kNB>(s, m, l, corr, p,
                             rules::key_tile_straddles(p.mask, p.n_q, p.n_k, m0, n0 + kBlockN, kBlockN), m0 + w0,
                             n0 + kBlockN);
    }
    wgmma_wait<0>();  // P_n v_n is done: o and pa are free, and so is v_n's stage
    fence_all();
    release(bar.v_empty[cur]);
    if constexpr (kMore) {
      if constexpr (F::kUnrescaledWarpgroup >= 0)
        if (cw == F::kUnrescaledWarpgroup) corr[0] = corr[1] = 1.f;  // this warpgroup's o keeps the old max's scale
      rescale_and_pack<T, kNB, kDB>(s, corr, o, pa);
    }
  };
  PipelineState<kKvStages> kv{0};
  for (; kv.count + 1 < n_tiles; ++kv) step(kv, std::true_type{});
  if (n_tiles > 0) step(kv, std::false_type{});
  store_o_lse<T, kDB>(p, o, m, l, b, h, m0 + w0);
#else
  __trap();  // built without sm_90a: the launchers check device_is_sm90() first
#endif
}

template <class T, int kD, int kBlockN, int kWG, Fault kFault = Fault::None>
cudaError_t launch(const Problem& pr, const ForwardArgs& a, cudaStream_t stream) {
  using S = WgmmaFwdStorage<T, kD, kBlockN, kWG>;
  constexpr int kSmemBytes = sw128_smem_bytes<S>();
  CUtensorMap tm_q, tm_k, tm_v;
  if (!tensor_map(&tm_q, a.q, pr.dtype, kD, pr.n_q, pr.batch * pr.heads_q, S::kBlockM) ||
      !tensor_map(&tm_k, a.k, pr.dtype, kD, pr.n_k, pr.batch * pr.heads_kv, kBlockN) ||
      !tensor_map(&tm_v, a.v, pr.dtype, kD, pr.n_k, pr.batch * pr.heads_kv, kBlockN))
    return cudaErrorInvalidValue;  // no driver entry point, or a pointer TMA cannot address (16-byte alignment)
  auto kernel = wgmma_forward_kernel<T, kD, kBlockN, kWG, kFault>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (e != cudaSuccess) return e;
  dim3 grid((pr.n_q + S::kBlockM - 1) / S::kBlockM, pr.heads_q, pr.batch);
  kernel<<<grid, (kWG + 1) * 128, kSmemBytes, stream>>>(tm_q, tm_k, tm_v, make_fwd_params<T>(pr, a));
  return cudaGetLastError();
}

}  // namespace

bool device_is_sm90() {
  static const bool yes = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return major == 9;
  }();
  return yes;
}

// The tiles of wgmma_traits.hpp (block_m = 64 x consumer warpgroups), for its dtypes and head dims.
cudaError_t WgmmaTraits::forward(const Problem& p, Tile t, const ForwardArgs& a, void*, cudaStream_t stream) {
  if (!well_formed(p) || !device_is_sm90()) return cudaErrorInvalidValue;
  if (t == Tile{}) t = tile_for(kForwardDefault, p.d);
  return dtype_dim_switch<WgmmaTraits>(p.dtype, p.d, [&](auto type, auto dim) {
    using T = typename decltype(type)::type;
    constexpr int kD = decltype(dim)::value;
    return tile_switch<kForwardTiles, kD>(t, [&](auto i) {
      constexpr BuiltTile x = kForwardTiles[decltype(i)::value];
      static_assert(x.block_m % 64 == 0, "a consumer warpgroup owns 64 query rows");
      return launch<T, kD, x.block_n, x.block_m / 64>(p, a, stream);
    });
  });
}

// A CUDA mutant's forward (mutant_traits.hpp): its one tile, dtype and head dim, with its fault.
cudaError_t wgmma_forward_mutant(Fault f, const Problem& p, const ForwardArgs& a, cudaStream_t stream) {
  if (!well_formed(p) || !device_is_sm90()) return cudaErrorInvalidValue;
  return mutant_switch<FaultSite::WgmmaForward>(f, p, [&](auto i) {
    constexpr CudaMutant m = kCudaMutants[decltype(i)::value];
    static_assert(m.forward.block_m % 64 == 0, "a consumer warpgroup owns 64 query rows");
    return launch<MutantStorage<decltype(i)::value>, m.d, m.forward.block_n, m.forward.block_m / 64, m.fault>(p, a,
                                                                                                              stream);
  });
}

}  // namespace fc::cuda
