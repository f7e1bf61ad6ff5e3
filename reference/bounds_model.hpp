// Internals of the error model (bounds.cpp: the head loop, scores and the forward; bounds_backward.cpp:
// the recomputed weights, dS and the gradient sums): the per-problem constants a declared arithmetic
// implies and the per-element pieces. Notation of docs/error-model.md: u_s the unit of the
// element-wise (softmax) arithmetic, u_p the rounding of P and dS to the GEMM operand type, e_exp the
// exp's relative error, kappa a chain's per-term rounding weight (bounds_chain.hpp).
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "bounds.hpp"
#include "bounds_chain.hpp"
#include "reference/matrix.hpp"

namespace fc::ref::model {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Every finished bound is multiplied by this: it covers the rounding of the bound's own fp64
// evaluation (sums of at most kMaxTerms non-negative terms, GEMMs of as many, a few products:
// relative < 2^-32).
constexpr double kSlack = 1.0 + 0x1p-30;

inline double at(const std::vector<double>& v, int64_t i) { return v.empty() ? 0.0 : v[size_t(i)]; }
// A factor times a magnitude, where a zero magnitude contributes nothing even when the factor has
// overflowed, nor a zero factor when the magnitude has (an exact scale constant times a reference
// error of +inf): a vacuous inf * 0 must not become a NaN bound.
inline double times(double factor, double magnitude) {
  return magnitude == 0 || factor == 0 ? 0.0 : factor * magnitude;
}
inline double gamma(double n, double u) { return n * u < 1 ? n * u / (1 - n * u) : kInf; }
// An upper bound on P (e^x - 1) for P = e^log_p <= 1 and x >= 0, in the log domain: P may underflow
// where P e^x does not (an exponent argument's error can be hundreds at huge scores).
inline double p_expm1(double log_p, double x) {
  if (!(log_p > -kInf)) return 0.0;
  if (x > 0.5) return std::exp(log_p + x);  // >= P (e^x - 1)
  const double p = std::exp(log_p);
  return p > 0 ? p * std::expm1(x) : 0x1p-1074;  // below the smallest subnormal: one of it covers it
}
// exp(y), given e = exp(y_known) from an earlier evaluation: reused where y is y_known (the same
// value, so the same bits), computed otherwise.
inline double exp_known(double y, double y_known, double e) { return y == y_known ? e : std::exp(y); }
// p_expm1 with p = exp(log_p) known (exp_known).
inline double p_expm1(double log_p, double x, double p) {
  if (!(log_p > -kInf)) return 0.0;
  if (x > 0.5) return std::exp(log_p + x);
  return p > 0 ? p * std::expm1(x) : 0x1p-1074;
}

// One score s = scale q.k as the kernel computes it.
struct Score {
  double s = 0;         // the exact score's fp64 value (within zeta of it)
  double a = 0;         // |scale| sum_c |q_c k_c|
  double e_c = 0;       // the rounded scale constant's share: delta_c (|s| + e_dot), common to a row
  double e_hat = 0;     // |s^ - s|: the dot's chain, the constant, the product (and a baseline's store),
                        // then softcap's and ALiBi's roundings (bounds_variants.cpp)
  double z = 0;         // the fp64 evaluation error of s beyond the dot's (softcap's tanh, ALiBi's subtraction)
  bool capped = false;  // softcap: the backward multiplies dS by 1 - tanh^2
  double t = 0;         // tanh(s_dot / c) in fp64
  double dt = 0;        // |the kernel's tanh - exact tanh(s_dot / c)|
  double g_hi = 1;      // upper bound on the exact derivative sech^2(s_dot / c)
  bool dead = false;    // hidden by a mask tensor or a block mask: s = -inf, weight exactly 0, no error
};

// Flat offsets of the dense layout for the tensors of width d_v (o, d_o: query side; v, d_v: key side).
inline int64_t offset_o(const Problem& p, int64_t b, int64_t h, int64_t i) {
  return ((b * p.heads_q + h) * p.n_q + i) * head_dim_v(p);
}
inline int64_t offset_v(const Problem& p, int64_t b, int64_t h_kv, int64_t j) {
  return ((b * p.heads_kv + h_kv) * p.n_k + j) * head_dim_v(p);
}

// The constants of one problem under one declared arithmetic.
struct Consts {
  const Problem& p;
  const Tensors64& in;
  const Certified& ref;
  const Arithmetic& ar;
  DType storage, lse_type;
  DType out_q, out_kv, out_o;  // the outputs' types: d_q; d_k, d_v; o (storage unless dtypes are per tensor)
  bool ftz;
  double us;        // unit roundoff of the element-wise arithmetic
  double floor_s;   // its underflow floor (exp, products of weights)
  double u_in = 0;  // inputs rounded to a narrower operand type: relative and absolute parts
  double floor_in = 0;
  double u_p = 0;             // P and dS rounded to the operand type: relative ...
  double floor_p = 0;         // ... and absolute (the subnormal spacing of storage and operand)
  double floor_ds = 0;        // dS's absolute part against the unscaled sum (floor_p / |scale| when scaled first)
  double u_store_s;           // S and dP stored in storage (a baseline), else 0: relative ...
  double floor_store_s;       // ... and absolute (storage's subnormal spacing)
  double delta_c;             // relative error of the scale constant (scale, or scale log2 e when base2)
  double delta_out;           // relative error of the scale d_q and d_k are multiplied by (float(scale))
  double delta_l2e;           // base2 backward: lse2 = lse * log2 e (its rounded constant)
  double delta_ln2;           // base2 forward: lse = lse2 * ln 2 (its rounded constant)
  double e_exp;               // exp's relative error, as an exponent-argument error
  double log_rel;             // log's relative error
  int64_t dv;                 // head dim of v, o, d_o
  bool common_scale;          // no softcap, no ALiBi: the scale constant's rounding scales every s - m alike
  double delta_cap;           // softcap: relative error of c rounded to the element-wise type
  double e_tanh, tanh_floor;  // softcap: the kernel's tanh, relative (tanh_ulps ulp) and below the normal range
  std::vector<int64_t> kv_i0, kv_i1;  // (n_k) key j is seen by the rows [kv_i0, kv_i1) of each head
  int64_t group;                      // query heads per kv head
  int64_t n_q16;                      // n_q rounded up to 16: a head's query rows in the d_k, d_v chains
  double kv_head_phi = 0;             // d_k, d_v from per-head gradients stored (kv_per_head): each term's relative
                                      // factor after the per-head chains, within phi of 1 (0: no such stage) ...
  double kv_head_floor = 0;           // ... and their absolute part, in output units
  ChainWeights w_s, w_dp, w_D;        // the chains over d (scores, dP, D)
  ChainWeights w_kv_full;             // d_k, d_v chains with blocks or lanes: every row position counted

