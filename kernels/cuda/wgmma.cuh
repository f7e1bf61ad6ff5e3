// Hopper (sm_90a) building blocks of the wgmma kernels (wgmma_forward.cu, wgmma_backward.cu):
// shared-memory matrix descriptors, the 128-byte-swizzled tile layout they describe (and TMA writes),
// warpgroup fences, mbarriers, TMA loads, register budgets. Hand-written PTX wrappers: these
// instructions have no C++ API in the CUDA runtime headers (the wgmma calls themselves are generated
// into wgmma_ops.cuh).
//
// Tile layout (SW128, what a descriptor with swizzle mode 1 reads): a (kRows, kCols) b16 tile is
// kCols / 64 column panels, one after the other; a panel is kRows rows of 128 bytes (64 elements);
// 16-byte chunk c of row r sits at chunk c ^ (r % 8). Panels start on 1024-byte boundaries (8 rows),
// so the hardware's swizzle, which XORs address bits [4, 7) with bits [7, 10), agrees with ours.
//
// Accumulator layout of m64nNk16 (fp32, N / 2 registers per thread; warp w of the warpgroup owns
// rows 16 w .. 16 w + 15, g = lane / 4, t = lane % 4):
//   d[4 j + e]: row 16 w + g + 8 (e / 2), column 8 j + 2 t + e % 2
// -- per warp, the mma.sync C layout of mma.cuh repeated over N / 8 column blocks, so two adjacent
// blocks of S are exactly one register A fragment of P for the next GEMM.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "contract/attention.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/wgmma_ops.cuh"

namespace fc::cuda {

// Host (wgmma_forward.cu). A (heads, rows, d) TMA view of a contract tensor (b, h, n, d) of dtype
// F16 / BF16, boxes of (1, box_rows, 64) elements with the 128-byte swizzle: one box is one SW128
// panel of a tile; rows past n arrive as zeros. False without the driver entry point or for a
// pointer TMA cannot address.
bool tensor_map(CUtensorMap* map, const void* base, DType dtype, int d, int rows, int heads, int box_rows);
// A (rows, cols) fp32 TMA view (cols * 4 a multiple of 16), boxes of (1, box_cols), no swizzle.
bool tensor_map_f32(CUtensorMap* map, const float* base, int cols, int rows, int box_cols);
// A (heads, rows, d) TMA view of an fp32 tensor (b, h, n, d), boxes of (1, box_rows, 32) elements with
// the 128-byte swizzle (sw128_offset_f32's layout): the d_q accumulator, for tma_reduce_add_3d.
bool tensor_map_f32_sw128(CUtensorMap* map, float* base, int d, int rows, int heads, int box_rows);

// Byte offset of element (row, col) in an SW128 tile of kRows rows.
template <int kRows>
__device__ __forceinline__ uint32_t sw128_offset(int row, int col) {
  static_assert(kRows % 8 == 0, "panels must hold whole 8-row swizzle atoms");
  const int panel = col / 64, chunk = (col % 64) / 8;
  return uint32_t(panel * kRows * 128 + row * 128 + ((chunk ^ (row & 7)) << 4) + (col % 8) * 2);
}

// Byte offset of fp32 element (row, col) in an SW128 tile of kRows rows: the same swizzle over panels
// of 32 columns (128 bytes), as a TMA box of (kRows, 32) fp32 elements lands in shared memory.
template <int kRows>
__device__ __forceinline__ uint32_t sw128_offset_f32(int row, int col) {
  static_assert(kRows % 8 == 0, "panels must hold whole 8-row swizzle atoms");
  const int panel = col / 32, chunk = (col % 32) / 4;
  return uint32_t(panel * kRows * 128 + row * 128 + ((chunk ^ (row & 7)) << 4) + (col % 4) * 4);
}

// Matrix descriptor (PTX ISA, wgmma "matrix descriptor"): start address, leading- and stride-
// dimension byte offsets (all in 16-byte units), swizzle mode 1 = 128 bytes. For a K-major operand
// the stride offset is the step between 8-row groups (1024 bytes) and the leading offset is unused;
// for an N-major one (imm-trans-b) the leading offset steps between 64-column panels and the stride
// offset between 8-row groups along K.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lead_bytes, uint32_t stride_bytes) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lead_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((stride_bytes >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}

// Orders this warpgroup's register writes before the wgmma that reads them (accumulators, A).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's generic-proxy shared-memory writes (plain stores) visible to the
// async proxy that wgmma reads through; a barrier must follow before another thread's wgmma.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Pins a register value at this point of the program: the compiler may neither move its uses above
// a preceding wgmma wait nor reuse its register while an in-flight wgmma still reads it.
__device__ __forceinline__ void fence_operand(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t& x) { asm volatile("" : "+r"(x)::"memory"); }
template <class X, int N>
__device__ __forceinline__ void fence_operands(X (&x)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) fence_operand(x[i]);
}

