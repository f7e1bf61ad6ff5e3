// The CUDA kernels on device pointers: their arguments, their tiles, and the table through which the
// registry rows (cuda_kernels.cpp), the GPU tests and the benchmark (bench/bench_api.cpp) reach a
// kernel by its registry name. Each kernel's traits header (tiled_traits.hpp, wgmma_traits.hpp,
// naive_traits.hpp) lists its dtypes, head dims and tiles and declares its launchers; kernel_table.cpp
// makes one CudaKernel of each. Layouts and dtypes are the contract's (contract/attention.h). Host only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

#include "contract/attention.h"
#include "contract/exactness.hpp"

namespace fc {
struct Arithmetic;  // contract/arithmetic.h
}  // namespace fc

namespace fc::cuda {

// Forward arguments: q (b, h_q, n_q, d), k and v (b, h_kv, n_k, d), o like q, lse (b, h_q, n_q) f32.
struct ForwardArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
};

// Backward arguments: o and lse from the forward; d_q like q, d_k and d_v like k.
struct BackwardArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* d_o = nullptr;
  const float* lse = nullptr;
  void* d_q = nullptr;
  void* d_k = nullptr;
  void* d_v = nullptr;
};

// A (kBlockM, kBlockN) tile: a forward's (query rows, keys) per step; a backward's (queries per step,
// keys per CTA). {0, 0} asks a launcher for its default for the head dim.
struct Tile {
  int block_m = 0;
  int block_n = 0;
};
constexpr bool operator==(Tile a, Tile b) { return a.block_m == b.block_m && a.block_n == b.block_n; }

// A tile a kernel is built with, for head dim d only (d = 0: for every head dim it supports).
struct BuiltTile {
  int block_m = 0;
  int block_n = 0;
  int d = 0;
};

// A head dim's tile (the per-head-dim defaults).
struct DimTile {
  int d = 0;  // 0: every head dim
  Tile tile;
};

// A registry config: its forward tile, and the backward tile that runs with it for head dim d (d = 0:
// every head dim; backward {0, 0}: the backward's default). A config's rows sit together in a list.
struct ConfigTile {
  Tile forward;
  int d = 0;
  Tile backward;
};

// The tile listed for head dim d (an entry with d = 0 matches every head dim); {0, 0} if none.
template <size_t N>
constexpr Tile tile_for(const DimTile (&list)[N], int d) {
  for (const DimTile& x : list)
    if (x.d == d || x.d == 0) return x.tile;
  return Tile{};
}

using ForwardLauncher = cudaError_t (*)(const Problem&, Tile, const ForwardArgs&, void* workspace, cudaStream_t);
using BackwardLauncher = cudaError_t (*)(const Problem&, Tile, bool deterministic, const BackwardArgs&, void* workspace,
                                         cudaStream_t);
// A kernel's arithmetic (contract/arithmetic.h) for p on a forward tile and a backward tile (each as
// its config runs it), deterministic or not: every sum's rounding chain, for the error model. Every
// traits struct defines one (arithmetic.hpp has the tensor-core kernels'); kernel_table.cpp does not
// build a row without it.
using ArithmeticOf = Arithmetic (*)(const Problem& p, Tile forward, Tile backward, bool deterministic);

// One CUDA kernel as the registry and the benchmark see it, made from its traits (kernel_table.cpp).
struct CudaKernel {
  std::string name;  // the registry name
  std::string description;
  std::vector<DType> dtypes;
  std::vector<int> head_dims;  // empty: any
  bool hopper_only = false;    // claims problems only on a device of compute capability 9.x
  bool stores_s_p = false;     // S and P go through HBM in the storage type (KernelInfo::stores_s_p)
  bool large_offsets = false;  // 64-bit element offsets: tensors past 2^31 elements (KernelInfo::large_offsets)
  std::vector<Tile> configs;   // the registry's configs (forward tiles); the first leads the list
  Exactness exact;             // what the metamorphic laws may ask for bit for bit (KernelInfo::exact)
  // What it declares to the error model (KernelInfo::arithmetic, through declared_arithmetic).
  ArithmeticOf arithmetic = nullptr;

  // Whether p (dtype, head dim, the kernel's own limits, the device) can run on forward tile t.
  bool (*supports)(const Problem& p, Tile t) = nullptr;
  // The forward tile a Config without a tile (block_m = block_n = 0) runs for head dim d.
  Tile (*config_default)(int d) = nullptr;
  // The tiles built for head dim d, the launcher's default first: what the benchmark sweeps.
  std::vector<Tile> (*forward_tiles)(int d) = nullptr;
  std::vector<Tile> (*backward_tiles)(int d) = nullptr;  // null: forward only
  // The backward tile that runs with a config's forward tile (registry configs and block-size
  // invariance): the pairing the traits list, else the backward's default for d.
  Tile (*backward_tile)(Tile forward, int d) = nullptr;

  ForwardLauncher forward = nullptr;
  size_t (*forward_workspace_bytes)(const Problem&) = nullptr;
  BackwardLauncher backward = nullptr;  // null: forward only
  size_t (*backward_workspace_bytes)(const Problem&) = nullptr;
};

// Every CUDA kernel, in registry order; the one named `name`, or nullptr.
const std::vector<CudaKernel>& cuda_kernel_table();
const CudaKernel* find_cuda_kernel(const std::string& name);

// Whether the current device has compute capability 9.x (wgmma_forward.cu).
bool device_is_sm90();

}  // namespace fc::cuda
