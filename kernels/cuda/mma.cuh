// Warp-level tensor-core building blocks shared by the tiled CUDA kernels: the storage types, the
// mma.sync m16n8k16 (fp16/bf16 in, fp32 accumulate), ldmatrix, cp.async and the shared-memory swizzle.
// Hand-written PTX wrappers: these instructions have no C++ API in the CUDA runtime headers.
//
// Fragment layouts (PTX ISA, m16n8k16, g = lane / 4, t = lane % 4):
//   A (16x16, row-major)  a0: (g, 2t..2t+1)  a1: (g+8, 2t..)  a2: (g, 2t+8..)  a3: (g+8, 2t+8..)
//   B (16x8, k x n)       b0: (k 2t..2t+1, n g)  b1: (k 2t+8.., n g)
//   C (16x8, fp32)        c0 c1: (g, 2t..2t+1)   c2 c3: (g+8, 2t..2t+1)
// Two adjacent C n-blocks (16 columns) are exactly one A k-step: that is how P and dS stay in
// registers between two GEMMs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

namespace fc::cuda {

// Opt-in dynamic shared memory of one CTA on sm_80 (an sm_90 CTA may have 227 KiB): the limit of the
// mma.sync kernels, which are built for both.
constexpr int kMaxSmemSm80 = 163 * 1024;

// Storage type traits: T is __half or __nv_bfloat16.
template <class T>
struct Storage;
template <>
struct Storage<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);  // round to nearest even, as the error model assumes
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t x) {
    return __half22float2(*reinterpret_cast<__half2*>(&x));
  }
  static __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
};
template <>
struct Storage<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t x) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&x));
  }
  static __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
};

// d += a * b on one m16n8k16 tile.
template <class T>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 b16 matrices; lane l supplies the row address of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16-byte global -> shared copy; valid = false zero-fills the destination (rows past n_q / n_k),
// so out-of-range rows contribute exact zeros and never garbage (0 * NaN would poison a row).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_size));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Swizzled tile of rows of kCols b16 elements (kCols a multiple of 32). With rows of >= 128 bytes the
// 16-byte chunk c of row r lives at chunk c ^ (r % 8); with 64-byte rows (two rows per 128-byte bank
// line) at c ^ ((r / 2) % 4). Either way the 8 rows an ldmatrix reads (or a cp.async wavefront
// writes) at one logical chunk hit 8 different bank groups.
template <int kCols>
__device__ __forceinline__ int swz(int row, int col) {
  static_assert(kCols % 32 == 0, "swizzle needs rows of at least 64 bytes");
  const int x = kCols >= 64 ? (row & 7) : ((row >> 1) & 3);
  return row * kCols + (((col >> 3) ^ x) << 3) + (col & 7);  // x < kCols / 8: stays in the row
}

// A lane's ldmatrix addresses into a swizzled (rows, kCols) tile, kCols >= 64, cheap enough that the
// compiler need not hoist one register per (row, chunk) pair (which made the kernels spill). The lane
// reads rows R + lane_row with R a multiple of 8, so x = row % 8 = lane_row % 8 is fixed per lane, and
// the logical chunk 8H + 2j + c (c = 0 or 1, the lane's half) lives at 8H + ((2j + c) ^ x): four
// per-lane offsets cover every chunk, and R and H fold into the instruction's immediate.
template <int kCols>
struct SwzLane {
  uint32_t row_base;  // shared address of the lane's row lane_row
  uint32_t off[4];    // byte offset of chunk 2j + c within a row, j = 0..3
  __device__ __forceinline__ SwzLane(const void* tile, int lane_row, int c) {
    static_assert(kCols >= 64, "SwzLane needs rows of at least 8 chunks");
    row_base = smem_addr(tile) + uint32_t(lane_row * kCols * 2);
#pragma unroll
    for (int j = 0; j < 4; ++j) off[j] = uint32_t(((2 * j + c) ^ (lane_row & 7)) << 4);
  }
  // Address of (R + lane_row, chunk + c) for a multiple-of-8 R and an even chunk.
  __device__ __forceinline__ uint32_t at(int r, int chunk) const {
    return row_base + uint32_t(r * kCols * 2 + (chunk / 8) * 128) + off[(chunk % 8) / 2];
  }
};

// Stage st of a ring of tiles in shared memory (a member of a kernel's storage struct).
template <class T, size_t kStages, size_t kN>
__device__ __forceinline__ T* ring_stage(T (&ring)[kStages][kN], int st) {
  return ring[0] + st * int(kN);
}

// Copy a (kRows, kCols) tile of a row-major tensor with row stride kCols into swizzled shared
// memory; rows >= n_rows are zero-filled. All kThreads threads take part.
template <int kRows, int kCols, int kThreads, class T>
__device__ __forceinline__ void load_tile(T* smem, const T* gmem, int n_rows) {
  constexpr int kChunksPerRow = kCols / 8;
  constexpr int kChunks = kRows * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "tile must split evenly over the threads");
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    int c = threadIdx.x + i * kThreads;
    int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    bool valid = row < n_rows;
    const T* src = gmem + (valid ? static_cast<int64_t>(row) * kCols + col : 0);
    cp_async_16(smem_addr(smem + swz<kCols>(row, col)), src, valid);
  }
}

// 2^x on the special-function unit (about 2 ulp; results below 2^-126 flush to 0, far below what P's
// rounding to fp16/bf16 keeps). exp2f would add range fix-ups around the same instruction.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// An element offset as 32-bit arithmetic leaves it: wrapped modulo 2^32, read as signed (the CUDA
// mutants' Fault::TiledOffset32 and Fault::TiledDqAccPad32).
__device__ __forceinline__ int64_t wrap32(int64_t x) { return int32_t(uint32_t(uint64_t(x))); }

// An element offset as a kernel computes it: in 64 bits, or (kWrap32) in 32-bit int arithmetic.
template <bool kWrap32>
__device__ __forceinline__ int64_t element_offset(int64_t x) {
  if constexpr (kWrap32) return wrap32(x);
  return x;
}

}  // namespace fc::cuda
