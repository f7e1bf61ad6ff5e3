// What the CUDA kernels declare about their arithmetic (kernels/arithmetic.h), read off their .cu
// sources: the registry rows (cuda_kernels.cpp) hand these to the error model. Host only.
#pragma once

#include "kernels/registry.hpp"

namespace fc::cuda {

Arithmetic tiled_arithmetic(const Problem& p, const Config& cfg);  // cuda_tiled
Arithmetic wgmma_arithmetic(const Problem& p, const Config& cfg);  // cuda_wgmma
Arithmetic naive_arithmetic(const Problem& p, const Config& cfg);  // cuda_naive

}  // namespace fc::cuda
