// The registry rows of the CUDA kernels, made from the kernel table (launchers.hpp): how a registry
// Config maps onto a kernel's tiles. Host only.
#pragma once

#include <functional>

#include "kernels/cuda/launchers.hpp"
#include "kernels/registry.hpp"

namespace fc::cuda {

// The forward tile a Config runs for head dim d: its block_m x block_n, or (both 0) the kernel's
// config_default(d).
Tile forward_tile(const CudaKernel& k, const Config& cfg, int d);
// The backward tile that runs with it for head dim d (CudaKernel::backward_tile).
Tile backward_tile(const CudaKernel& k, const Config& cfg, int d);

// What k declares to the error model (KernelInfo::arithmetic): its traits' arithmetic on the tiles a
// Config runs. k must outlive the function.
std::function<Arithmetic(const Problem&, const Config&)> declared_arithmetic(const CudaKernel& k);

// The registry row of a kernel-table entry (its host-tensor glue around the entry's launchers). ck
// must outlive the row.
Kernel registry_row(const CudaKernel& ck);

// Appends the CUDA mutants' rows (cuda_mutants.cpp) to `out`, which holds their base kernels' rows.
void register_cuda_mutants(std::vector<Kernel>& out);

}  // namespace fc::cuda
