// Dot products of shared-memory rows on the float64 tensor cores (mma.m8n8k4.f64, sm_80 on), for the
// GPU oracle (certified_gpu.cu) and the GPU error model (bounds_gpu.cu). Device code only.
//
// What they give, and why that is enough: each sum is taken in the tensor cores' own order, each step
// a float64 multiply-add rounded once (a product of two doubles is exact inside it). So:
//   - a sum whose every partial sum, in any order, is a double (dot_float's test in certified_gpu.cu:
//     integer multiples of 2^q below 2^(53+q)) is the same bits as the CUDA cores' loop;
//   - any sum of n products lies within γ(n) Σ|x y| of the exact one, the order-free bound the CPU's
//     GEMMs are held to too (bounds.cpp's S, A, Es).
//
// mma.m8n8k4.f64 (D = A B + C, A 8 x 4 row-major, B 4 x 8 column-major): lane L holds A[L/4][L%4] and
// B[L%4][L/4], one double each, and D[L/4][2(L%4) + i], i = 0, 1.
#pragma once

#include <cuda_runtime.h>

namespace fc::ref::gpu {

// Whether the device code being compiled has the float64 tensor cores (host code: the host decides at
// run time, from the device's compute capability).
constexpr bool kHaveDmma =
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    false;
#else
    true;
#endif

__device__ inline void dmma(double& d0, double& d1, double a, double b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
               : "+d"(d0), "+d"(d1)
               : "d"(a), "d"(b));
#else
  (void)d0, (void)d1, (void)a, (void)b;
#endif
}

// One warp, one 8 x 8 block: for rows r < nx of X and c < ny of Y (rows x_pitch and y_pitch apart;
// rows past nx, ny read as zeros), over n terms, at out + r·out_r + c·out_c:
//   Sums = 2: X_r·Y_c, |X_r|·|Y_c|;
//   Sums = 3: and (|X_r| κ)·|Y_c|, each |x_l| κ_l rounded first, as the CUDA cores' loop (bounds_gpu.cu's
//   dot) and the CPU's Es take it.
template <int Sums>
__device__ inline void block_dots(const double* x, int x_pitch, int nx, const double* y, int y_pitch, int ny, int n,
                                  const double* kappa, double* out, int out_r, int out_c) {
  static_assert(Sums == 2 || Sums == 3, "block_dots: x·y and |x|·|y|, and the weighted sum or not");
  const int lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const double* xr = x + g * x_pitch;
  const double* yr = y + g * y_pitch;
  double p0 = 0, p1 = 0, a0 = 0, a1 = 0, w0 = 0, w1 = 0;
  for (int l = t; l - t < n; l += 4) {  // every lane the same trips: l - t = 0, 4, 8, ...
    const bool in = l < n;
    const double xv = g < nx && in ? xr[l] : 0.0, yv = g < ny && in ? yr[l] : 0.0;
    dmma(p0, p1, xv, yv);
    dmma(a0, a1, fabs(xv), fabs(yv));
    if constexpr (Sums == 3) dmma(w0, w1, in ? fabs(xv) * kappa[l] : 0.0, fabs(yv));
  }
  const int c = 2 * t;
  double* o0 = out + g * out_r + c * out_c;
  double* o1 = o0 + out_c;
  if (g < nx && c < ny) {
    o0[0] = p0, o0[1] = a0;
    if constexpr (Sums == 3) o0[2] = w0;
  }
  if (g < nx && c + 1 < ny) {
    o1[0] = p1, o1[1] = a1;
    if constexpr (Sums == 3) o1[2] = w1;
  }
}

// Every 8 x 8 block of the (rows, cols) pairs of X and Y, pair (r, c)'s Sums at out + r·out_r + c·out_c,
// block k to warp (first + k) mod warps, so that a second call goes on where the first left off. Every
// thread of the thread block calls it: each mma runs on whole warps.
template <int Sums>
__device__ inline void tile_dots(const double* x, int x_pitch, int rows, const double* y, int y_pitch, int cols, int n,
                                 const double* kappa, double* out, int out_r, int out_c, int first = 0) {
  const int warps = int(blockDim.x) / 32, warp = (int(threadIdx.x) / 32 + warps - first % warps) % warps;
  const int bc = (cols + 7) / 8;
  for (int blk = warp; blk < (rows + 7) / 8 * bc; blk += warps) {
    const int r0 = blk / bc * 8, c0 = blk % bc * 8;
    block_dots<Sums>(x + r0 * x_pitch, x_pitch, min(8, rows - r0), y + c0 * y_pitch, y_pitch, min(8, cols - c0), n,
                     kappa, out + r0 * out_r + c0 * out_c, out_r, out_c);
  }
}
// The number of 8 x 8 blocks tile_dots gives out (the next call's `first`).
__host__ __device__ constexpr int dot_blocks(int rows, int cols) { return (rows + 7) / 8 * ((cols + 7) / 8); }

}  // namespace fc::ref::gpu
