// The CUDA kernels' declared arithmetic. Every long sum of cuda_tiled and cuda_wgmma runs on the
// tensor cores (mma.sync m16n8k16 / wgmma k16, fp32 accumulators): S = q k^T and dP = d_o v^T over d,
// o += P v over keys in one accumulator for the whole row (o *= exp2(m_old - m_new) at each key
// tile), d_k and d_v over the group's query rows, d_q over keys (one accumulator in the
// deterministic kernels; per key tile of the backward, merged by fp32 atomics or TMA reduce-adds in
// any order otherwise). The element-wise arithmetic is fp32 round to nearest: forward_common.cuh's l
// (per thread: pairs of weights, their sum per key tile, l = l * corr + sum; a quad's four threads
// summed by shuffles at the end), the prep pass's D (32 lanes, a butterfly), dS = P (dP - D).
// exp2 is ex2.approx.ftz.f32 and log2 CUDA's log2f.
#include "kernels/cuda/arithmetic.hpp"

#include "kernels/cuda/cuda_kernels.hpp"

namespace fc::cuda {
namespace {

// fwd_block_m, fwd_block_n: the forward tile (a CTA's rows walk the key tiles its last row sees);
// dq_partial: keys per d_q partial merged in any order (0: one
// accumulator per row).
Arithmetic tensor_core(const Problem& p, int64_t fwd_block_m, int64_t fwd_block_n, int64_t dq_partial) {
  Arithmetic a;
  a.soft = DType::F32, a.operand = p.dtype;
  a.s = a.dp = a.dkv = tensor_core_chain();
  a.pv = tensor_core_chain();
  a.pv.block = int32_t(fwd_block_n), a.pv.merge = Merge::Rescale, a.pv.merge_old = 1;
  a.l = serial_chain(DType::F32, true);
  a.l.lanes = 4, a.l.lane_width = 2, a.l.pre = 2, a.l.lane_tree = 4;  // thread t of a quad: keys 2t, 2t + 1 of 8
  a.l.block = int32_t(fwd_block_n), a.l.merge = Merge::Serial, a.l.merge_old = 2, a.l.merge_new = 1;
  a.d_o_o = serial_chain(DType::F32, true);
  a.d_o_o.lanes = 32, a.d_o_o.lane_tree = 32;  // lane c % 32, then a warp butterfly
  a.dq = tensor_core_chain();
  if (dq_partial > 0) a.dq.block = int32_t(dq_partial), a.dq.merge = Merge::AnyOrder;
  // ex2.approx.ftz.f32: 2 ulp (the PTX ISA's bound; kernels/cuda/tests/libm_gpu_test measures it);
  // log2f: 1 ulp (the CUDA programming guide's table). Whether ex2.approx(0) is exactly 1 is not
  // documented: every rescale is charged.
  a.exp_ulps = 2, a.log_ulps = 1, a.exp_exact_at_zero = false;
  a.base2 = true;
  a.flush_subnormals = true;
  a.block_m = int32_t(fwd_block_m);
  return a;
}

int block_n_or(int block_n, int fallback) { return block_n > 0 ? block_n : fallback; }

}  // namespace

Arithmetic tiled_arithmetic(const Problem& p, const Config& cfg) {
  const Tile fwd = forward_tile(cfg, p.d), bwd = backward_tile(cfg, p.d);
  return tensor_core(p, block_n_or(fwd.block_m, 64), block_n_or(fwd.block_n, 64),
                     cfg.deterministic ? 0 : block_n_or(bwd.block_n, 64));
}

Arithmetic wgmma_arithmetic(const Problem& p, const Config& cfg) {
  const Tile fwd = forward_tile(cfg, p.d);
  constexpr int kBackwardKeys = 128;  // wgmma_backward.cu: 64 keys per consumer warpgroup, two of them
  const Tile dflt = wgmma_forward_default(p.d);
  return tensor_core(p, block_n_or(fwd.block_m, dflt.block_m), block_n_or(fwd.block_n, dflt.block_n),
                     cfg.deterministic ? 0 : kBackwardKeys);
}

Arithmetic naive_arithmetic(const Problem& p, const Config&) {
  Arithmetic a = tensor_core(p, 1, 0, 0);  // (no backward: its gradient chains are never used)
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
