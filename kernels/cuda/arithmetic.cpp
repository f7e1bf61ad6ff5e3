// The CUDA kernels' declared arithmetic. Every long sum of cuda_tiled and cuda_wgmma runs on the
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
// The shared structure is kernels/arithmetic.h's tensor_core_arithmetic. Each traits struct defines its
// own `arithmetic` here; kernel_table.cpp does not build a row without one.
#include "kernels/arithmetic.h"
#include "kernels/cuda/naive_traits.hpp"
#include "kernels/cuda/tiled_traits.hpp"
#include "kernels/cuda/wgmma_traits.hpp"

namespace fc::cuda {
namespace {

int or_default(int x, int fallback) { return x > 0 ? x : fallback; }

// cuda_tiled and cuda_wgmma: the forward tile a Config runs, and the backward's keys per CTA (the
// d_q partial merged by atomics or a TMA reduce-add; one chain when deterministic).
Arithmetic flash_arithmetic(const Problem& p, Tile fwd, Tile bwd, bool deterministic) {
  return tensor_core_arithmetic(p.dtype, or_default(fwd.block_m, 64), or_default(fwd.block_n, 64),
                                deterministic ? 0 : or_default(bwd.block_n, 64));
}

}  // namespace

Arithmetic TiledTraits::arithmetic(const Problem& p, Tile forward, Tile backward, bool deterministic) {
  return flash_arithmetic(p, forward, backward, deterministic);
}

Arithmetic WgmmaTraits::arithmetic(const Problem& p, Tile forward, Tile backward, bool deterministic) {
  return flash_arithmetic(p, forward, backward, deterministic);
}

Arithmetic NaiveTraits::arithmetic(const Problem& p, Tile, Tile, bool) {
  Arithmetic a = tensor_core_arithmetic(p.dtype, 1, 0, 0);  // (no backward: its gradient chains are never used)
  // naive.cu: fmaf loops, one accumulator per output element; the softmax's sum strided over 256
  // threads, a warp butterfly each, then the 8 warps' sums in order; P = expf(s - m) / l rounded to
  // storage before P V; expf 2 ulp, logf 1 ulp (the CUDA programming guide's table).
  a.s = a.pv = serial_chain(DType::F32, true);
  a.pv.block = 0;
  a.l = serial_chain(DType::F32, true);
  a.l.lanes = 256, a.l.lane_tree = 32;
  a.base2 = false;
  a.stores_s = a.p_normalised = true;
  return a;
}

}  // namespace fc::cuda
