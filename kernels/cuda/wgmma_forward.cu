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
#include <cudaTypedefs.h>

#include <type_traits>

#include "kernels/cuda/forward_common.cuh"
#include "kernels/cuda/mutant_switch.cuh"
#include "kernels/cuda/nonfinite.cuh"
#include "kernels/cuda/static_switch.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/wgmma_ops.cuh"
#include "kernels/cuda/wgmma_traits.hpp"

namespace fc::cuda {

// Shared memory of one CTA, in bytes from a 1024-byte-aligned base: SW128 tiles, the scratch of the
// rare non-finite-v path, then the mbarriers. (Outside the anonymous namespace: the sm_80 pass, which
// compiles no kernel body, would warn that its members go unused.)
template <int kD, int kBlockN, int kWG>
struct Smem {
  static constexpr int kBlockM = 64 * kWG;
  static constexpr uint32_t kQBytes = kBlockM * kD * 2, kKVBytes = kBlockN * kD * 2;
  static constexpr uint32_t q = 0, k = kQBytes, v = k + 2 * kKVBytes, scratch = v + 2 * kKVBytes;
  static constexpr uint32_t bars = scratch + kD * kBlockN * 2;                     // a KvPipeline (wgmma.cuh)
  static constexpr uint32_t bytes = bars + KvPipeline::kSlots * kBarBytes + 1024;  // + alignment slack
};

namespace {

// kFault: a planted fault of a CUDA mutant (mutant_traits.hpp), Fault::None for the real kernel.
template <class T, int kD, int kBlockN, int kWG, Fault kFault = Fault::None>
__global__ void __launch_bounds__((kWG + 1) * 128, 1)
    wgmma_forward_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                         const __grid_constant__ CUtensorMap tm_v, const FwdParams<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Smem<kD, kBlockN, kWG>;
  constexpr int kBlockM = L::kBlockM, kConsumers = 128 * kWG;
  constexpr int kNB = kBlockN / 8, kDB = kD / 8, kPanels = kD / 64;
  constexpr uint32_t kQBytes = L::kQBytes, kKVBytes = L::kKVBytes;
  static_assert(kD % 64 == 0 && kBlockN % 64 == 0, "SW128 panels are 64 columns wide");
  using ConsumerSync = NamedSync<kConsumers, 128>;
  extern __shared__ unsigned char smem_raw[];
  // Swizzle atoms need 1024-byte alignment; the launcher adds the slack.
  const uint32_t raw = smem_addr(smem_raw), base = (raw + 1023u) & ~1023u;
  unsigned char* const base_ptr = smem_raw + (base - raw);
  const uint32_t s_q = base + L::q, s_k = base + L::k, s_v = base + L::v;  // (kBlockM, kD), (2, kBlockN, kD) x 2
  const uint32_t q_full = base + L::bars, k_full = bar_slot(q_full, KvPipeline::kKFull),
                 v_full = bar_slot(q_full, KvPipeline::kVFull), k_empty = bar_slot(q_full, KvPipeline::kKEmpty),
                 v_empty = bar_slot(q_full, KvPipeline::kVEmpty);  // [2] each

  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // longest causal rows first: better tail balance
  const int h = blockIdx.y, b = blockIdx.z, h_kv = h / (p.heads_q / p.heads_kv);
  const int m0 = m_block * kBlockM;
  const int n_tiles = rules::key_tile_count(p.mask, p.n_q, p.n_k, m0, kBlockM, kBlockN);

  if (threadIdx.x == 0) init_kv_pipeline_barriers(q_full, 4 * kWG);
  __syncthreads();  // the last CTA-wide barrier: from here producer and consumers meet only on mbarriers

