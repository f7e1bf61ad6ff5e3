// C entry points over the CUDA kernel table (kernels/cuda/launchers.hpp), on device pointers, for the
// benchmark script: bench_sdpa.py loads this as a shared library through ctypes, so our kernels and
// PyTorch SDPA run in the same process, on the same tensors, on the same stream. Kernels are addressed
// by registry name; their tiles come from their traits. Returns 0 or a cudaError_t value
// (cudaErrorInvalidValue for an unknown kernel, tile or problem).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "kernels/cuda/launchers.hpp"

namespace {

using fc::cuda::CudaKernel;

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

const CudaKernel* kernel_of(const char* name) { return name ? fc::cuda::find_cuda_kernel(name) : nullptr; }

// Device memory taken by cudaMalloc between two readings (the driver's view, 2 MiB granular).
size_t used_since(size_t free_before) {
  size_t free_now = 0, total = 0;
  cudaMemGetInfo(&free_now, &total);
  return free_before > free_now ? free_before - free_now : 0;
}

}  // namespace

extern "C" {

// The registry names of the CUDA kernels: name i, or NULL past the last.
const char* fcb_kernel_name(int i) {
  const auto& table = fc::cuda::cuda_kernel_table();
  return i >= 0 && i < int(table.size()) ? table[size_t(i)].name.c_str() : nullptr;
}

// The forward (backward = 0) or backward tiles of a kernel for head dim d, the default first, as
// (block_m, block_n) pairs into out[2 * max_tiles]. Returns how many there are (0: none; -1: unknown
// kernel); at most max_tiles are written.
int fcb_tiles(const char* kernel, int backward, int d, int* out, int max_tiles) {
  const CudaKernel* k = kernel_of(kernel);
  if (!k) return -1;
  if (backward && !k->backward_tiles) return 0;
  const std::vector<fc::cuda::Tile> tiles = backward ? k->backward_tiles(d) : k->forward_tiles(d);
  for (int i = 0; i < int(tiles.size()) && i < max_tiles; ++i) {
    out[2 * i] = tiles[size_t(i)].block_m;
    out[2 * i + 1] = tiles[size_t(i)].block_n;
  }
  return int(tiles.size());
}

// Workspace a forward (backward = 0) or backward run needs, in bytes.
size_t fcb_workspace_bytes(const char* kernel, int backward, int b, int h_q, int h_kv, int n_q, int n_k, int d,
                           int dtype) {
  const CudaKernel* k = kernel_of(kernel);
  if (!k) return 0;
  const fc::Problem p = problem(b, h_q, h_kv, n_q, n_k, d, dtype, 0, 1.0);
  if (backward) return k->backward_workspace_bytes ? k->backward_workspace_bytes(p) : 0;
  return k->forward_workspace_bytes(p);
}

// dtype / mask: the contract's enum values; block_m = block_n = 0: the kernel's default tile for d.
int fcb_forward(const char* kernel, int b, int h_q, int h_kv, int n_q, int n_k, int d, int dtype, int mask,
                double scale, int block_m, int block_n, const void* q, const void* k, const void* v, void* o,
                float* lse, void* workspace, void* stream) {
  const CudaKernel* kern = kernel_of(kernel);
  if (!kern) return cudaErrorInvalidValue;
  const fc::Problem p = problem(b, h_q, h_kv, n_q, n_k, d, dtype, mask, scale);
  return kern->forward(p, fc::cuda::Tile{block_m, block_n}, fc::cuda::ForwardArgs{q, k, v, o, lse}, workspace,
                       static_cast<cudaStream_t>(stream));
}

int fcb_backward(const char* kernel, int b, int h_q, int h_kv, int n_q, int n_k, int d, int dtype, int mask,
                 double scale, int block_m, int block_n, int deterministic, const void* q, const void* k, const void* v,
                 const void* o, const void* d_o, const float* lse, void* d_q, void* d_k, void* d_v, void* workspace,
                 void* stream) {
  const CudaKernel* kern = kernel_of(kernel);
  if (!kern || !kern->backward) return cudaErrorInvalidValue;
  const fc::Problem p = problem(b, h_q, h_kv, n_q, n_k, d, dtype, mask, scale);
  const fc::cuda::BackwardArgs a{q, k, v, o, d_o, lse, d_q, d_k, d_v};
  return kern->backward(p, fc::cuda::Tile{block_m, block_n}, deterministic != 0, a, workspace,
                        static_cast<cudaStream_t>(stream));
}

// Memory receipt: allocate the workspace a run needs (forward, or forward then backward) with
// cudaMalloc, run it on the default tiles, and report in *extra the device memory the driver saw
// taken beyond the caller's q k v o lse / gradient tensors. Returns cudaErrorMemoryAllocation when the
// workspace does not fit.
int fcb_measure_extra(const char* kernel, int backward, int b, int h_q, int h_kv, int n_q, int n_k, int d, int dtype,
                      int mask, double scale, const void* q, const void* k, const void* v, void* o, float* lse,
                      const void* d_o, void* d_q, void* d_k, void* d_v, size_t* extra) {
  cudaDeviceSynchronize();
  size_t free_before = 0, total = 0;
  cudaMemGetInfo(&free_before, &total);
  const size_t fwd = fcb_workspace_bytes(kernel, 0, b, h_q, h_kv, n_q, n_k, d, dtype);
  const size_t bwd = backward ? fcb_workspace_bytes(kernel, 1, b, h_q, h_kv, n_q, n_k, d, dtype) : 0;
  const size_t bytes = fwd > bwd ? fwd : bwd;
  void* ws = nullptr;
  if (bytes > 0) {
    cudaError_t e = cudaMalloc(&ws, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the allocation error
      *extra = bytes;
      return e;
    }
  }
  *extra = used_since(free_before);
  int rc = fcb_forward(kernel, b, h_q, h_kv, n_q, n_k, d, dtype, mask, scale, 0, 0, q, k, v, o, lse, ws, nullptr);
  if (rc == 0 && backward)
    rc = fcb_backward(kernel, b, h_q, h_kv, n_q, n_k, d, dtype, mask, scale, 0, 0, 0, q, k, v, o, d_o, lse, d_q, d_k,
                      d_v, ws, nullptr);
  if (rc == 0) rc = cudaDeviceSynchronize();
  if (ws) cudaFree(ws);
  return rc;
}

}  // extern "C"