  Consts(const Problem& p, const Tensors64& in, const Certified& ref, const Precision& prec);

  // |computed - exact| of a sum over n (d or d_v) whose terms' magnitudes are |x_c| = |a_c b_c| and
  // whose weighted sum sum_c kappa_c |x_c| is `weighted`, `plain` = sum_c |x_c| (the operands' rounding).
  double dot_error(const ChainWeights& w, double weighted, double plain, double sum_a, double sum_b, int64_t n) const {
    double e = weighted;
    if (u_in > 0) e += (1 + w.kappa_max) * (gamma(2, u_in) * plain + floor_in * (sum_a + sum_b + double(n) * floor_in));
    return e * w.scale() + w.floors();
  }
  // Softcap, then ALiBi, on score s of key j in row i of query head h, as the kernel computes them in
  // the element-wise type: s.s becomes the exact transformed score, s.e_hat its error (bounds_variants.cpp).
  void transform(Score& s, int64_t h, int64_t i, int64_t j) const;
  // The mask tensor's and block mask's effect on score s (bias: SeqData::bias): -inf marks it dead;
  // an additive value joins it with one rounding in the element-wise type (bounds_variants.cpp).
  void add_mask(Score& s, double bias) const;
  // Whether some key of [begin, end) of row i in (b, h) survives the mask tensor and block mask.
  bool any_live(int64_t b, int64_t h, int64_t i, KeyRange vis) const;
};

// Per row of the forward, what the backward needs again.
struct RowInfo {
  double e_lse = 0;    // |kernel lse - exact lse|
  double D = 0;        // d_o . o (fp64, from the certified o)
  double e_D = 0;      // |kernel D - exact D|
  double err_D64 = 0;  // |D - exact D|
};

// One (query row, key) pair of the backward: the recomputed weight and dS with their errors.
struct Pair {
  double P_hi = 0;    // upper bound on the exact P
  double dP_w = 0;    // |P^ - P|: the recomputed weight's error
  double P_bar = 0;   // upper bound on |P^|
  double ds_hi = 0;   // upper bound on the exact |dS|
  double e_ds = 0;    // |dS^ - dS| before its rounding to the operand type
  double ds_bar = 0;  // upper bound on |dS^|
};
// y_fw, e_fw: the forward's log P + zeta of the pair and its exp (exp_known).
Pair backward_pair(const Consts& k, const Score& s, double dp, double mag_dp, double e_dp, double lse, double err_lse,
                   const RowInfo& row, double y_fw, double e_fw);

// A chain over keys whose row starts at key jb: the position of its first term. Blocks (key tiles)
// and lanes are dealt from key 0, so a blocked chain starts jb % block into its first block and a
// laned one at jb (its leading positions counted as present: only looser); a plain chain at 0.
inline int64_t key_offset(const Chain& c, int64_t jb) {
  if (c.block > 0) return jb % c.block;
  return c.lanes > 1 || c.pre > 1 ? jb : 0;
}

// A row's scores as the kernel computes them: the largest s, s + e^, dot error and e^.
struct RowScores {
  double m = -kInf, hi_all = -kInf, e_dot_max = 0, e_hat_max = 0;
};
// The key tiles a row visits (docs/error-model.md): per tile t the largest s - e^ and s + e^, their
// running maxima through t, and the rescales after t that may err.
struct KeyTiles {
  std::vector<double> t_lo, t_hi;      // (T) max s -+ e
  std::vector<double> pre_lo, pre_hi;  // (T) through t
  std::vector<double> moves_after;     // (T) rescales that may err after t
};
// The largest exponent-argument deviation of a row's weights: for o (d_o_w) and for lse (d_l).
struct WeightEps {
  double eps = 0, eps_lse = 0;
};

// chain_weights of the last (n, extra merges) asked for one chain: rows of equal length reuse it.
struct ChainMemo {
  int64_t n = -1, extra = -1;
  ChainWeights w;
  const ChainWeights& get(const Chain& c, int64_t n_, bool ftz, int64_t extra_) {
    if (n_ != n || extra_ != extra) w = chain_weights(c, n_, ftz, extra_), n = n_, extra = extra_;
    return w;
  }
};

// One (batch, kv head) of the problem, row block by row block: the scores and dP of a block come
// from GEMMs; the forward and the backward's per-pair terms are row loops; the gradients' chain sums
// are GEMMs of per-pair coefficients (alpha for d_q, beta for d_k and d_v) with |k|, |q|, |d_o|.
struct HeadPass {
  const Consts& k;
  Bounds& B;
  bool bwd;
  int64_t b = 0, g = 0;
  Mat K, Kabs, V;                            // (n_k, d) the kv head's k, |k|, v
  bool v_finite = true;                      // every v of the kv head is finite
  std::vector<double> k_abs_sum, v_abs_sum;  // (n_k) sum_c |k_jc|, |v_jc|
  // The current row block [i0, i0 + R) of head h: (R, n_k) each.
  int64_t h = 0, i0 = 0;
  Mat S, A, Es, DP, MDP, Edp, alpha, beta_k, beta_v;
  // This block's S, A, Es, DP, MDP, Edp: this pass's own, or those of the pass it shares them with.
  const Mat *pS = &S, *pA = &A, *pEs = &Es, *pDP = &DP, *pMDP = &MDP, *pEdp = &Edp;
  Mat mag_k, mag_v;                                // (R, n_k) kv_head_phi > 0: upper bounds on |dS|, P
  Mat M_dk, M_dv;                                  // (n_k, d) their sums over the group: sum |terms|
  std::vector<double> alpha0, dq_scale, dq_floor;  // (R) per row: constants, chain scale and floors
  Mat E_dk, E_dv;                                  // (n_k, d) accumulated over the group's heads
  std::vector<double> beta0_k, beta0_v;            // (n_k)
  // Per row, reused: the scores, the kernel's o error (for D).
  std::vector<Score> sc;
  std::vector<double> e_o, err_o, logP, zeta, d_o_w, d_l, w_hat, coef_w, coef_acc, w_sum, R_max, e_acc;
  std::vector<double> e_lp;  // (keys) exp(logP + zeta), evaluated once for the row's uses
  // Attention sinks: the row's sink is one more entry of sc after its n_keys keys, a key of value 0
  // in a key tile of its own (sink_tile) after the row's last, at the chain positions sink_pos_l,
  // sink_pos_pv (the start of a new block: every key's term goes through the sink's add too).
  int64_t n_keys = 0, sink_tile = -1, sink_pos_l = 0, sink_pos_pv = 0;
  std::vector<double> zero_v;   // (d_v) the sink's value
  Eigen::ArrayXd x_key, v_key;  // (d_v) o_sums: one key's |v - o| + err_o, and |v|
  // The current row between row_begin and row_end: its keys, what the backward needs, and the
  // forward's pieces that o's bound needs after o_sums.
  KeyRange rw_vis{};
  RowInfo rw_row;
  // The kernel's row sum l^ over Z, the exact sum of its own weights: within [low, 1 + dev], and
  // |l^ / Z - 1| <= dev (low = 1 - dev where dev < 1/2).
  struct LSum {
    double dev = 0, low = 1;
  };
  struct RowState {
    int64_t oo = 0, ol = 0, jb = 0, o_pv = 0;
    bool has_sink = false;
    double lse = 0, err_lse = 0, m = 0, eps = 0, eps_lse = 0, tiny_w = 0, acc0 = 0;
    LSum l;
    const ChainWeights* wpv = nullptr;
  } rw;
  int64_t tile_of(int64_t j, int64_t off, int64_t bt) const { return j < n_keys ? (off + j) / bt : sink_tile; }
  ChainMemo memo_l, memo_pv, memo_dq;  // one pass's chains (its arithmetic is fixed)