// mbarrier (shared-memory transaction barriers) and TMA, for the warp-specialised pipeline: a
// producer thread issues bulk tensor copies that complete_tx on a "full" barrier; consumers wait on
// its phase parity, and arrive on an "empty" barrier once their wgmma no longer reads the stage.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
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
// Named barrier `id` over kThreads threads (ids 0 and 1 are __syncthreads and nonfinite.cuh's NamedSync).
template <int kThreads>
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

// An mbarrier is 8 bytes of shared memory; a pipeline's barriers sit in numbered slots from its first,
// and the two stages of a pair in consecutive slots: bar_slot(k_full, stage).
constexpr uint32_t kBarBytes = 8;
__host__ __device__ constexpr uint32_t bar_slot(uint32_t first, uint32_t slot) { return first + kBarBytes * slot; }

// Slots of a resident-tile + streamed-k/v pipeline (the forward's and the deterministic d_q kernel's):
// the resident tile's full barrier, then two stages each of k_full, v_full (one arrival: the
// producer's expect_tx), k_empty, v_empty (one arrival per consumer warp).
struct KvPipeline {
  enum KvSlot : uint32_t { kResidentFull = 0, kKFull = 1, kVFull = 3, kKEmpty = 5, kVEmpty = 7, kSlots = 9 };
};

// Initialises a KvPipeline's barriers from `first`. Thread 0 only.
__device__ __forceinline__ void init_kv_pipeline_barriers(uint32_t first, int consumer_warps) {
  mbar_init(bar_slot(first, KvPipeline::kResidentFull), 1);
  for (int i = 0; i < 2; ++i) {
    mbar_init(bar_slot(first, KvPipeline::kKFull + i), 1);
    mbar_init(bar_slot(first, KvPipeline::kVFull + i), 1);
    mbar_init(bar_slot(first, KvPipeline::kKEmpty + i), consumer_warps);  // lane 0 of every consumer warp
    mbar_init(bar_slot(first, KvPipeline::kVEmpty + i), consumer_warps);
  }
  mbar_init_fence();
}

// A producer thread's walk over n_tiles key tiles (the forward's and the deterministic d_q kernel's):
// k and v of tile n, kPanels SW128 panels of kBlockN rows each, into stage n % 2 of s_k / s_v
// (kv_bytes apart), each once the consumers have released that stage's previous use. Barriers:
// k_full[2], v_full[2], k_empty[2], v_empty[2] (each pair in consecutive slots).
template <int kPanels, int kBlockN>
__device__ __forceinline__ void tma_stream_kv(const void* tm_k, const void* tm_v, uint32_t s_k, uint32_t s_v,
                                              uint32_t kv_bytes, int n_tiles, int bh_kv, uint32_t k_full,
                                              uint32_t v_full, uint32_t k_empty, uint32_t v_empty) {
  for (int n = 0; n < n_tiles; ++n) {
    const int st = n & 1;
    const uint32_t parity = ((n / 2) & 1) ^ 1;  // the consumers' release of this stage's previous use
    if (n >= 2) mbar_wait(bar_slot(k_empty, st), parity);
    mbar_arrive_expect_tx(bar_slot(k_full, st), kv_bytes);
    for (int c = 0; c < kPanels; ++c)
      tma_load_3d(s_k + st * kv_bytes + c * kBlockN * 128, tm_k, 64 * c, n * kBlockN, bh_kv, bar_slot(k_full, st));
    if (n >= 2) mbar_wait(bar_slot(v_empty, st), parity);
    mbar_arrive_expect_tx(bar_slot(v_full, st), kv_bytes);
    for (int c = 0; c < kPanels; ++c)
      tma_load_3d(s_v + st * kv_bytes + c * kBlockN * 128, tm_v, 64 * c, n * kBlockN, bh_kv, bar_slot(v_full, st));
  }
}

// acc = A B^T for A (64 rows) and B (kN rows), both K-major SW128 tiles of kK columns: kK / 16 k-steps
// of m64n{kN}k16, each 32 bytes along a 128-byte row, a new 64-column panel every 4 steps (panels
// a_panel / b_panel bytes apart); b_off: the byte offset of B's stage. Issues, does not commit.
template <class T, int kN, int kK>
__device__ __forceinline__ void wgmma_kmajor(float (&acc)[kN / 2], uint64_t desc_a, uint32_t a_panel, uint64_t desc_b,
                                             uint32_t b_panel, uint32_t b_off) {
#pragma unroll
  for (int ks = 0; ks < kK / 16; ++ks) {
    const uint32_t a_off = ((ks / 4) * a_panel + (ks % 4) * 32) >> 4;
    const uint32_t b_step = (b_off + (ks / 4) * b_panel + (ks % 4) * 32) >> 4;
    wgmma_ss<T, kN>(acc, desc_a + a_off, desc_b + b_step, ks > 0);
  }
}

// Per-warpgroup register budgets (all four warps execute it): producers give registers back,
// consumers take them.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace fc::cuda
