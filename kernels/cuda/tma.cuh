// TMA and mbarrier pipelines of the Hopper kernels (wgmma_forward.cu, wgmma_backward.cu,
// wgmma_backward_dq.cu), in one place: the host's tensor maps (tma.cpp), the device's bulk tensor
// copies and reduce-adds, the mbarriers they complete on, and the pipeline state that walks a ring of
// stages (stage index and phase parity, as cutlass::PipelineState). Hand-written PTX wrappers: these
// instructions have no C++ API in the CUDA runtime headers.
//
// A warp-specialised pipeline: a producer thread issues bulk tensor copies that complete_tx on a
// stage's "full" barrier (armed by its expect_tx); consumers wait on that barrier's phase parity, and
// arrive on the stage's "empty" barrier once they no longer read it; the producer waits on "empty"
// before it refills the stage. A barrier's phase flips each time it completes, so a walk over a ring
// of kStages stages waits at step n on parity (n / kStages) mod 2 (PipelineState).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "contract/attention.h"
#if defined(__CUDACC__)
#include "kernels/cuda/mma.cuh"
#endif

namespace fc::cuda {

// Host (tma.cpp). A (heads, rows, d) TMA view of a contract tensor (b, h, n, d) of dtype F16 / BF16,
// boxes of (1, box_rows, 64) elements with the 128-byte swizzle: one box is one SW128 panel of a tile
// (wgmma.cuh); rows past n arrive as zeros. False without the driver entry point or for a pointer TMA
// cannot address.
bool tensor_map(CUtensorMap* map, const void* base, DType dtype, int d, int rows, int heads, int box_rows);
// A (rows, cols) fp32 TMA view (cols * 4 a multiple of 16), boxes of (1, box_cols), no swizzle.
bool tensor_map_f32(CUtensorMap* map, const float* base, int cols, int rows, int box_cols);
// A (heads, rows, d) TMA view of an fp32 tensor (b, h, n, d), boxes of (1, box_rows, 32) elements with
// the 128-byte swizzle (sw128_offset_f32's layout): the d_q accumulator, for tma_reduce_add_3d.
bool tensor_map_f32_sw128(CUtensorMap* map, float* base, int d, int rows, int heads, int box_rows);

#if defined(__CUDACC__)  // the device half (tma.cpp, host C++, includes the declarations above only)

// An mbarrier: 8 bytes of shared memory, a member of a kernel's shared storage; the instructions take
// its shared-window address (SharedStorageRef::addr).
using Mbarrier = uint64_t;

// A kernel's shared storage S (a struct of aligned arrays and mbarriers) placed at shared-window
// address `base`: `s` for the kernel body's loads and stores, addr(member) for the shared address the
// PTX of TMA, mbarriers and wgmma descriptors takes -- base plus the member's offset, in 32-bit
// arithmetic that folds into the instructions' immediates (converting a generic pointer to the shared
// window would not).
template <class S>
struct SharedStorageRef {
  S& s;
  uint32_t base;
  // The member's offset in the storage.
  template <class M>
  __device__ __forceinline__ uint32_t offset(const M& member) const {
    return uint32_t(reinterpret_cast<const char*>(&member) - reinterpret_cast<const char*>(&s));
  }
  template <class M>
  __device__ __forceinline__ uint32_t addr(const M& member) const {
    return base + offset(member);
  }
  // An array of the storage, and stage st of a ring (an array of stages) of it, for generic loads and
  // stores: st is any index the kernel computes, one that wraps past the ring included. (Byte offsets
  // from the storage's base: the form the compiler folds into the shortest shared addresses.)
  template <class E, size_t kN>
  __device__ __forceinline__ E* ptr(E (&array)[kN]) const {
    return reinterpret_cast<E*>(reinterpret_cast<unsigned char*>(&s) + offset(array));
  }
  template <class E, size_t kStages, size_t kN>
  __device__ __forceinline__ E* stage(E (&ring)[kStages][kN], int st) const {
    return reinterpret_cast<E*>(reinterpret_cast<unsigned char*>(&s) + offset(ring) + st * uint32_t(sizeof(ring[0])));
  }
};

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arms the barrier's current phase for `bytes` of bulk copies (and arrives once).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// A walk's position in a ring of kStages stages (cutlass::PipelineState): the stage it is at and the
// phase parity that stage's barriers complete with this time round, advanced by ++. It counts the
// walk's steps, and stage and phase follow from the count (count mod kStages, count / kStages mod 2),
// so the state of step n is PipelineState{n}, what n increments from step 0 give.
template <int kStages>
struct PipelineState {
  int count;  // steps from the walk's first
  __device__ __forceinline__ int index() const {
    if constexpr ((kStages & (kStages - 1)) == 0) return count & (kStages - 1);
    return count % kStages;
  }
  // What a consumer waits on the stage's full barrier for.
  __device__ __forceinline__ uint32_t phase() const { return (count / kStages) & 1; }
  // What the producer waits on the stage's empty barrier for before refilling it: the consumers'
  // release of the stage's previous use, one phase back (the first kStages fills wait on nothing).
  __device__ __forceinline__ uint32_t release_phase() const { return ((count / kStages) & 1) ^ 1; }
  __device__ __forceinline__ PipelineState& operator++() {
    ++count;
    return *this;
  }
};

// One box of a 3-D tensor map (coordinates innermost first) into shared memory at dst; the bytes
// complete_tx on bar. Out-of-range elements arrive as zeros.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* tmap, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
// One box of a 2-D tensor map (coordinates innermost first), as tma_load_3d.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* tmap, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// Adds one box of shared memory (laid out as the map's box) into the map's global tensor, element by
// element in L2 (fp32 add, as atomicAdd rounds); elements out of the tensor's range are dropped. The
// read of shared memory completes as a bulk group of the issuing thread (bulk_commit, bulk_wait_read);
// the shared-memory writes it reads must be made visible to the async proxy first (fence_proxy_async).
__device__ __forceinline__ void tma_reduce_add_3d(const void* tmap, uint32_t src, int c0, int c1, int c2) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(tmap)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's bulk groups but the newest N have finished reading shared memory (the buffer may be
// written again) / have completed (their global writes are performed).
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// A resident-tile + streamed-k/v pipeline (the forward's and the deterministic d_q kernel's): the
// resident tile's full barrier (one arrival: the producer's expect_tx), then kKvStages stages each of
// k_full, v_full (the same), k_empty, v_empty (one arrival per consumer warp). A member of the
// kernel's shared storage.
constexpr int kKvStages = 2;
struct KvPipeline {
  Mbarrier resident_full;
  Mbarrier k_full[kKvStages], v_full[kKvStages], k_empty[kKvStages], v_empty[kKvStages];
};

// Initialises the barriers of bar, a KvPipeline of sm's storage. Thread 0 only.
template <class S>
__device__ __forceinline__ void init_kv_pipeline(const SharedStorageRef<S>& sm, KvPipeline& bar, int consumer_warps) {
  mbar_init(sm.addr(bar.resident_full), 1);
  for (int i = 0; i < kKvStages; ++i) {
    mbar_init(sm.addr(bar.k_full[i]), 1);
    mbar_init(sm.addr(bar.v_full[i]), 1);
    mbar_init(sm.addr(bar.k_empty[i]), consumer_warps);  // lane 0 of every consumer warp
    mbar_init(sm.addr(bar.v_empty[i]), consumer_warps);
  }
  mbar_init_fence();
}

// A producer thread's walk over n_tiles key tiles (the forward's and the deterministic d_q kernel's):
// k and v of tile n, kPanels SW128 panels of kBlockN rows each, into stage n % 2 of s_k / s_v
// (kv_bytes apart), each once the consumers have released that stage's previous use. bar: the
// KvPipeline of sm's storage.
template <int kPanels, int kBlockN, class S>
__device__ __forceinline__ void tma_stream_kv(const void* tm_k, const void* tm_v, uint32_t s_k, uint32_t s_v,
                                              uint32_t kv_bytes, int n_tiles, int bh_kv, const SharedStorageRef<S>& sm,
                                              KvPipeline& bar) {
  for (PipelineState<kKvStages> w{0}; w.count < n_tiles; ++w) {
    const int n = w.count, st = w.index();
    const uint32_t parity = w.release_phase();
    if (n >= kKvStages) mbar_wait(sm.addr(bar.k_empty[st]), parity);
    mbar_arrive_expect_tx(sm.addr(bar.k_full[st]), kv_bytes);
    for (int c = 0; c < kPanels; ++c)
      tma_load_3d(s_k + st * kv_bytes + c * kBlockN * 128, tm_k, 64 * c, n * kBlockN, bh_kv, sm.addr(bar.k_full[st]));
    if (n >= kKvStages) mbar_wait(sm.addr(bar.v_empty[st]), parity);
    mbar_arrive_expect_tx(sm.addr(bar.v_full[st]), kv_bytes);
    for (int c = 0; c < kPanels; ++c)
      tma_load_3d(s_v + st * kv_bytes + c * kBlockN * 128, tm_v, 64 * c, n * kBlockN, bh_kv, sm.addr(bar.v_full[st]));
  }
}

#endif  // __CUDACC__

}  // namespace fc::cuda