  HeadPass(const Consts& k, Bounds& B, bool bwd) : k(k), B(B), bwd(bwd) {}
  void kv_head(int64_t b, int64_t g);  // k, v of (b, g); zero the d_k, d_v sums
  // A row block: its GEMMs (shared: another arithmetic's pass on the same block, whose products of
  // the inputs are reused, and which must stay alive through the block); then per row row_begin
  // (false: a row without a live key, finished there), o_sums over the passes on the row, row_end;
  // then end_block (d_q, and the block's share of the d_k, d_v sums).
  void begin_block(int64_t h, int64_t i0, int64_t rows, const HeadPass* shared = nullptr);
  bool row_begin(int64_t r);
  void row_end(int64_t r);
  void end_block(int64_t rows);
  // o, lse of row i0 + r, keys vis (bounds.cpp): forward up to o's coefficients, then (after
  // o_sums) forward_finish.
  void forward(int64_t r, KeyRange vis);
  void forward_finish(int64_t r, RowInfo& row);
  // The pieces of forward(): the row's scores into sc; the weights' deviations into logP, zeta,
  // d_o_w, d_l and w_hat (j_exact: the key whose weight is exactly 1, or -1); o's per-key
  // coefficients (o_coefs), its bound from the sums into B.o and e_o (o_finish); lse's bound into
  // B.lse (returned).
  RowScores scores(int64_t r, KeyRange vis);
  WeightEps weight_errors(const RowScores& rs, const KeyTiles& kt, int64_t off, int64_t bt, int64_t j_exact, double lse,
                          double err_lse);
  void o_coefs(int64_t oo, const ChainWeights& wpv, int64_t o_pv, int64_t j_exact, double tiny_w);
  void o_finish(int64_t oo, const ChainWeights& wpv, LSum l, double eps);
  double lse_bound(int64_t ol, double lse, double err_lse, double m, double eps_lse, LSum l);
  void backward(int64_t r, KeyRange vis, RowInfo& row);  // its pairs' alpha, beta (bounds_backward.cpp)
  // o of a kernel whose weights are exp(s - lse) with its own lse (Arithmetic::p_from): replaces
  // (PFrom::Lse) or widens to cover (PFrom::Either) the bound forward() gave (bounds_lse.cpp).
  void lse_normalised(int64_t r, KeyRange vis, const ChainWeights& wpv, int64_t o_pv, double tiny_w,
                      const RowInfo& row);
  void finish_dq(int64_t rows);  // d_q of the block's rows
  void finish_kv();              // d_k, d_v of the kv head
};

// o's sums over a row's keys (w_sum, R_max, e_acc) for n passes on the same row, after their
// o_coefs: the keys, v, o and err_o are the same for all, so |v - o| + err_o and its max are
// computed once and each pass's sums run in key order with its own coefficients (the bits of n
// separate passes).
void o_sums(HeadPass* const* hps, int64_t n);

// The model on a problem in the dense layout (any mask, window, softcap, ALiBi, d_v; bounds.cpp);
// error_bounds cuts varlen and paged problems into such problems, one per sequence (bounds_variants.cpp).
Bounds dense_bounds(const Problem& p, const Tensors64& in, const Certified& ref, const Precision& prec);
// The same for several arithmetics at once, each block's products of the inputs computed once:
// element for element the bits of dense_bounds with each.
std::vector<Bounds> dense_bounds(const Problem& p, const Tensors64& in, const Certified& ref,
                                 const std::vector<Precision>& precs);
Bounds sequence_bounds(const Problem& p, const Tensors64& in, const Certified& ref, const Precision& prec);
// The lse bound of a row that sees no key but its head's finite sink: the kernel's sink + log l with
// l = exp(sink - sink) (bounds.cpp).
double sink_only_lse_bound(const Precision& prec, double sink, double err_ref);

// The d_k, d_v chain weight of row i of the group's head hl for key j (rows a causal mask hides from
// j hold no term), and the largest weight of key j's chain.
double kv_kappa(const Consts& k, int64_t j, int64_t hl, int64_t i);
double kv_kappa_max(const Consts& k, int64_t j);
double kv_events(const Consts& k, int64_t j);

}  // namespace fc::ref::model
