// C entry points over the CUDA kernels' launchers, on device pointers, for the benchmark script
// (bench_sdpa.py loads this as a shared library through ctypes, so our kernels and PyTorch SDPA run
// in the same process, on the same tensors, on the same stream). Returns 0 or a cudaError_t value.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda/launchers.hpp"

namespace {

fc::Problem problem(int b, int h_q, int h_kv, int n_q, int n_k, int d, int dtype, int mask, double scale) {
  return fc::Problem{.batch = b,
                     .heads_q = h_q,
                     .heads_kv = h_kv,
                     .n_q = n_q,
                     .n_k = n_k,
                     .d = d,
                     .dtype = static_cast<fc::DType>(dtype),
                     .mask = static_cast<fc::Mask>(mask),
                     .scale = scale};
}

// Device memory taken by cudaMalloc between two readings (the driver's view, 2 MiB granular).
size_t used_since(size_t free_before) {
  size_t free_now = 0, total = 0;
  cudaMemGetInfo(&free_now, &total);
  return free_before > free_now ? free_before - free_now : 0;
}

}  // namespace

extern "C" {

// kernel: 0 = cuda_tiled, 1 = cuda_naive, 2 = cuda_wgmma. dtype/mask: the contract's enum values.
int fcb_forward(int kernel, int b, int h_q, int h_kv, int n_q, int n_k, int d, int dtype, int mask, double scale,
                int block_m, int block_n, const void* q, const void* k, const void* v, void* o, float* lse,
                void* workspace, void* stream) {
  const fc::Problem p = problem(b, h_q, h_kv, n_q, n_k, d, dtype, mask, scale);
  const fc::cuda::ForwardArgs a{q, k, v, o, lse};
  auto s = static_cast<cudaStream_t>(stream);
  if (kernel == 0) return fc::cuda::tiled_forward(p, fc::cuda::Tile{block_m, block_n}, a, s);
  if (kernel == 2) return fc::cuda::wgmma_forward(p, fc::cuda::Tile{block_m, block_n}, a, s);
  return fc::cuda::naive_forward(p, a, workspace, s);
}

size_t fcb_workspace_bytes(int kernel, int backward, int b, int h_q, int h_kv, int n_q, int n_k, int d, int dtype) {
  const fc::Problem p = problem(b, h_q, h_kv, n_q, n_k, d, dtype, 0, 1.0);
  if (kernel == 1) return fc::cuda::naive_forward_workspace_bytes(p);
  return backward ? fc::cuda::tiled_backward_workspace_bytes(p) : 0;
}

int fcb_backward(int b, int h_q, int h_kv, int n_q, int n_k, int d, int dtype, int mask, double scale, int block_m,
                 int block_n, int deterministic, const void* q, const void* k, const void* v, const void* o,
                 const void* d_o, const float* lse, void* d_q, void* d_k, void* d_v, void* workspace, void* stream) {
  const fc::Problem p = problem(b, h_q, h_kv, n_q, n_k, d, dtype, mask, scale);
  const fc::cuda::BackwardArgs a{q, k, v, o, d_o, lse, d_q, d_k, d_v};
  return fc::cuda::tiled_backward(p, fc::cuda::Tile{block_m, block_n}, deterministic != 0, a, workspace,
                                  static_cast<cudaStream_t>(stream));
}

// The wgmma backward (sm_90a), same arguments as fcb_backward without a tile.
int fcb_backward_wgmma(int b, int h_q, int h_kv, int n_q, int n_k, int d, int dtype, int mask, double scale,
                       int deterministic, const void* q, const void* k, const void* v, const void* o, const void* d_o,
                       const float* lse, void* d_q, void* d_k, void* d_v, void* workspace, void* stream) {
  const fc::Problem p = problem(b, h_q, h_kv, n_q, n_k, d, dtype, mask, scale);
  const fc::cuda::BackwardArgs a{q, k, v, o, d_o, lse, d_q, d_k, d_v};
  return fc::cuda::wgmma_backward(p, deterministic != 0, a, workspace, static_cast<cudaStream_t>(stream));
}

// Memory receipt: allocate the workspace a run needs with cudaMalloc, run it, and report in *extra
// the device memory the driver saw taken (beyond the caller's q k v o lse / gradient tensors).
// Returns cudaErrorMemoryAllocation when the workspace does not fit.
int fcb_measure_extra(int kernel, int backward, int b, int h_q, int h_kv, int n_q, int n_k, int d, int dtype, int mask,
                      double scale, const void* q, const void* k, const void* v, void* o, float* lse, const void* d_o,
                      void* d_q, void* d_k, void* d_v, size_t* extra) {
  cudaDeviceSynchronize();
  size_t free_before = 0, total = 0;
  cudaMemGetInfo(&free_before, &total);
  const size_t bytes = fcb_workspace_bytes(kernel, backward, b, h_q, h_kv, n_q, n_k, d, dtype);
  void* ws = nullptr;
  if (bytes > 0) {
    cudaError_t e = cudaMalloc(&ws, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free allocation error
      *extra = bytes;
      return e;
    }
  }
  *extra = used_since(free_before);
  int rc = fcb_forward(kernel, b, h_q, h_kv, n_q, n_k, d, dtype, mask, scale, 0, 0, q, k, v, o, lse, ws, nullptr);
  if (rc == 0 && backward)
    rc = fcb_backward(b, h_q, h_kv, n_q, n_k, d, dtype, mask, scale, 0, 0, 0, q, k, v, o, d_o, lse, d_q, d_k, d_v, ws,
                      nullptr);
  if (rc == 0) rc = cudaDeviceSynchronize();
  if (ws) cudaFree(ws);
  return rc;
}

}  // extern "C"
