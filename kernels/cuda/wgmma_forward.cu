// cuda_wgmma forward: the FlashAttention-2 walk on Hopper's warpgroup tensor cores (sm_90a).
// A CTA of kWG warpgroups owns a (64 kWG, d) tile of q; each warpgroup owns 64 rows and walks the
// (kBlockN, d) tiles of k and v, double-buffered through cp.async into 128-byte-swizzled shared
// memory (wgmma.cuh). S = q k^T is one wgmma chain with both operands in shared memory; P stays in
// registers and o += P v takes it as the register A operand, v read N-major (transposed) from shared
// memory. The numerics per row are tiled_forward.cu's (forward_common.cuh), so the two forwards differ
// only in how the GEMMs are issued -- which is what the block-size and cross-kernel laws then check.
#include <cuda_runtime.h>

#include <iterator>
#include <type_traits>

#include "kernels/cuda/forward_common.cuh"
#include "kernels/cuda/launchers.hpp"
#include "kernels/cuda/nonfinite.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/wgmma_ops.cuh"

namespace fc::cuda {
namespace {

template <class T, int kD, int kBlockN, int kWG>
__global__ void __launch_bounds__(kWG * 128, 1) wgmma_forward_kernel(const FwdParams<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kBlockM = 64 * kWG, kThreads = 128 * kWG;
  constexpr int kNB = kBlockN / 8, kDB = kD / 8;
  constexpr uint32_t kQBytes = kBlockM * kD * 2, kKVBytes = kBlockN * kD * 2;  // SW128 tiles
  static_assert(kD % 64 == 0 && kBlockN % 64 == 0, "SW128 panels are 64 columns wide");
  extern __shared__ unsigned char smem_raw[];
  // Swizzle atoms need 1024-byte alignment; the launcher adds the slack.
  const uint32_t raw = smem_addr(smem_raw), base = (raw + 1023u) & ~1023u;
  unsigned char* const base_ptr = smem_raw + (base - raw);
  const uint32_t s_q = base;                  // (kBlockM, kD)
  const uint32_t s_k = s_q + kQBytes;         // (2, kBlockN, kD)
  const uint32_t s_v = s_k + 2 * kKVBytes;    // (2, kBlockN, kD)

  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // longest causal rows first: better tail balance
  const int h = blockIdx.y, b = blockIdx.z, h_kv = h / (p.heads_q / p.heads_kv);
  const int m0 = m_block * kBlockM, w0 = wg * 64 + warp * 16;  // first row of the tile, of the warp
  const T* q = p.q + ((int64_t(b) * p.heads_q + h) * p.n_q + m0) * kD;  // (kBlockM, kD) tile
  const T* k = p.k + (int64_t(b) * p.heads_kv + h_kv) * p.n_k * kD;     // (n_k, kD)
  const T* v = p.v + (int64_t(b) * p.heads_kv + h_kv) * p.n_k * kD;     // (n_k, kD)
  const int n_tiles = key_tiles(p.mask, p.n_q, p.n_k, m0, kBlockM, kBlockN);

  float o[kDB][4] = {};  // (16, kD) per warp, fp32: the m64nkD accumulator of the warpgroup
  float m[2] = {rules::neg_inf<float>(), rules::neg_inf<float>()}, l[2] = {0.f, 0.f};  // rows g, g + 8
  float s[kNB][4];               // scores of key tile n + 1 (C layout), then its fp32 weights P
  float corr[2];                 // exp2(m_old - m_new) still owed to o
  uint32_t pa[kBlockN / 16][4];  // P of key tile n in T: register A fragments of o += P v

  // S = q k_n^T: kD / 16 k-steps of m64n{kBlockN}k16, both operands K-major in shared memory. A k-step
  // moves 32 bytes along a 128-byte swizzled row and jumps panels every 4 steps; this warpgroup's 64
  // q rows start 64 wg rows into each panel.
  // Descriptors move by adding (byte offset >> 4) to their address field: one base each, the rest
  // compile-time immediates.
  const uint64_t desc_q = sw128_desc(s_q + wg * 64 * 128, 16, 1024);
  const uint64_t desc_k = sw128_desc(s_k, 16, 1024);
  const uint64_t desc_v = sw128_desc(s_v, kBlockN * 128, 1024);
  auto issue_scores = [&](int buf) {
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint64_t da = desc_q + (((ks / 4) * kBlockM * 128 + (ks % 4) * 32) >> 4);
      const uint64_t db = desc_k + ((buf * kKVBytes + (ks / 4) * kBlockN * 128 + (ks % 4) * 32) >> 4);
      wgmma_ss<T, kBlockN>(reinterpret_cast<float(&)[kBlockN / 2]>(s), da, db, ks > 0);
    }
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

  // Pipeline (FlashAttention-3's intra-warpgroup overlap, with cp.async in place of TMA): step n issues
  // S_{n+1} = q k_{n+1}^T and then o += P_n v_n, and runs the softmax of S_{n+1} while P_n v_n is
  // still on the tensor cores; only the rescale of o waits for it. cp.async groups: {q, k_0},
  // {v_0, k_1}, then {k_{n+2}, v_{n+1}} per step; one barrier per step, loads a whole step ahead.
  if (n_tiles > 0) {
    load_tile_sw128<kBlockM, kD, kThreads>(s_q, q, p.n_q - m0);
    load_tile_sw128<kBlockN, kD, kThreads>(s_k, k, p.n_k);
    cp_async_commit();
    load_tile_sw128<kBlockN, kD, kThreads>(s_v, v, p.n_k);
    if (n_tiles > 1) load_tile_sw128<kBlockN, kD, kThreads>(s_k + kKVBytes, k + int64_t(kBlockN) * kD, p.n_k - kBlockN);
    cp_async_commit();
    cp_async_wait<1>();  // q, k_0
    fence_proxy_async();
    __syncthreads();
    wgmma_fence();
    issue_scores(0);
    wgmma_wait<0>();
    fence_all();
    softmax_update<T, kNB>(s, m, l, corr, p, tile_needs_mask(p.mask, p.n_q, p.n_k, m0, 0, kBlockN), m0 + w0, 0);
    rescale_and_pack<T, kNB, kDB>(s, corr, o, pa);
  }
  // One step; kMore: a key tile n + 1 follows. (Two instantiations, not a run-time branch around
  // the wgmma issue, which would make ptxas serialize every wgmma of the kernel.)
  auto step = [&](int n, auto more_tag) {
    constexpr bool kMore = decltype(more_tag)::value;
    const int n0 = n * kBlockN, cur = n & 1, next = cur ^ 1;
    cp_async_wait<0>();   // v_n and k_{n+1} have landed
    fence_proxy_async();  // ... and are visible to wgmma's (async-proxy) reads
    __syncthreads();      // for every thread; S_n (k_n's buffer) and P_{n-1} v_{n-1} are done everywhere

    // NaN blast radius: a non-finite v in a tile straddling the mask is scrubbed to 0 here and its
    // true contributions re-added (o is at max m_n and holds no GEMM now; k_n's buffer is scratch).
    if (tile_needs_mask(p.mask, p.n_q, p.n_k, m0, n0, kBlockN)) {
      T* const v_tile = reinterpret_cast<T*>(base_ptr + kQBytes + (2 + cur) * kKVBytes);
      if (scrub_nonfinite<kBlockN, kD, kThreads>(v_tile)) {  // block-uniform and rare
        float(&o1)[1][kDB][4] = reinterpret_cast<float(&)[1][kDB][4]>(o);
        const uint32_t(&pa1)[1][kBlockN / 16][4] = reinterpret_cast<const uint32_t(&)[1][kBlockN / 16][4]>(pa);
        readd_nonfinite_v<kD, kBlockM, kBlockN, 1>(o1, pa1, reinterpret_cast<T*>(base_ptr + kQBytes + cur * kKVBytes),
                                                   v, p.mask, p.n_q, p.n_k, m0, w0, n0);
        fence_proxy_async();  // the scrub's stores must reach wgmma's reads of v_n
        __syncthreads();
      }
    }
    if (n + 2 < n_tiles)
      load_tile_sw128<kBlockN, kD, kThreads>(s_k + cur * kKVBytes, k + int64_t(n0 + 2 * kBlockN) * kD, p.n_k - n0 - 2 * kBlockN);
    if constexpr (kMore)
      load_tile_sw128<kBlockN, kD, kThreads>(s_v + next * kKVBytes, v + int64_t(n0 + kBlockN) * kD, p.n_k - n0 - kBlockN);
    cp_async_commit();

    wgmma_fence();
    if constexpr (kMore) issue_scores(next);
    // o += P_n v_n: kBlockN / 16 k-steps of m64n{kD}k16, P from registers (rounded to T), v N-major:
    // a k-step is 16 rows (2048 bytes) down the tile, panels kBlockN * 128 bytes apart.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
      wgmma_rs_tb<T, kD>(reinterpret_cast<float(&)[kD / 2]>(o), pa[kk], desc_v + ((cur * kKVBytes + kk * 16 * 128) >> 4));
    wgmma_commit();
    if constexpr (kMore) {
      wgmma_wait<1>();  // S_{n+1} is done; P_n v_n may still run
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb) fence_operands(s[nb]);
      softmax_update<T, kNB>(s, m, l, corr, p, tile_needs_mask(p.mask, p.n_q, p.n_k, m0, n0 + kBlockN, kBlockN),
                             m0 + w0, n0 + kBlockN);
    }
    wgmma_wait<0>();  // P_n v_n is done: o and pa are free
    fence_all();
    if constexpr (kMore) rescale_and_pack<T, kNB, kDB>(s, corr, o, pa);
  };
  int n = 0;
  for (; n + 1 < n_tiles; ++n) step(n, std::true_type{});
  if (n_tiles > 0) step(n, std::false_type{});
  cp_async_wait<0>();
  store_o_lse<T, kDB>(p, o, m, l, b, h, m0 + w0);
#else
  __trap();  // built without sm_90a: wgmma_forward_supports() keeps launches away from here
#endif
}

template <class T, int kD, int kBlockN, int kWG>
cudaError_t launch(const Problem& pr, const ForwardArgs& a, cudaStream_t stream) {
  constexpr int kBlockM = 64 * kWG;
  constexpr int smem = (kBlockM + 4 * kBlockN) * kD * 2 + 1024;  // + alignment slack
  auto kernel = wgmma_forward_kernel<T, kD, kBlockN, kWG>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  dim3 grid((pr.n_q + kBlockM - 1) / kBlockM, pr.heads_q, pr.batch);
  kernel<<<grid, kWG * 128, smem, stream>>>(make_fwd_params<T>(pr, a));
  return cudaGetLastError();
}

// The registry's configs first (the same three for both head dims), then extra tiles for the benchmark.
constexpr Tile kTiles[] = {{128, 128}, {128, 64}, {64, 128}, {192, 64}};

template <class T, int kD>
cudaError_t dispatch_tile(const Problem& pr, Tile t, const ForwardArgs& a, cudaStream_t s) {
  if (t.block_m == 128 && t.block_n == 128) return launch<T, kD, 128, 2>(pr, a, s);
  if (t.block_m == 128 && t.block_n == 64) return launch<T, kD, 64, 2>(pr, a, s);
  if (t.block_m == 64 && t.block_n == 128) return launch<T, kD, 128, 1>(pr, a, s);
  if (t.block_m == 192 && t.block_n == 64) return launch<T, kD, 64, 3>(pr, a, s);
  return cudaErrorInvalidValue;
}

bool device_is_sm90() {
  static const bool yes = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return major == 9;
  }();
  return yes;
}

}  // namespace

