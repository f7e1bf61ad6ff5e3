// The tiled CPU emulation of FlashAttention, templated on storage type T and accumulation type A:
// tiled_forward<T, A>(problem, tiling, q, k, v, o, lse) and tiled_backward<T, A>(...). Reusable by
// mutants (change Tiling::p_operand, wrap a piece) and by the CUDA side to predict a config's answer.
#pragma once

#include "kernels/cpu/tile.hpp"
#include "kernels/cpu/tiled_backward.hpp"
#include "kernels/cpu/tiled_forward.hpp"
