// cuda_tiled forward: FlashAttention-2 structure on mma.sync tensor cores.
// A CTA owns a (kBlockM, d) tile of q and walks the (kBlockN, d) tiles of k and v (double-buffered
// through cp.async into swizzled shared memory). Each warp owns 16 or 32 query rows: its scores, its
// running <m, l> and its o accumulator stay in registers for the whole walk.
#include <cuda_runtime.h>

#include "kernels/cuda/forward_common.cuh"
#include "kernels/cuda/launchers.hpp"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/nonfinite.cuh"
#include "kernels/rules.h"

namespace fc::cuda {
namespace {

// kMT: 16-row m-tiles per warp. kMT = 1 keeps the warp's q fragments in registers; kMT = 2 reads
// them from shared memory at every k-step but reuses each k / v fragment for two m-tiles, halving
// the shared-memory traffic per mma (the FlashAttention-2 layout).
template <class T, int kD, int kBlockM, int kBlockN, int kMT>
__global__ void __launch_bounds__(kBlockM * 2 / kMT) tiled_forward_kernel(const FwdParams<T> p) {
  constexpr int kThreads = kBlockM * 2 / kMT;  // kBlockM / (16 kMT) warps
  constexpr int kNB = kBlockN / 8;             // score n-blocks per m-tile
  constexpr int kDB = kD / 8;                  // o n-blocks
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* s_q = reinterpret_cast<T*>(smem_raw);  // (kBlockM, kD)
  T* s_k = s_q + kBlockM * kD;              // (2, kBlockN, kD)
  T* s_v = s_k + 2 * kBlockN * kD;          // (2, kBlockN, kD)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // longest causal rows first: better tail balance
  const int h = blockIdx.y, b = blockIdx.z, h_kv = h / (p.heads_q / p.heads_kv);
  const int m0 = m_block * kBlockM, w0 = warp * 16 * kMT;               // first row of the tile, of the warp
  const T* q = p.q + ((int64_t(b) * p.heads_q + h) * p.n_q + m0) * kD;  // (kBlockM, kD) tile
  const T* k = p.k + (int64_t(b) * p.heads_kv + h_kv) * p.n_k * kD;     // (n_k, kD)
  const T* v = p.v + (int64_t(b) * p.heads_kv + h_kv) * p.n_k * kD;     // (n_k, kD)

  const int n_tiles = key_tiles(p.mask, p.n_q, p.n_k, m0, kBlockM, kBlockN);

  float o[kMT][kDB][4] = {};   // (16 kMT, kD) per warp, fp32
  float m[kMT][2], l[kMT][2];  // rows g and g + 8 of each m-tile: running max (base 2), partial sum
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      m[mt][r] = rules::neg_inf<float>(), l[mt][r] = 0.f;  // l: per thread, quad-summed at the end
  uint32_t qf[kMT == 1 ? kD / 16 : 1][4];                  // (16, kD) q fragments when kept in registers
  const SwzLane<kD> q_lane(s_q, lane % 16, lane / 16);     // A: rows of q
  const SwzLane<kD> k_lane(s_k, lane % 8 + 8 * (lane / 16), (lane / 8) % 2);  // B: rows of k
  const SwzLane<kD> v_lane(s_v, lane % 16, lane / 16);                        // B (transposed): rows of v

  // cp.async groups: {q, k_0}, {v_0}, then k_{n+1} and v_{n+1} alternately. k_n is awaited before
  // S = q k^T, v_n only before o += P v, so v_n's copy overlaps the scores and the softmax.
  if (n_tiles > 0) {
    load_tile<kBlockM, kD, kThreads>(s_q, q, p.n_q - m0);
    load_tile<kBlockN, kD, kThreads>(s_k, k, p.n_k);
    cp_async_commit();
    load_tile<kBlockN, kD, kThreads>(s_v, v, p.n_k);
    cp_async_commit();
  }
  for (int n = 0; n < n_tiles; ++n) {
    const int n0 = n * kBlockN, next = (n + 1) & 1;
    cp_async_wait<1>();  // all but v_n: k_n has landed
    __syncthreads();     // ... for every thread; and every warp is done with k_{n-1}'s buffer
    if (n + 1 < n_tiles)
      load_tile<kBlockN, kD, kThreads>(s_k + next * kBlockN * kD, k + int64_t(n0 + kBlockN) * kD, p.n_k - n0 - kBlockN);
    cp_async_commit();
    if constexpr (kMT == 1) {
      if (n == 0) {
#pragma unroll
        for (int ks = 0; ks < kD / 16; ++ks) ldmatrix_x4(qf[ks], q_lane.at(w0, 2 * ks));
      }
    }
    const uint32_t buf_off = (n & 1) * kBlockN * kD * int(sizeof(T));  // the k, v buffer in use

    float s[kMT][kNB][4] = {};          // (16 kMT, kBlockN) raw scores q.k of this warp
    uint32_t pa[kMT][kBlockN / 16][4];  // P in T, as mma A fragments (packed early: halves its registers)
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t qa[kMT][4];  // (16, 16) A fragments of q, one per m-tile
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if constexpr (kMT == 1) {
#pragma unroll
          for (int x = 0; x < 4; ++x) qa[mt][x] = qf[ks][x];
        } else {
          ldmatrix_x4(qa[mt], q_lane.at(w0 + mt * 16, 2 * ks));
        }
      }
#pragma unroll
      for (int nb = 0; nb < kNB; nb += 2) {
        uint32_t kb[4];  // (16, 16) B fragment of k: two n-blocks
        ldmatrix_x4(kb, k_lane.at(nb * 8, 2 * ks) + buf_off);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma<T>(s[mt][nb], qa[mt], kb[0], kb[1]);
          mma<T>(s[mt][nb + 1], qa[mt], kb[2], kb[3]);
        }
      }
    }
    const bool need_mask = tile_needs_mask(p.mask, p.n_q, p.n_k, m0, n0, kBlockN);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
      online_softmax_step<T, kNB, kDB>(s[mt], m[mt], l[mt], o[mt], pa[mt], p, need_mask, m0 + w0 + mt * 16, n0);
    cp_async_wait<1>();  // all but k_{n+1}: v_n has landed
    __syncthreads();     // ... for every thread; and every warp is done with v_{n-1}'s buffer
    if (n + 1 < n_tiles)
      load_tile<kBlockN, kD, kThreads>(s_v + next * kBlockN * kD, v + int64_t(n0 + kBlockN) * kD, p.n_k - n0 - kBlockN);
    cp_async_commit();
    const bool v_poisoned = need_mask && scrub_nonfinite<kBlockN, kD, kThreads>(s_v + (n & 1) * kBlockN * kD);
    // o += P v, P rounded to the storage type (the tensor cores take T operands).
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
#pragma unroll
      for (int db = 0; db < kDB; db += 2) {
        uint32_t vb[4];  // (16, 16) B fragment of v (transposed): two n-blocks
        ldmatrix_x4_trans(vb, v_lane.at(kk * 16, db) + buf_off);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma<T>(o[mt][db], pa[mt][kk], vb[0], vb[1]);
          mma<T>(o[mt][db + 1], pa[mt][kk], vb[2], vb[3]);
        }
      }
    }
    if (v_poisoned)  // block-uniform and rare; k_n's buffer, free by now, is the scratch for P
      readd_nonfinite_v<kD, kBlockM, kBlockN, kMT>(o, pa, s_k + (n & 1) * kBlockN * kD, v, p.mask, p.n_q, p.n_k, m0, w0,
                                                   n0);
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) store_o_lse<T, kDB>(p, o[mt], m[mt], l[mt], b, h, m0 + w0 + mt * 16);
}