  // Register budgets once the roles split (65536 per SM, one CTA): the producer keeps 24, the
  // consumers share the rest. One consumer warpgroup already has 255 (256 threads in all).
  constexpr int kConsumerRegs = kWG == 2 ? 240 : kWG == 3 ? 160 : 0;
  static_assert(kConsumerRegs == 0 || 128 * 24 + kConsumers * kConsumerRegs <= 65536, "register file");
  if (wg == 0) {  // producer
    if constexpr (kConsumerRegs > 0) setmaxnreg_dec<24>();
    if (threadIdx.x == 0 && n_tiles > 0) {
      const int bh_q = b * p.heads_q + h, bh_kv = b * p.heads_kv + h_kv;
      mbar_arrive_expect_tx(q_full, kQBytes);
      for (int c = 0; c < kPanels; ++c) tma_load_3d(s_q + c * kBlockM * 128, &tm_q, 64 * c, m0, bh_q, q_full);
      tma_stream_kv<kPanels, kBlockN>(&tm_k, &tm_v, s_k, s_v, kKVBytes, n_tiles, bh_kv, k_full, v_full, k_empty,
                                      v_empty);
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
  auto release = [&](uint32_t bar) {  // this warp no longer reads the stage
    __syncwarp();                     // every lane's accesses are ordered before lane 0's (release) arrive
    if (lane == 0) mbar_arrive(bar);
  };

  if (n_tiles > 0) {
    mbar_wait(q_full, 0);
    if constexpr (kFault != Fault::WgmmaSkipKFull) mbar_wait(k_full, 0);
    wgmma_fence();
    issue_scores(0);
    wgmma_wait<0>();
    fence_all();
    release(k_empty);
    softmax_update<T, kNB>(s, m, l, corr, p, rules::key_tile_straddles(p.mask, p.n_q, p.n_k, m0, 0, kBlockN), m0 + w0,
                           0);
    rescale_and_pack<T, kNB, kDB>(s, corr, o, pa);
  }
  // Step n issues S_{n+1} = q k_{n+1}^T, then o += P_n v_n, and runs the softmax of S_{n+1} while
  // P_n v_n is still on the tensor cores; only the rescale of o waits for it. kMore: a key tile n + 1
  // follows (two instantiations, not a run-time branch around the wgmma issue, which would make ptxas
  // serialize every wgmma of the kernel).
  auto step = [&](int n, auto more_tag) {
    constexpr bool kMore = decltype(more_tag)::value;
    const int n0 = n * kBlockN, cur = n & 1, next = cur ^ 1;
    // The stages the GEMMs read. WgmmaRingWrap: an index that wraps when it passes the last stage
    // instead of when it reaches it (0, 1, 2, 0, ...): stage 2 of k is v's first, stage 2 of v the scratch.
    const int cur_st = kFault == Fault::WgmmaRingWrap ? n % 3 : cur;
    const int next_st = kFault == Fault::WgmmaRingWrap ? (n + 1) % 3 : next;
    if constexpr (kMore && kFault != Fault::WgmmaSkipKFull) mbar_wait(bar_slot(k_full, next), ((n + 1) / 2) & 1);
    mbar_wait(bar_slot(v_full, cur), (n / 2) & 1);

    // NaN blast radius: a non-finite v in a tile straddling the mask is scrubbed to 0 here and its
    // true contributions re-added (o is at max m_n and holds no GEMM now).
    if (rules::key_tile_straddles(p.mask, p.n_q, p.n_k, m0, n0, kBlockN)) {
      T* const v_tile = reinterpret_cast<T*>(base_ptr + L::v + cur_st * kKVBytes);
      if (scrub_nonfinite<kBlockN, kD, kConsumers, ConsumerSync>(v_tile)) {  // uniform over the consumers, rare
        float(&o1)[1][kDB][4] = reinterpret_cast<float(&)[1][kDB][4]>(o);
        const uint32_t(&pa1)[1][kBlockN / 16][4] = reinterpret_cast<const uint32_t(&)[1][kBlockN / 16][4]>(pa);
        readd_nonfinite_v<kD, kBlockM, kBlockN, 1, ConsumerSync>(o1, pa1, reinterpret_cast<T*>(base_ptr + L::scratch),
                                                                 v, p.mask, p.n_q, p.n_k, m0, w0, n0);
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
      release(bar_slot(k_empty, next));
      softmax_update<T, kNB>(s, m, l, corr, p,
                             rules::key_tile_straddles(p.mask, p.n_q, p.n_k, m0, n0 + kBlockN, kBlockN), m0 + w0,
                             n0 + kBlockN);
    }
    wgmma_wait<0>();  // P_n v_n is done: o and pa are free, and so is v_n's stage
    fence_all();
    release(bar_slot(v_empty, cur));
    if constexpr (kMore) {
      if constexpr (kFault == Fault::WgmmaNoRescale)
        if (cw == 1) corr[0] = corr[1] = 1.f;  // this warpgroup's o keeps the old max's scale
      rescale_and_pack<T, kNB, kDB>(s, corr, o, pa);
    }
  };
  int n = 0;
  for (; n + 1 < n_tiles; ++n) step(n, std::true_type{});
  if (n_tiles > 0) step(n, std::false_type{});
  store_o_lse<T, kDB>(p, o, m, l, b, h, m0 + w0);
#else
  __trap();  // built without sm_90a: the launchers check device_is_sm90() first
#endif
}

template <class T, int kD, int kBlockN, int kWG, Fault kFault = Fault::None>
cudaError_t launch(const Problem& pr, const ForwardArgs& a, cudaStream_t stream) {
  using L = Smem<kD, kBlockN, kWG>;
  CUtensorMap tm_q, tm_k, tm_v;
  if (!tensor_map(&tm_q, a.q, pr.dtype, kD, pr.n_q, pr.batch * pr.heads_q, L::kBlockM) ||
      !tensor_map(&tm_k, a.k, pr.dtype, kD, pr.n_k, pr.batch * pr.heads_kv, kBlockN) ||
      !tensor_map(&tm_v, a.v, pr.dtype, kD, pr.n_k, pr.batch * pr.heads_kv, kBlockN))
    return cudaErrorInvalidValue;  // no driver entry point, or a pointer TMA cannot address (16-byte alignment)
  auto kernel = wgmma_forward_kernel<T, kD, kBlockN, kWG, kFault>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(L::bytes));
  if (e != cudaSuccess) return e;
  dim3 grid((pr.n_q + L::kBlockM - 1) / L::kBlockM, pr.heads_q, pr.batch);
  kernel<<<grid, (kWG + 1) * 128, L::bytes, stream>>>(tm_q, tm_k, tm_v, make_fwd_params<T>(pr, a));
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

// cuTensorMapEncodeTiled, from the driver through the runtime (no link against libcuda).
static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return PFN_cuTensorMapEncodeTiled_v12000(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

bool tensor_map(CUtensorMap* map, const void* base, DType dtype, int d, int rows, int heads, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[3] = {cuuint64_t(d), cuuint64_t(rows), cuuint64_t(heads)};
  const cuuint64_t strides[2] = {cuuint64_t(d) * 2, cuuint64_t(rows) * d * 2};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, cuuint32_t(box_rows), 1}, elem_strides[3] = {1, 1, 1};
  const CUtensorMapDataType type =
      dtype == DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return encode(map, type, 3, const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool tensor_map_f32(CUtensorMap* map, const float* base, int cols, int rows, int box_cols) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)}, strides[1] = {cuuint64_t(cols) * 4};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), 1}, elem_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool tensor_map_f32_sw128(CUtensorMap* map, float* base, int d, int rows, int heads, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[3] = {cuuint64_t(d), cuuint64_t(rows), cuuint64_t(heads)};
  const cuuint64_t strides[2] = {cuuint64_t(d) * 4, cuuint64_t(rows) * d * 4};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {32, cuuint32_t(box_rows), 1}, elem_strides[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, base, dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
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
