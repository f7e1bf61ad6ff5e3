// cuda_tiled forward: FlashAttention-2 structure on mma.sync tensor cores.
// A CTA owns a (kBlockM, d) tile of q and walks the (kBlockN, d) tiles of k and v (double-buffered
// through cp.async into swizzled shared memory). Each warp owns 16 or 32 query rows: its scores, its
// running <m, l> and its o accumulator stay in registers for the whole walk.
#include <cuda_runtime.h>

#include "kernels/cuda/forward_common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mutant_switch.cuh"
#include "kernels/cuda/nonfinite.cuh"
#include "kernels/cuda/static_switch.cuh"
#include "kernels/cuda/tiled_traits.hpp"
#include "contract/rules.h"

namespace fc::cuda {
namespace {

// Shared memory of one CTA: the q tile and two stages of the k and v tiles, each swizzled (mma.cuh's
// swz) and filled by cp.async in 16-byte chunks.
template <class T, int kD, int kBlockM, int kBlockN>
struct TiledFwdStorage {
  alignas(128) T q[kBlockM * kD];  // (kBlockM, kD)
  T k[2][kBlockN * kD];            // (2, kBlockN, kD)
  T v[2][kBlockN * kD];            // (2, kBlockN, kD)
};

// kMT: 16-row m-tiles per warp. kMT = 1 keeps the warp's q fragments in registers; kMT = 2 reads
// them from shared memory at every k-step but reuses each k / v fragment for two m-tiles, halving
// the shared-memory traffic per mma (the FlashAttention-2 layout). kFault: a planted fault of a CUDA
// mutant, Fault::None for the real kernel; the body reads what it changes from FaultTraits<kFault>
// (mutant_traits.hpp).
template <class T, int kD, int kBlockM, int kBlockN, int kMT, Fault kFault = Fault::None>
__global__ void __launch_bounds__(kBlockM * 2 / kMT) tiled_forward_kernel(const FwdParams<T> p) {
  constexpr int kThreads = kBlockM * 2 / kMT;  // kBlockM / (16 kMT) warps
  constexpr int kNB = kBlockN / 8;             // score n-blocks per m-tile
  constexpr int kDB = kD / 8;                  // o n-blocks
  static_assert(kMT == 1 || kMT == 2, "a warp owns one or two 16-row m-tiles");
  static_assert(kBlockM % (16 * kMT) == 0, "a warp owns 16 kMT query rows");
  static_assert(kBlockN % 16 == 0, "k is read two 8-key n-blocks at a time; o += P v steps 16 keys");
  static_assert(kD % 64 == 0, "SwzLane: rows of q, k and v of at least 8 chunks");
  using S = TiledFwdStorage<T, kD, kBlockM, kBlockN>;
  using F = FaultTraits<kFault>;
  static_assert(sizeof(S) <= kMaxSmemSm80, "shared memory of an sm_80 CTA");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  S& smem = *reinterpret_cast<S*>(smem_raw);
  T* s_q = smem.q;     // (kBlockM, kD)
  T* s_k = smem.k[0];  // (2, kBlockN, kD)
  T* s_v = smem.v[0];  // (2, kBlockN, kD)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m_block = gridDim.x - 1 - blockIdx.x;  // longest causal rows first: better tail balance
  const int h = blockIdx.y, b = blockIdx.z, h_kv = h / (p.heads_q / p.heads_kv);
  const int m0 = m_block * kBlockM, w0 = warp * 16 * kMT;  // first row of the tile, of the warp
  constexpr bool kOffsets32 = F::kHeadOffsets32;
  const T* q = p.q + element_offset<kOffsets32>(((int64_t(b) * p.heads_q + h) * p.n_q + m0) * kD);  // (kBlockM, kD)
  const T* k = p.k + element_offset<kOffsets32>((int64_t(b) * p.heads_kv + h_kv) * p.n_k * kD);     // (n_k, kD)
  const T* v = p.v + element_offset<kOffsets32>((int64_t(b) * p.heads_kv + h_kv) * p.n_k * kD);     // (n_k, kD)
  // Rows of k and v the loads treat as present: n_k, or without the key-tail predicate whole key tiles
  // (rows past n_k are the next head's).
  const int n_k_rows = F::kKeyTailPredicate ? p.n_k : (p.n_k + kBlockN - 1) / kBlockN * kBlockN;

  int n_tiles = rules::key_tile_count(p.mask, p.n_q, p.n_k, m0, kBlockM, kBlockN);
  if constexpr (F::kCausalTilesShort > 0)  // the causal walk stops short: the diagonal key tile is not walked
    if (p.mask != Mask::None && n_tiles >= F::kCausalTilesShort) n_tiles -= F::kCausalTilesShort;

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
    load_tile<kBlockN, kD, kThreads>(s_k, k, n_k_rows);
    cp_async_commit();
    load_tile<kBlockN, kD, kThreads>(s_v, v, n_k_rows);
    cp_async_commit();
  }
  for (int n = 0; n < n_tiles; ++n) {
    const int n0 = n * kBlockN, next = (n + 1) & 1;
    cp_async_wait<1>();  // all but v_n: k_n has landed
    // ... for every thread; and every warp is done with k_{n-1}'s buffer.
    if constexpr (F::kSyncAfterCopies) __syncthreads();
    if (n + 1 < n_tiles)
      load_tile<kBlockN, kD, kThreads>(ring_stage(smem.k, next), k + int64_t(n0 + kBlockN) * kD,
                                       n_k_rows - n0 - kBlockN);
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
    bool need_mask = rules::key_tile_straddles(p.mask, p.n_q, p.n_k, m0, n0, kBlockN);
    if constexpr (!F::kKeyTailPredicate)  // whole key tiles: only the causal mask's straddle
      need_mask = p.mask != Mask::None && int64_t(n0) + kBlockN - 1 > m0 + rules::causal_offset(p.mask, p.n_q, p.n_k);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
      online_softmax_step<T, kNB, kDB, F::kKeyTailPredicate>(s[mt], m[mt], l[mt], o[mt], pa[mt], p, need_mask,
                                                             m0 + w0 + mt * 16, n0);
    cp_async_wait<1>();  // all but k_{n+1}: v_n has landed
    __syncthreads();     // ... for every thread; and every warp is done with v_{n-1}'s buffer
    if (n + 1 < n_tiles)
      load_tile<kBlockN, kD, kThreads>(ring_stage(smem.v, next), v + int64_t(n0 + kBlockN) * kD,
                                       n_k_rows - n0 - kBlockN);
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
  for (int mt = 0; mt < kMT; ++mt)
    store_o_lse<T, kDB, F::kStoreRowPastEnd>(p, o[mt], m[mt], l[mt], b, h, m0 + w0 + mt * 16);
}

template <class T, int kD, int kBlockM, int kBlockN, int kMT, Fault kFault = Fault::None>
cudaError_t launch(const Problem& pr, const ForwardArgs& a, cudaStream_t stream) {
  const FwdParams<T> p = make_fwd_params<T>(pr, a);
  constexpr int smem = int(sizeof(TiledFwdStorage<T, kD, kBlockM, kBlockN>));
  auto kernel = tiled_forward_kernel<T, kD, kBlockM, kBlockN, kMT, kFault>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  dim3 grid((pr.n_q + kBlockM - 1) / kBlockM, pr.heads_q, pr.batch);
  kernel<<<grid, kBlockM * 2 / kMT, smem, stream>>>(p);
  return cudaGetLastError();
}

// The forward tile of tiled_traits.hpp that (block_m, block_n) is at head dim d.
constexpr TiledForwardTile tiled_forward_tile(Tile t, int d) {
  for (const TiledForwardTile& x : TiledTraits::kForwardTiles)
    if (x.block_m == t.block_m && x.block_n == t.block_n && (x.d == 0 || x.d == d)) return x;
  return TiledForwardTile{};
}

}  // namespace

// The tiles of tiled_traits.hpp, for its dtypes and head dims.
cudaError_t TiledTraits::forward(const Problem& p, Tile t, const ForwardArgs& a, void*, cudaStream_t stream) {
  if (!well_formed(p)) return cudaErrorInvalidValue;
  if (t == Tile{}) t = tile_for(kForwardDefault, p.d);
  return dtype_dim_switch<TiledTraits>(p.dtype, p.d, [&](auto type, auto dim) {
    using T = typename decltype(type)::type;
    constexpr int kD = decltype(dim)::value;
    return tile_switch<kForwardTiles, kD>(t, [&](auto i) {
      constexpr TiledForwardTile x = kForwardTiles[decltype(i)::value];
      return launch<T, kD, x.block_m, x.block_n, x.warp_m_tiles>(p, a, stream);
    });
  });
}

// A CUDA mutant's forward (mutant_traits.hpp): its one tile, dtype and head dim, with its fault.
cudaError_t tiled_forward_mutant(Fault f, const Problem& p, const ForwardArgs& a, cudaStream_t stream) {
  if (!well_formed(p)) return cudaErrorInvalidValue;
  return mutant_switch<FaultSite::TiledForward>(f, p, [&](auto i) {
    constexpr CudaMutant m = kCudaMutants[decltype(i)::value];
    constexpr TiledForwardTile x = tiled_forward_tile(m.forward, m.d);
    static_assert(x.block_m > 0, "a mutant runs a tile tiled_traits.hpp lists");
    return launch<MutantStorage<decltype(i)::value>, m.d, x.block_m, x.block_n, x.warp_m_tiles, m.fault>(p, a, stream);
  });
}

}  // namespace fc::cuda