template <class T, int kD, int kBlockM, int kBlockN, int kMT>
cudaError_t launch(const Problem& pr, const ForwardArgs& a, cudaStream_t stream) {
  const FwdParams<T> p = make_fwd_params<T>(pr, a);
  constexpr int smem = (kBlockM + 4 * kBlockN) * kD * int(sizeof(T));
  auto kernel = tiled_forward_kernel<T, kD, kBlockM, kBlockN, kMT>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  dim3 grid((pr.n_q + kBlockM - 1) / kBlockM, pr.heads_q, pr.batch);
  kernel<<<grid, kBlockM * 2 / kMT, smem, stream>>>(p);
  return cudaGetLastError();
}

// The registry's configs first (same three for both head dims), then extra tiles for the benchmark.
constexpr Tile kTiles64[] = {{64, 64}, {128, 64}, {128, 32}, {128, 128}};
constexpr Tile kTiles128[] = {{64, 64}, {128, 64}, {128, 32}};

// Rows per warp are fixed per tile, by what ran fastest on the H200: 16 (q fragments in registers)
// for 64 x 64 and 128 x 128, 32 (each k / v fragment feeds two m-tiles) for 128 x 64 and 128 x 32.
template <class T, int kD>
cudaError_t dispatch_tile(const Problem& pr, Tile t, const ForwardArgs& a, cudaStream_t s) {
  if (t.block_m == 64 && t.block_n == 64) return launch<T, kD, 64, 64, 1>(pr, a, s);
  if (t.block_m == 128 && t.block_n == 64) return launch<T, kD, 128, 64, 2>(pr, a, s);
  if (t.block_m == 128 && t.block_n == 32) return launch<T, kD, 128, 32, 2>(pr, a, s);
  if constexpr (kD == 64)
    if (t.block_m == 128 && t.block_n == 128) return launch<T, kD, 128, 128, 1>(pr, a, s);
  return cudaErrorInvalidValue;
}

template <class T>
cudaError_t dispatch_dim(const Problem& pr, Tile t, const ForwardArgs& a, cudaStream_t s) {
  if (pr.d == 64) return dispatch_tile<T, 64>(pr, t, a, s);
  if (pr.d == 128) return dispatch_tile<T, 128>(pr, t, a, s);
  return cudaErrorInvalidValue;
}

}  // namespace

int tiled_forward_tiles(int d, Tile* out, int max_out) {
  const Tile* tiles = d == 64 ? kTiles64 : d == 128 ? kTiles128 : nullptr;
  const int count = d == 64 ? 4 : d == 128 ? 3 : 0;
  int n = 0;
  for (; n < count && n < max_out; ++n) out[n] = tiles[n];
  return n;
}

bool tiled_forward_supports(const Problem& p, Tile t) {
  if (!well_formed(p) || (p.dtype != DType::F16 && p.dtype != DType::BF16)) return false;
  Tile tiles[4];
  const int n = tiled_forward_tiles(p.d, tiles, 4);
  for (int i = 0; i < n; ++i)
    if (tiles[i].block_m == t.block_m && tiles[i].block_n == t.block_n) return true;
  return false;
}

cudaError_t tiled_forward(const Problem& p, Tile t, const ForwardArgs& a, cudaStream_t stream) {
  if (t.block_m == 0 && t.block_n == 0) t = p.d == 64 ? Tile{128, 64} : Tile{128, 32};  // fastest measured
  if (!tiled_forward_supports(p, t)) return cudaErrorInvalidValue;
  if (p.dtype == DType::F16) return dispatch_dim<__half>(p, t, a, stream);
  return dispatch_dim<__nv_bfloat16>(p, t, a, stream);
}

}  // namespace fc::cuda
