// The CPU kernels on host tensors: what the registry rows call, plus the tiled emulation with an
// explicit Tiling (e.g. P kept in fp32) for tests, mutants and the CUDA side's predictions.
// Inputs must be in p.dtype, any variant, any strides; o (and d_q, d_k, d_v) come out in p.dtype,
// shaped by shape_o (shape_q, shape_kv, shape_v), written through their strides when they have
// them. lse is written in the dtype of the tensor given: F32 under the contract; F64 is accepted so
// that fp64-storage runs keep their full precision end to end (the backward reads lse in whichever
// of the two it was given).
#pragma once

#include "kernels/cpu/tile.hpp"
#include "kernels/registry.hpp"

namespace fc::cpu {

void naive_forward(const Inputs& in, const Config& cfg, Outputs& out);
// Reads out.o and out.lse; writes out.d_q, out.d_k, out.d_v.
void naive_backward(const Inputs& in, const Config& cfg, Outputs& out);

void tiled_forward(const Inputs& in, const Tiling& t, DType accum, Outputs& out);
void tiled_backward(const Inputs& in, const Tiling& t, DType accum, Outputs& out);

// The registry's entry points for cpu_tiled (Config: block sizes, loop order, accumulation).
void tiled_forward(const Inputs& in, const Config& cfg, Outputs& out);
void tiled_backward(const Inputs& in, const Config& cfg, Outputs& out);
// mutant_split_drop_tail's forward: cpu_tiled's, but with splits >= 2 the sequence's final key tile is
// skipped when it is partial (tiled_forward.hpp, kDropSplitTail).
void tiled_forward_split_drop_tail(const Inputs& in, const Config& cfg, Outputs& out);

// What each kernel declares about its arithmetic for the error model (arithmetic.cpp).
Arithmetic tiled_arithmetic(const Problem& p, const Config& cfg);
// The registry row of a CPU merge kernel (kind Merge, F16 BF16 F32), for cpu_merge and its mutants.
KernelInfo merge_info(const char* name, const char* description);
Arithmetic naive_arithmetic(const Problem& p, const Config& cfg);

}  // namespace fc::cpu
