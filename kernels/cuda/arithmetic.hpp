// What the CUDA kernels declare about their arithmetic (kernels/arithmetic.h), read off their .cu
// sources: the registry rows (cuda_kernels.cpp) hand these to the error model. Host only.
#pragma once

#include <functional>
#include <string>

#include "kernels/cuda/launchers.hpp"
#include "kernels/registry.hpp"

namespace fc::cuda {

// The declaration of a table kernel, by its registry name (cuda_tiled, cuda_wgmma, cuda_naive), its
// tiles read from the table; empty for any other kernel, which the error model then charges as
// undeclared_arithmetic (any order, directed rounding).
std::function<Arithmetic(const Problem&, const Config&)> declared_arithmetic(const CudaKernel& ck);
// The arithmetic of the kernel named `kind` on ck's tiles (a CUDA mutant: its base's arithmetic, the
// tiles it is built with).
std::function<Arithmetic(const Problem&, const Config&)> declared_arithmetic(const CudaKernel& ck,
                                                                             const std::string& kind);

}  // namespace fc::cuda
