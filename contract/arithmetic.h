// What a kernel declares about how it computes, for the error model (reference/bounds.hpp; the
// derivation is docs/error-model.md): the chain of roundings of every long sum, the type of the
// element-wise arithmetic around them, and the accuracy of the exp and log it calls. The bound
// charges exactly the declared chains, so a declaration must describe the kernel as it is: a sum
// declared shorter than it is makes the bound unsound at long rows. A kernel that declares nothing
// is charged as any order with directed rounding (fc::undeclared_arithmetic).
// Host only; no dependency beyond the contract.
#pragma once

#include <cstdint>

#include "contract/attention.h"

namespace fc {

// How the terms of one block of a sum are added.
enum class Adder : int32_t {
  Nearest,     // IEEE round-to-nearest adds (or FMAs) in the kernel's order: one rounding per term
  TensorCore,  // mma.sync m16n8k16 / wgmma k16, fp16 or bf16 products into fp32 (measured on the H200,
               // docs/error-model.md): exact products; a fused step of kTensorCoreFused products and the
               // accumulator, aligned to the largest addend with 2 extra bits and truncated, the
               // step's result truncated toward zero
  AnyOrder,    // round to nearest in an order the kernel does not fix (a BLAS product): any term may
               // go through every rounding of the sum
};

// How the blocks of a sum (runs of `block` consecutive positions) are combined.
enum class Merge : int32_t {
  Rescale,   // one running accumulator, multiplied at each block boundary (merge_old roundings): the
             // online softmax's o *= exp(m_old - m_new)
  Serial,    // a partial sum from zero per block, merged into a running total in block order; per
             // merge the total takes merge_old roundings and the partial merge_new (the add included)
  AnyOrder,  // a partial sum from zero per block, merged by round-to-nearest adds in an order the
             // kernel does not fix (fp32 atomics, TMA reduce-add)
};

// Products per fused tensor-core step. A k16 instruction is charged as two fused steps of 8, which
// covers both a single fused step of 16 and two chained steps of 8 (the H200 measurement does not say which).
inline constexpr int32_t kTensorCoreFused = 8;

// One long sum: its terms arrive at positions 0, 1, ... in the kernel's order (keys for o, l, d_q;
// head-major then query rows for d_k, d_v; head-dimension columns for q.k, d_o.v, d_o.o).
struct Chain {
  Adder adder = Adder::AnyOrder;
  DType acc = DType::F32;       // the accumulator's type (its unit roundoff and underflow floor)
  bool exact_products = false;  // each product is exact before its add (16-bit operands into fp32, or
                                // a fused multiply-add); otherwise the product is one more rounding
  bool truncates = false;       // AnyOrder only: directed rounding, a whole ulp per rounding plus an
                                // alignment loss per term (what an undeclared kernel is charged)
  int32_t block = 0;            // positions per block (blocks start at multiples of it); 0: none
  Merge merge = Merge::Rescale;
  int32_t merge_old = 1, merge_new = 1;  // roundings per merge, the add included (Rescale: merge_old)
  int32_t lanes = 1;                     // positions dealt round robin, lane_width at a time, to `lanes` partial
  int32_t lane_width = 1;                // accumulators; at the end each run of lane_tree lanes is summed by a
  int32_t lane_tree = 0;                 // pairwise tree (a warp's shuffles; 0: all lanes), and those sums serially
  int32_t pre = 1;                       // within a lane, each run of `pre` consecutive positions summed from zero
                                         // before it enters the lane's accumulator (pre divides lane_width)
};

// The common chains: one running round-to-nearest accumulator, and a tensor-core MMA chain.
inline Chain serial_chain(DType acc, bool exact_products) {
  Chain c;
  c.adder = Adder::Nearest, c.acc = acc, c.exact_products = exact_products;
  return c;
}
inline Chain tensor_core_chain() {
  Chain c;
  c.adder = Adder::TensorCore, c.acc = DType::F32, c.exact_products = true;
  return c;
}

// glibc's expf / logf (exp / log for fp64) as the CPU kernels call them: within 1 ulp, and exp(0) is
// exactly 1; tanhf / tanh within 2 ulp (glibc's documented bound; reference/tests/libm_test.cpp
// measures all three over the arguments the kernels use).
struct Arithmetic;
void declare_glibc_libm(Arithmetic& a);

// Where the forward's weights get their normaliser. Max: the online softmax, P = exp(s - m) and o =
// (sum P v) / l: the weights' common errors cancel in the division. Lse: a two-pass kernel that
// normalises each weight by the lse it computed first, P = exp(s - lse) and o = sum P v: nothing
// renormalises, so the lse's error and the rounding of s - lse (u |s - lse|, of order u |lse| for the
// large weights) enter every weight. Either: one of the two (what an undeclared kernel is charged).
enum class PFrom : int32_t { Max, Lse, Either };

// A kernel's arithmetic for one problem and config.
struct Arithmetic {
  Chain s;                         // q.k over d (the forward's scores and the backward's recomputation)
  Chain pv;                        // o's accumulator over keys
  Chain l;                         // the row sum l over keys
  Chain d_o_o;                     // D = d_o.o over d
  Chain dp;                        // dP = d_o.v over d
  Chain dq;                        // d_q over keys
  Chain dkv;                       // d_k and d_v over the query rows of the kv head's group, head-major
  DType soft = DType::F32;         // element-wise arithmetic (scale, max, exp, l, lse, dS): round to nearest
  DType operand = DType::F32;      // type of the GEMM operands: q k v d_o (and P, dS when rounded); the
                                   // storage type, or an accumulation type narrower than it
  double exp_ulps = 2;             // |exp (exp2) - exact| <= exp_ulps ulp of `soft`, over the arguments used
  double log_ulps = 2;             // likewise log (log2)
  double tanh_ulps = 4;            // likewise tanh (softcap's c tanh(s / c))
  bool exp_exact_at_zero = false;  // exp(0) == 1 exactly: a running max that does not move rescales by 1
  bool base2 = false;         // scores times the rounded constant scale·log2 e, exp2 and log2; lse = ln 2 (m + log2 l)
                              // with a rounded ln 2; the backward's lse2 = lse·log2 e with a rounded log2 e
  bool rounds_p = true;       // P and dS rounded to storage (and `operand`) before their GEMMs
  DType p_type = DType::F64;  // ... or to this type where it is coarser than storage
  int32_t o_normalise = 1;    // roundings of 1/l before o = acc · (1/l) (the product itself is the
                              // output's last rounding); 0: o is already normalised in the chain
  bool p_normalised = false;  // P = exp(s - m) (1/l) rounded before P·V (cuda_naive)
  PFrom p_from = PFrom::Max;  // the forward's normaliser (PFrom)
  bool stores_s = false;      // S and dP rounded to storage before use (a 3-pass baseline)
  bool l_sums_stored_p = false;   // l sums P after its rounding to storage (cpu_naive): that rounding
                                  // renormalises, so it perturbs each weight's exponent instead
  bool ds_from_stored_p = false;  // dS = P (dP - D) from P already rounded to storage (a baseline)
  bool flush_subnormals = false;  // FTZ arithmetic: underflow floors are the smallest normal
  bool ds_scaled = false;         // dS may be multiplied by the softmax scale before its rounding to the operand
                                  // type (autodiff of softmax(scale·QK^T), as XLA): that rounding's subnormal
                                  // floor, against the unscaled sum, is max(1, 1/|scale|) times larger
  bool kv_per_head = false;       // d_k, d_v of a GQA group may be summed from each query head's gradient
                                  // rounded to storage (an MHA backward on k, v expanded to heads_q)
  int32_t block_m = 1;            // query rows per tile: a row's key walk (pv, l) goes on to the tiles its tile's
                                  // last row sees, each one more merge (or rescale, unless exp(0) is exact)
};

inline void declare_glibc_libm(Arithmetic& a) {
  a.exp_ulps = 1, a.log_ulps = 1, a.tanh_ulps = 2;
  a.exp_exact_at_zero = true;
}

// A FlashAttention kernel on tensor cores (mma.sync m16n8k16 / wgmma k16, fp32 accumulators): q.k,
// d_o.v, o (rescaled per key tile of block_n), d_k, d_v and d_q (per backward key tile of
// dq_partial, merged in any order; 0: one chain) are tensor-core chains; l per thread as pairs, a
// tile partial and l = l corr + sum, four threads' partials summed by shuffles; D over 32 lanes and a
// warp tree; fp32 round to nearest elsewhere; exp2 and log2 within 2 and 1 ulp, exp2(0) not assumed
// exact; FTZ. block_m: the forward's query rows per CTA. (cuda_tiled, cuda_wgmma; compare's "truncate".)
inline Arithmetic tensor_core_arithmetic(DType storage, int32_t block_m, int32_t block_n, int32_t dq_partial) {
  Arithmetic a;
  a.soft = DType::F32, a.operand = storage;
  a.s = a.dp = a.dkv = tensor_core_chain();
  a.pv = tensor_core_chain();
  a.pv.block = block_n, a.pv.merge = Merge::Rescale, a.pv.merge_old = 1;
  a.l = serial_chain(DType::F32, true);
  a.l.lanes = 4, a.l.lane_width = 2, a.l.pre = 2, a.l.lane_tree = 4;  // thread t of a quad: keys 2t, 2t + 1 of 8
  a.l.block = block_n, a.l.merge = Merge::Serial, a.l.merge_old = 2, a.l.merge_new = 1;
  a.d_o_o = serial_chain(DType::F32, true);
  a.d_o_o.lanes = 32, a.d_o_o.lane_tree = 32;  // lane c % 32, then a warp butterfly
  a.dq = tensor_core_chain();
  if (dq_partial > 0) a.dq.block = dq_partial, a.dq.merge = Merge::AnyOrder;
  a.exp_ulps = 2, a.log_ulps = 1, a.exp_exact_at_zero = false;
  a.base2 = true;
  a.flush_subnormals = true;
  a.block_m = block_m;
  return a;
}

// The arithmetic charged to a kernel that declares none: every sum in any order with directed
// rounding in fp32 (fp64 for fp64 storage), exp, log and tanh within 4 ulp, P and dS rounded to
// storage (dS scaled first or not), FTZ, the weights normalised by the running max or by the lse
// (PFrom::Either), and a GQA group's d_k, d_v summed from per-head gradients stored in storage.
// The coarsest of a problem's dtypes (the fewest significand bits: BF16, F16, F32, F64), which a
// mixed-dtype problem's roundings "to storage" are charged at (reference/bounds.hpp, Precision).
inline int32_t significand_bits(DType t) { return in_dtype_table(t) ? dtype_info(t).precision : 0; }
inline DType coarsest(DtypeSet t) {
  DType c = t.q;
  if (significand_bits(t.kv) < significand_bits(c)) c = t.kv;
  if (significand_bits(t.o) < significand_bits(c)) c = t.o;
  return c;
}

inline Arithmetic undeclared_arithmetic(DType storage) {
  const DType wide = storage == DType::F64 ? DType::F64 : DType::F32;
  Chain any;
  any.adder = Adder::AnyOrder, any.acc = wide, any.truncates = true;
  Arithmetic a;
  a.s = a.pv = a.l = a.d_o_o = a.dp = a.dq = a.dkv = any;
  a.soft = wide, a.operand = storage;
  a.exp_ulps = a.log_ulps = a.tanh_ulps = 4;
  a.p_from = PFrom::Either;
  a.flush_subnormals = true;
  a.ds_scaled = a.kv_per_head = true;
  return a;
}

}  // namespace fc
