// Hopper (sm_90a) building blocks of the wgmma kernels (wgmma_forward.cu, wgmma_backward.cu,
// wgmma_backward_dq.cu): the placement of a kernel's shared storage, shared-memory matrix descriptors,
// the 128-byte-swizzled tile layout they describe (and TMA writes; TMA and mbarriers are tma.cuh's),
// warpgroup fences, register budgets. Hand-written PTX wrappers: these instructions have no C++ API in
// the CUDA runtime headers (the wgmma calls themselves are generated into wgmma_ops.cuh).
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

#include <cstdint>

#include "contract/attention.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma_ops.cuh"

namespace fc::cuda {

// A kernel's shared storage S (a struct of SW128 tiles, alignas(kSw128Align), and mbarriers) at the
// first 1024-byte boundary of dynamic shared memory, which is 16-byte aligned only: a swizzle atom is 8
// rows of 128 bytes, and the hardware's swizzle reads the address bits [7, 10). The launch asks for
// sw128_smem_bytes<S>(): the storage and the slack of that alignment.
constexpr uint32_t kSw128Align = 1024;
template <class S>
constexpr int sw128_smem_bytes() {
  return int(sizeof(S) + kSw128Align);
}
template <class S>
__device__ __forceinline__ SharedStorageRef<S> sw128_storage(unsigned char* smem_raw) {
  const uint32_t raw = smem_addr(smem_raw), base = (raw + kSw128Align - 1) & ~(kSw128Align - 1);
  return SharedStorageRef<S>{*reinterpret_cast<S*>(smem_raw + (base - raw)), base};
}

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

// Named barrier `id` over kThreads threads (ids 0 and 1 are __syncthreads and nonfinite.cuh's NamedSync).
template <int kThreads>
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
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
