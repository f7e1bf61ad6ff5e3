// How a registry Config maps onto the CUDA kernels' tiles. Host only.
#pragma once

#include "kernels/cuda/launchers.hpp"
#include "kernels/registry.hpp"

namespace fc::cuda {

// The configs cuda_tiled offers (block-size invariance ranges over them); the first is the default.
std::vector<Config> tiled_configs();

// Forward tile for cfg (block_m = block_n = 0: the default). Backward uses the same (kBlockM,
// kBlockN) when it is one of its own tiles for d, else its default for d.
Tile forward_tile(const Config& cfg, int d);
Tile backward_tile(const Config& cfg, int d);

}  // namespace fc::cuda