int wgmma_forward_tiles(int d, Tile* out, int max_out) {
  if (d != 64 && d != 128) return 0;
  int n = 0;
  for (; n < int(std::size(kTiles)) && n < max_out; ++n) out[n] = kTiles[n];
  return n;
}

bool wgmma_forward_supports(const Problem& p, Tile t) {
  if (!well_formed(p) || (p.dtype != DType::F16 && p.dtype != DType::BF16) || !device_is_sm90()) return false;
  Tile tiles[std::size(kTiles)];
  const int n = wgmma_forward_tiles(p.d, tiles, int(std::size(kTiles)));
  for (int i = 0; i < n; ++i)
    if (tiles[i].block_m == t.block_m && tiles[i].block_n == t.block_n) return true;
  return false;
}

cudaError_t wgmma_forward(const Problem& p, Tile t, const ForwardArgs& a, cudaStream_t stream) {
  if (t.block_m == 0 && t.block_n == 0) t = Tile{128, 128};
  if (!wgmma_forward_supports(p, t)) return cudaErrorInvalidValue;
  if (p.dtype == DType::F16) return p.d == 64 ? dispatch_tile<__half, 64>(p, t, a, stream) : dispatch_tile<__half, 128>(p, t, a, stream);
  return p.d == 64 ? dispatch_tile<__nv_bfloat16, 64>(p, t, a, stream) : dispatch_tile<__nv_bfloat16, 128>(p, t, a, stream);
}

}  // namespace fc::cuda
