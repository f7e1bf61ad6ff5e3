// The device side of tc_probe.hpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <utility>

#include "kernels/cuda/mma.cuh"
#include "properties/tests/tc_probe.hpp"

namespace fc::probe {
namespace {

void check(cudaError_t e) {
  if (e != cudaSuccess) throw std::runtime_error(cudaGetErrorString(e));
}

// err in units of 2^-23 of |ref| after `floor`; non-negative floats order like their bits.
__device__ void record(double err, double ref, double floor, float x, unsigned int* worst, float* at) {
  err = err > floor ? err - floor : 0.0;
  if (err == 0) return;
  const float u = ref != 0 ? float(err / (0x1p-23 * fabs(ref))) : __int_as_float(0x7f800000);
  const unsigned int bits = __float_as_uint(u);
  if (atomicMax(worst, bits) < bits) *at = x;  // racy on ties: the argument is for the message only
}

__global__ void ex2_kernel(uint32_t lo, uint32_t n, unsigned int* worst, float* at) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    const float x = __uint_as_float(uint32_t(lo + i));
    const double ref = exp2(double(x));
    record(fabs(double(fc::cuda::exp2_approx(x)) - ref), ref, ref < 0x1p-126 ? 0x1p-126 : 0.0, x, worst, at);
  }
}

__global__ void log2_kernel(uint32_t lo, uint32_t n, unsigned int* worst, float* at) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    const float x = __uint_as_float(uint32_t(lo + i));
    const double ref = log2(double(x));
    record(fabs(double(log2f(x)) - ref), ref, 0.0, x, worst, at);
  }
}

__global__ void ex2_one(float x, float* y) { *y = fc::cuda::exp2_approx(x); }

// One m16n8k16 per warp: the PTX ISA's fragment layout (g = lane / 4, t = lane % 4): A rows g, g + 8,
// columns 2t, 2t + 1 (+ 8); B rows 2t, 2t + 1 (+ 8), column g; C / D rows g, g + 8, columns 2t, 2t + 1.
template <class T>
__global__ void mma_kernel(const float* a, const float* b, const float* c, float* d, int count) {
  const int inst = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4,
            t = lane % 4;
  if (inst >= count) return;
  const float* A = a + inst * 256;  // (16, 16)
  const float* B = b + inst * 128;  // (16, 8)
  const float* C = c + inst * 128;  // (16, 8)
  float* D = d + inst * 128;        // (16, 8)
  using S = fc::cuda::Storage<T>;
  const uint32_t ra[4] = {S::pack(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]),
                          S::pack(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]),
                          S::pack(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]),
                          S::pack(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9])};
  const uint32_t b0 = S::pack(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]);
  const uint32_t b1 = S::pack(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
  float acc[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
  fc::cuda::mma<T>(acc, ra, b0, b1);
  D[g * 8 + 2 * t] = acc[0], D[g * 8 + 2 * t + 1] = acc[1];
  D[(g + 8) * 8 + 2 * t] = acc[2], D[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

template <class K>
Ulps sweep(K kernel, float lo, float hi) {
  uint32_t a, z;
  std::memcpy(&a, &lo, 4), std::memcpy(&z, &hi, 4);
  if (a > z) std::swap(a, z);
  unsigned int* worst;
  float* at;
  check(cudaMalloc(&worst, sizeof(unsigned int)));
  check(cudaMalloc(&at, sizeof(float)));
  check(cudaMemset(worst, 0, sizeof(unsigned int)));
  check(cudaMemset(at, 0, sizeof(float)));
  kernel<<<4096, 256>>>(a, z - a + 1, worst, at);
  check(cudaDeviceSynchronize());
  unsigned int w = 0;
  Ulps u;
  check(cudaMemcpy(&w, worst, sizeof w, cudaMemcpyDeviceToHost));
  check(cudaMemcpy(&u.at, at, sizeof u.at, cudaMemcpyDeviceToHost));
  float wf;
  std::memcpy(&wf, &w, sizeof wf);
  u.worst = wf;
  cudaFree(worst), cudaFree(at);
  return u;
}

}  // namespace

Ulps ex2_ulps(float lo, float hi) { return sweep(ex2_kernel, lo, hi); }
Ulps log2_ulps(float lo, float hi) { return sweep(log2_kernel, lo, hi); }

float ex2_at(float x) {
  float* y;
  check(cudaMalloc(&y, sizeof(float)));
  ex2_one<<<1, 1>>>(x, y);
  float h = 0;
  check(cudaMemcpy(&h, y, sizeof h, cudaMemcpyDeviceToHost));
  cudaFree(y);
  return h;
}

void mma_batch(bool bf16, const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c,
               std::vector<float>& d, int count) {
  float *da, *db, *dc, *dd;
  check(cudaMalloc(&da, a.size() * 4)), check(cudaMalloc(&db, b.size() * 4));
  check(cudaMalloc(&dc, c.size() * 4)), check(cudaMalloc(&dd, c.size() * 4));
  check(cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
  check(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
  check(cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice));
  const int blocks = (count + 7) / 8;
  if (bf16)
    mma_kernel<__nv_bfloat16><<<blocks, 256>>>(da, db, dc, dd, count);
  else
    mma_kernel<__half><<<blocks, 256>>>(da, db, dc, dd, count);
  check(cudaDeviceSynchronize());
  d.resize(c.size());
  check(cudaMemcpy(d.data(), dd, c.size() * 4, cudaMemcpyDeviceToHost));
  cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dd);
}

}  // namespace fc::probe
