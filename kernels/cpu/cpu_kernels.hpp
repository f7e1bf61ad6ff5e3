// The CPU kernels on host tensors: what the registry rows call, plus the tiled emulation with an
// explicit Tiling (e.g. round_p = false) for tests, mutants and the CUDA side's predictions.
// Inputs must be in p.dtype; o (and d_q, d_k, d_v) come out in p.dtype. lse is written in the
// dtype of the tensor given: F32 under the contract; F64 is accepted so that fp64-storage runs keep
// their full precision end to end (the backward reads lse in whichever of the two it was given).
#pragma once

#include "kernels/cpu/tile.hpp"
#include "kernels/registry.hpp"

namespace fc::cpu {

void naive_forward(const Problem& p, const Config& cfg, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                   HostTensor& o, HostTensor& lse);
void naive_backward(const Problem& p, const Config& cfg, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                    const HostTensor& o, const HostTensor& lse, const HostTensor& d_o, HostTensor& d_q, HostTensor& d_k,
                    HostTensor& d_v);

void tiled_forward(const Problem& p, const Tiling& t, DType accum, const HostTensor& q, const HostTensor& k,
                   const HostTensor& v, HostTensor& o, HostTensor& lse);
void tiled_backward(const Problem& p, const Tiling& t, DType accum, const HostTensor& q, const HostTensor& k,
                    const HostTensor& v, const HostTensor& o, const HostTensor& lse, const HostTensor& d_o,
                    HostTensor& d_q, HostTensor& d_k, HostTensor& d_v);

// The registry's entry points for cpu_tiled (Config: block sizes, loop order, accumulation).
void tiled_forward(const Problem& p, const Config& cfg, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                   HostTensor& o, HostTensor& lse);
void tiled_backward(const Problem& p, const Config& cfg, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                    const HostTensor& o, const HostTensor& lse, const HostTensor& d_o, HostTensor& d_q, HostTensor& d_k,
                    HostTensor& d_v);

// What each kernel declares about its arithmetic for the error model (arithmetic.cpp).
Arithmetic tiled_arithmetic(const Problem& p, const Config& cfg);
Arithmetic naive_arithmetic(const Problem& p, const Config& cfg);

}  // namespace fc::cpu
