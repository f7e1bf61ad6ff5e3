// How a registry Config maps onto the CUDA kernels' tiles. Host only.
#pragma once

#include "kernels/cuda/launchers.hpp"
#include "kernels/registry.hpp"

namespace fc::cuda {

// The configs cuda_tiled offers (block-size invariance ranges over them); the first is the default.
std::vector<Config> tiled_configs();
// The configs cuda_wgmma offers (its forward tiles); its backward has one tile.
std::vector<Config> wgmma_configs();

// Forward tile for cfg (block_m = block_n = 0: {0, 0}, the launcher's default for d). Config i of tiled_configs()
// runs the backward on its i-th tile for d (tiled_backward_tiles); other configs on its default.
Tile forward_tile(const Config& cfg, int d);
Tile backward_tile(const Config& cfg, int d);

}  // namespace fc::cuda
