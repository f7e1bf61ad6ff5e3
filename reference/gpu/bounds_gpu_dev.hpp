// The error model on the GPU, between its host side (bounds_gpu.cpp: the constants of
// reference/bounds_model.hpp's Consts, the uploads, each element's last rounding) and its kernels
// (bounds_gpu.cu). Plain data only: nvcc compiles this header without Eigen or the model's host types.
#pragma once

#include <cstdint>

#include "contract/attention.h"
#include "reference/bounds_chain_closed.hpp"
#include "reference/rounded_bound.hpp"

namespace fc::ref::gpu {

// A chain over d or d_v (scores, dP, D): its per-term weights on the device and its finished factors.
struct DotChain {
  const double* kappa = nullptr;  // (d or d_v), device
  double kappa_max = 0, scale = 1, floors = 0;
};

// One problem under one declared arithmetic: Consts' scalars (bounds_model.hpp, same names), the
// arithmetic's flags, the key-side chains in closed form, and device pointers.
struct ModelDev {
  Problem p;
  int64_t dv = 0, group = 1, n_q16 = 0;
  double us, floor_s, u_in, floor_in, u_p, floor_p, floor_ds, u_store_s, floor_store_s;
  double delta_c, delta_out, delta_l2e, delta_ln2, e_exp, log_rel;
  bool common_scale, ftz;
  DotChain w_s, w_dp, w_D;
  ClosedChain l, pv, dq, dkv;
  ClosedShape dkv_shape;  // dkv at its one length, group x n_q16 (closed_shape)
  Chain l_chain;          // its adder and truncation (LSum's lower side)
  bool dkv_plain;
  bool mma;  // the dot products of the scores and dP on the float64 tensor cores (tensor_dots.cuh)
  double l_acc_u;  // unit_roundoff(ar.l.acc)
  // The arithmetic's flags (contract/arithmetic.h).
  bool fa1, l_sums_stored_p, p_normalised, exp_exact_at_zero, base2, ds_from_stored_p;
  int32_t o_normalise, block_m;
  // Device data (dense layout): inputs; the certified o, lse and their errors.
  const double *q, *k, *v, *d_o, *o, *err_o, *lse, *err_lse;
  const double *k_abs_sum, *v_abs_sum;  // (rows_kv) sum_c |k_jc|, |v_jc|
  const int64_t *kv_i0, *kv_i1;         // (n_k) the rows of each head that see key j
  // Forward outputs: o's and lse's error before their last rounding (finish_o rounds them in place),
  // and whether each row sees a key. The backward reads the finished bounds of o and lse back.
  double *e_o, *e_lse;
  uint8_t* live;
  const double *b_o, *b_lse;
  // Backward outputs before their last steps (finish_grads): d_q's chain sum per element and its floor per row;
  // d_k's and d_v's chain sums per element and their floor per key. Per-row constants the key pass reads.
  double *dq_chain, *dq_floor, *dk_chain, *dv_chain, *kv_floor;
  double* row_stat;  // (rows_q, kRowStat)
  // Per-warp scratch of the forward: kFields x n_k doubles per pair field, then the key tiles; one
  // for each warp of its blocks (forward_blocks x warps_per_block).
  double* scratch;
  int64_t scratch_warps, scratch_stride;
};

enum RowStat { kD = 0, kED, kErrD64, kSumDo, kQAbs, kRowStat };

// Precisions one set of passes takes together (compare's candidate key tiles): they share every
// score and dP with their dot errors, which are four fifths of a backward pass's work, and differ in
// the rest (bounds_gpu.cpp, shares_pairs, says which constants must agree). m[0] gives the shared
// part; each m[t] its own chains, constants and outputs. scratch and the inputs are m[0]'s.
constexpr int kMaxShared = 5;
struct ModelSet {
  ModelDev m[kMaxShared];
  int n = 0;
};

// Doubles of scratch each warp of the forward needs (its pair fields and key tiles), for every
// precision of a set.
int64_t scratch_stride(const ModelSet& s);
// The forward's blocks where scratch for fit_warps warps fits (0: not one block's), and their warps each.
int64_t forward_blocks(const ModelDev& m, int64_t fit_warps);
int64_t warps_per_block();
// The precisions one set may hold at this problem's head dims (fewer where registers would not hold
// each one's sums).
int max_shared(const ModelDev& m);
// The three passes (bounds_gpu.cu) over a set; each throws std::runtime_error on a CUDA error.
void launch_forward(const ModelSet& s);
void launch_backward_rows(const ModelSet& s);
void launch_backward_keys(const ModelSet& s);

// Each element's last steps, on the device with the CPU model's own rounded_bound: one precision's
// roundings (bounds_gpu.cpp says which), and the model's factor for the fp64 evaluation (kSlack).
struct Finish {
  Rounding soft, o, lse, q, kv;
  double slack;
};
// The certified gradients and their errors (zeros where the oracle reports none), on the device.
struct GradRef {
  const double *dq, *err_dq, *dk, *err_dk, *dv, *err_dv;
};
// finish_dq's and finish_kv's constants of one precision.
struct GradConsts {
  double scale, floor, floor_scale, dlt;
};
// o's and lse's bounds of precision m (its forward done): into m.e_o and m.e_lse, which the backward
// reads, and into o_max, lse_max, the largest over the precisions so far (first: taken whole).
void launch_finish_o(const ModelDev& m, const Finish& f, double* o_max, double* lse_max, bool first);
// m's gradient errors before their last rounding (its backward done) into E_dq, E_dk, E_dv (fresh:
// taken whole; else the larger kept, NaN kept).
void launch_finish_grads(const ModelDev& m, const GradRef& g, const GradConsts& k, double* E_dq, double* E_dk,
                         double* E_dv, bool fresh);
// The gradients' bounds from E_dq, E_dk, E_dv, rounded as f says, into b_dq, b_dk, b_dv (first: taken
// whole; else the larger kept). m: the problem, d_v and which rows see a key. b may be E (in place).
void launch_round_grads(const ModelDev& m, const GradRef& g, const Finish& f, const double* E_dq, const double* E_dk,
                        const double* E_dv, double* b_dq, double* b_dk, double* b_dv, bool first);

}  // namespace fc::ref::gpu
