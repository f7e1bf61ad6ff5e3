// The tensor-core kernels' declared arithmetic (cuda_tiled and cuda_wgmma; each traits struct's
// `arithmetic` returns it on its tiles; contract/arithmetic.h). Every long sum of cuda_tiled and cuda_wgmma runs on the
// tensor cores (mma.sync m16n8k16 / wgmma k16, fp32 accumulators): S = q k^T and dP = d_o v^T over d,
// o += P v over keys in one accumulator for the whole row (o *= exp2(m_old - m_new) at each key
// tile), d_k and d_v over the group's query rows, d_q over keys (one accumulator in the
// deterministic kernels; per key tile of the backward, merged by fp32 atomics or TMA reduce-adds in
// any order otherwise). The element-wise arithmetic is fp32 round to nearest: forward_common.cuh's l
// (per thread: pairs of weights, their sum per key tile, l = l * corr + sum; a quad's four threads
// summed by shuffles at the end), the prep pass's D (32 lanes, a butterfly), dS = P (dP - D).
// exp2 is ex2.approx.ftz.f32, declared 2 ulp (the bound CUDA's programming guide gives exp2f), and
// log2 CUDA's log2f, 1 ulp (likewise); whether ex2.approx(0) is exactly 1 is not documented, so
// every rescale is charged. properties/tests/tc_probe_gpu_test measures all three on the device.
// The shared structure is contract/arithmetic.h's tensor_core_arithmetic. Host only (the traits
// headers that include it are also compiled by nvcc, which emits nothing for it).
#pragma once

#include "contract/arithmetic.h"
#include "kernels/cuda/launchers.hpp"

namespace fc::cuda {

// The forward tile a Config runs (rows, keys per step) and the backward's keys per CTA (the d_q
// partial merged by atomics or a TMA reduce-add; one chain when deterministic); a tile of 0: 64.
inline Arithmetic flash_tensor_core_arithmetic(const Problem& p, Tile fwd, Tile bwd, bool deterministic) {
  auto or_64 = [](int x) { return x > 0 ? x : 64; };
  return tensor_core_arithmetic(p.dtype, or_64(fwd.block_m), or_64(fwd.block_n),
                                deterministic ? 0 : or_64(bwd.block_n));
}

}  // namespace fc::cuda
