// The error model's O(n_q n_k d) work on the GPU (bounds_gpu.hpp): the same formulas as
// reference/bounds.cpp and bounds_backward.cpp, element for element, evaluated in float64 on the
// device. Only the order of the fp64 sums differs from the CPU's (GEMMs there, warp reductions, per-lane
// loops and, for the scores' and dP's dot products, the float64 tensor cores here: tensor_dots.cuh);
// kSlack covers any order (docs/error-model.md, "The error model on the GPU").
//
// Three kernels, one warp per row or key. A block takes kWarps neighbouring rows (keys) of one head and
// stages the other side (k and v; q and d_o) in shared tiles of kTile, which its warps share; blocks
// are persistent, looping over the groups of rows (keys). Each launch takes a set of precisions
// (ModelSet): the scores and dP once, each precision's terms and sums beside them.
//   forward_rows   a row's scores (into the warp's scratch); for each precision its key tiles, its
//                  weights' deviations, l's chain, o's coefficients (scratch) and lse's sums; then o's
//                  sums over keys x d_v (lanes own columns): o's and lse's error before their last
//                  rounding;
//   backward_rows  D from each precision's finished bound of o, each pair's dP and each precision's dS
//                  terms (lanes own keys), then d_q's chain sums (lanes own columns) and the row's
//                  constants for the key pass;
//   backward_keys  each key's pairs over the group's rows that see it (lanes own rows), recomputed
//                  from those constants, then d_k's and d_v's chain sums (lanes own columns).
// Then elementwise passes: each bound's last terms and rounding (finish_o, finish_grads, round_grads),
// with the CPU's own rounded_bound (reference/rounded_bound.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "reference/gpu/bounds_gpu_dev.hpp"
#include "reference/gpu/tensor_dots.cuh"

namespace fc::ref::gpu {
namespace {

using closed_detail::div64;
using closed_detail::mod64;

constexpr int kWarps = 8;  // warps per block
constexpr int kThreads = kWarps * 32;
constexpr int kMaxCols = 8;      // columns a lane owns: d, d_v <= 256 (4 where d, d_v <= 128: the kernels' Cols)
constexpr int kTile = 32;        // keys (rows in backward_keys) per shared tile: one a lane
constexpr int kBlocksPerSm = 2;  // persistent blocks per multiprocessor (the kernels' launch bounds)
constexpr double kInf = __builtin_huge_val();
constexpr double kTcOwn = 2 + kTensorCoreFused + 1;  // bounds_chain.cpp
constexpr double kTcLater = 2 + kTensorCoreFused / 2.0;
// A row's fields per visible key: the score's and its weight's log and exp (kS … kElp, shared by the
// set's precisions), one precision's at a time (kDow, kDl: its weights' deviations), then o's two
// coefficients for each precision of the set (kCoef + 2 t, + 1).
enum ScratchField { kS = 0, kEh, kEc, kY, kElp, kDow, kDl, kCoef };
enum TileField { kTLo = 0, kTHi, kPreLo, kPreHi, kMoves, kTileFields };

__device__ inline double gamma_n(double n, double u) { return n * u < 1 ? n * u / (1 - n * u) : kInf; }
__device__ inline double times(double factor, double magnitude) {
  return magnitude == 0 || factor == 0 ? 0.0 : factor * magnitude;
}
__device__ inline double p_expm1(double log_p, double x, double p) {
  if (!(log_p > -kInf)) return 0.0;
  if (x > 0.5) return exp(log_p + x);
  return p > 0 ? p * expm1(x) : 0x1p-1074;
}
// bounds_chain.cpp's chain_scale and grown_floors.
__device__ inline double chain_scale(double kappa_max) {
  if (!(kappa_max > 0)) return kappa_max == 0 ? 1.0 : kInf;
  const double s = kappa_max < 0x1p-20 ? 1 + kappa_max : expm1(kappa_max) / kappa_max;
  return s * (1 + 0x1p-50);
}
__device__ inline double grown_floors(double f, double kappa) { return f == 0 ? 0.0 : f * exp(kappa) * (1 + 0x1p-50); }
__device__ inline double chain_floors(const ClosedChain& c, const ClosedShape& s) {
  return grown_floors(closed_events(c, s) * c.floor, closed_kappa_max(c, s));
}
// bounds_model.hpp's key_offset.
__device__ inline int64_t key_offset(const ClosedChain& c, int64_t jb) {
  if (c.block > 0) return mod64(jb, c.block);
  return c.lanes > 1 || c.pre > 1 ? jb : 0;
}
// bounds_chain.cpp's plain_kappa (d_k, d_v chains without blocks, lanes or pre-sums).
__device__ inline double plain_kappa(const ClosedChain& c, int64_t t, int64_t n, int64_t step, int64_t n_steps) {
  const double u = c.u, pr = c.exact_products ? 0 : 1;
  switch (Adder(c.adder)) {
    case Adder::Nearest: return u * (pr + double(t == 0 ? n - 1 : n - t));
    case Adder::TensorCore: return u * (kTcOwn + kTcLater * double(n_steps - 1 - step));
    case Adder::AnyOrder: return c.truncates ? double(n - 1) * 3 * u + pr * 2 * u : (double(n - 1) + pr) * u;
  }
  return kInf;
}

__device__ inline double warp_max(double x) {
  for (int o = 16; o > 0; o /= 2) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ inline double warp_sum(double x) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// dot_error of bounds_model.hpp's Consts.
__device__ inline double dot_error(const ModelDev& m, const DotChain& w, double weighted, double plain, double sum_a,
                                   double sum_b, int64_t n) {
  double e = weighted;
  if (m.u_in > 0)
    e += (1 + w.kappa_max) * (gamma_n(2, m.u_in) * plain + m.floor_in * (sum_a + sum_b + double(n) * m.floor_in));
  return e * w.scale + w.floors;
}

// One score as the kernel computes it (bounds.cpp, HeadPass::scores): s, |scale| sum |q k|, e^ and
// the constant's share e_c; e_dot the dot's own error.
struct Sc {
  double s, a, e_hat, e_c, e_dot;
};
// A dot product over a chain of n terms: x.y, sum |x y| and sum kappa |x y| (the CPU's GEMMs S, A, Es
// and DP, MDP, Edp, pair by pair).
struct Dot {
  double xy, abs, weighted;
};
__device__ inline Dot dot(const double* x, const double* y, const DotChain& w, int n) {
  Dot r{0, 0, 0};
  for (int c = 0; c < n; ++c) {
    const double ax = fabs(x[c]), ay = fabs(y[c]);
    r.xy += x[c] * y[c];
    r.abs += ax * ay;
    r.weighted += ax * w.kappa[c] * ay;
  }
  return r;
}
// pre: the three sums from the tensor cores (tile_dots<3>), or null (dot on the CUDA cores).
__device__ inline Dot dot_or(const double* pre, const double* x, const double* y, const DotChain& w, int n) {
  return pre ? Dot{pre[0], pre[1], pre[2]} : dot(x, y, w, n);
}
// ws: m.w_s with its weights where the block keeps them (shared memory).
__device__ inline Sc score(const ModelDev& m, const DotChain& ws, const double* q, const double* kr, double q_abs_sum,
                           double k_abs_sum, const double* pre) {
  const int d = int(m.p.d);
  const Dot x = dot_or(pre, q, kr, ws, d);
  const double scale = fabs(m.p.scale);
  Sc s;
  s.s = m.p.scale * x.xy, s.a = scale * x.abs;
  s.e_dot = scale * dot_error(m, ws, x.weighted, x.abs, q_abs_sum, k_abs_sum, d);
  s.e_c = m.delta_c * (fabs(s.s) + s.e_dot);
  const double after = s.e_dot + s.e_c + m.us * (fabs(s.s) + s.e_dot + s.e_c);
  s.e_hat = after + m.u_store_s * (fabs(s.s) + after) + m.floor_store_s;
  return s;
}

// dP = d_o . v and its error (HeadPass::backward).
struct DP {
  double dp, mag, e_dp;
};
// wdp: m.w_dp with its weights where the block keeps them.
__device__ inline DP d_p(const ModelDev& m, const DotChain& wdp, const double* d_o, const double* v, double sum_do,
                         double v_abs_sum, const double* pre) {
  const int dv = int(m.dv);
  const Dot x = dot_or(pre, d_o, v, wdp, dv);
  return {x.xy, x.abs, dot_error(m, wdp, x.weighted, x.abs, sum_do, v_abs_sum, dv)};
}

// The row's constants the backward's pairs need (RowInfo, and the certified lse).
struct Row {
  double lse, err_lse, e_lse, D, e_D, err_D64;
};
struct PairBound {
  double P_hi, dP_w, P_bar, ds_hi, e_ds, ds_bar;
};
// A pair's terms that no precision's constants enter (the set computes them once): P's upper bound
// from the certified lse (its log y = log P + zeta, e_lp = exp(min(0, y))) and |dP - D| with its fp64
// error, the gap.
struct PairP {
  double lp, e_lp, P_hi, gap;
};
__device__ inline PairP pair_p(int64_t d, int64_t dv, const Sc& s, const DP& dp, const Row& row) {
  const double logP = fmin(0.0, s.s - row.lse);
  const double zeta = double(d + 4) * 0x1p-53 * s.a + 0x1p-51 * (fabs(s.s) + fabs(row.lse) + 1) + 0.0 + row.err_lse;
  const double y = logP + zeta, e_y = exp(y), lp = fmin(0.0, y);
  PairP x;
  x.lp = lp, x.e_lp = lp == y ? e_y : exp(lp), x.P_hi = fmin(1.0, e_y);
  x.gap = fabs(dp.dp - row.D) + double(dv + 1) * 0x1p-53 * dp.mag + row.err_D64;
  return x;
}
// bounds_backward.cpp's backward_pair (no softcap), from the pair's shared terms.
__device__ inline PairBound backward_pair(const ModelDev& m, const Sc& s, const DP& dp, const Row& row,
                                          const PairP& x) {
  double e_dp = dp.e_dp + m.u_store_s * (fabs(dp.dp) + dp.e_dp) + m.floor_store_s;
  const double e_lse = row.e_lse + (m.base2 ? (m.delta_l2e + m.us) * (fabs(row.lse) + row.e_lse) : 0.0);
  const double e_arg = s.e_hat + e_lse;
  const double xi = e_arg + m.us * (fabs(s.s - row.lse) + e_arg) + m.e_exp;
  PairBound pr;
  pr.P_hi = x.P_hi;
  pr.dP_w = fmin(1.0, p_expm1(x.lp, xi, x.e_lp)) + m.floor_s;
  pr.P_bar = fmin(1.0, pr.P_hi + pr.dP_w);
  const double gap = x.gap;
  const double e_gap = e_dp + row.e_D;
  double e_ds = pr.dP_w * gap + pr.P_bar * e_gap;
  if (m.ds_from_stored_p) e_ds += (m.u_p * pr.P_bar + m.floor_p) * (gap + e_gap);
  e_ds += gamma_n(2, m.us) * pr.P_bar * (gap + e_gap) + 2 * m.floor_s;
  pr.e_ds = e_ds, pr.ds_hi = pr.P_hi * gap, pr.ds_bar = pr.ds_hi + e_ds;
  return pr;
}

// The largest n_t any row can have (bounds.cpp, forward: off < bt).
__host__ __device__ inline int64_t max_tiles(const ModelDev& m) {
  return m.pv.block > 0 ? (m.p.n_k + 2 * int64_t(m.pv.block) - 1) / m.pv.block + 1 : 1;
}

// A block's rows (or keys): kWarps consecutive rows i of one (b, h) (keys j of one (b, h_kv)), warp w
// taking the w-th; n: the rows (keys) per head.
struct Group {
  int64_t head, first;  // b·heads + h, and its first row (key)
  int count;            // the warps with a row (key): min(kWarps, n - first)
};
__host__ __device__ inline int64_t groups_of(int64_t heads, int64_t n) { return heads * ((n + kWarps - 1) / kWarps); }
__device__ inline Group group_at(int64_t x, int64_t n) {
  const int64_t per = (n + kWarps - 1) / kWarps;
  Group gr;
  gr.head = x / per, gr.first = x % per * kWarps;
  gr.count = int(n - gr.first < kWarps ? n - gr.first : kWarps);
  return gr;
}

// Copies `rows` rows of `width` from src (row t at src + t·width) into a tile of pitch width + 1 (odd:
// lanes reading one column of different rows hit different banks), the whole block taking part: a
// warp to a row, its lanes along it (no division per element).
__device__ inline void load_tile(double* tile, const double* src, int rows, int width) {
  const int lane = threadIdx.x % 32;
  for (int t = threadIdx.x / 32; t < rows; t += kWarps)
    for (int c = lane; c < width; c += 32) tile[t * (width + 1) + c] = src[int64_t(t) * width + c];
}
__device__ inline void load_vec(double* dst, const double* src, int n) {
  for (int x = threadIdx.x; x < n; x += kThreads) dst[x] = src[x];
}

// ---------------------------------------------------------------------------------------------------
// A block takes kWarps rows of one head and walks the keys any of them sees in tiles of kTile, staged
// in shared memory; each warp keeps to its own row's keys.
// What o's last step needs of one precision's row after its o sums (o_finish).
struct OFinish {
  double exp_eps, acc0, l_dev, l_low, sc_pv, fl_pv;
};
template <int Cols, int Tiles>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) forward_rows(const __grid_constant__ ModelSet S) {
  extern __shared__ double sm[];
  const ModelDev& ms = S.m[0];  // the set's shared part
  const Problem& p = ms.p;
  const int lane = threadIdx.x % 32, wib = threadIdx.x / 32;
  const int d = int(p.d), dv = int(ms.dv);
  double* kap = sm;                                       // (d) the scores' chain weights
  double* q = kap + d + wib * d;                          // (d) this warp's q
  double* tile = kap + d + kWarps * d;                    // (kTile, max(d, d_v) + 1): k, then v
  double* dots = tile + kTile * ((d > dv ? d : dv) + 1);  // (kWarps, kTile, 3): the tensor cores' score sums
  OFinish* fin = reinterpret_cast<OFinish*>(dots + kWarps * kTile * 3) + wib * Tiles;  // this warp's
  // This warp's chains l and pv at its row's lengths (in shared memory: too many registers to keep).
  ClosedShape* shp = reinterpret_cast<ClosedShape*>(fin - wib * Tiles + kWarps * Tiles) + wib * 2;
  DotChain ws = ms.w_s;
  ws.kappa = kap;
  const int nt = Tiles == 1 ? 1 : S.n;
  double* F = ms.scratch + (int64_t(blockIdx.x) * kWarps + wib) * ms.scratch_stride;
  const int64_t n_k = p.n_k;
  double* T = F + (kCoef + 2 * nt) * n_k;
  load_vec(kap, ms.w_s.kappa, d);
  const int64_t n_groups = groups_of(int64_t(p.batch) * p.heads_q, p.n_q);
  for (int64_t x = blockIdx.x; x < n_groups; x += gridDim.x) {
    const Group gr = group_at(x, p.n_q);
    const int64_t b = gr.head / p.heads_q, h = gr.head % p.heads_q, g = h / ms.group;
    const int64_t i = gr.first + wib, r = gr.head * p.n_q + i;
    const bool has_row = wib < gr.count;
    const KeyRange vis = has_row ? visible_keys(p, i, p.n_q, n_k) : KeyRange{};
    const int64_t jb = vis.begin, je = vis.end, n_v = je - jb;
    const bool live = n_v > 0;
    int64_t lo = n_k, hi = 0;  // the keys any row of the block sees
    for (int t = 0; t < gr.count; ++t) {
      const KeyRange kr = visible_keys(p, gr.first + t, p.n_q, n_k);
      if (kr.end > kr.begin) lo = kr.begin < lo ? kr.begin : lo, hi = kr.end > hi ? kr.end : hi;
    }
    const double* kb = ms.k + offset_kv(p, b, g, 0);
    const double* vb = ms.v + (b * p.heads_kv + g) * n_k * ms.dv;
    const int64_t oq = has_row ? offset_q(p, b, h, i) : 0, oo = r * ms.dv, ol = r;
    if (has_row && lane == 0) ms.live[r] = live;
    __syncthreads();  // the previous group's tiles and rows are done with
    for (int c = lane; c < d; c += 32) q[c] = live ? ms.q[oq + c] : 0.0;
    __syncwarp();
    double q_abs = 0;
    for (int c = lane; c < d; c += 32) q_abs += fabs(q[c]);
    q_abs = warp_sum(q_abs);
    // Scores (HeadPass::scores) and the row's maxima; the first key of the largest s. Lane l takes key
    // t0 + l of each tile.
    double mx = -kInf, hi_all = -kInf, e_dot_max = 0, e_hat_max = 0, best = -kInf;
    int64_t best_j = n_v;
    const double* kabs = ms.k_abs_sum + (b * p.heads_kv + g) * n_k;
    // The certified lse and its error: y = log P + zeta bounds each weight's log from above (weight_errors).
    const double lse = has_row ? ms.lse[ol] : 0.0, err_lse = has_row ? ms.err_lse[ol] : 0.0;
    for (int64_t t0 = lo; t0 < hi; t0 += kTile) {
      const int cnt = int(hi - t0 < kTile ? hi - t0 : kTile);
      load_tile(tile, kb + t0 * d, cnt, d);
      __syncthreads();
      if (ms.mma) {  // every warp's row against the tile's keys (the warps' q rows are d apart)
        tile_dots<3>(kap + d, d, kWarps, tile, d + 1, cnt, d, kap, dots, 3 * kTile, 3);
        __syncthreads();
      }
      const int64_t ja = t0 + lane;
      if (lane < cnt && ja >= jb && ja < je) {
        const int64_t j = ja - jb;
        const Sc s =
            score(ms, ws, q, tile + lane * (d + 1), q_abs, kabs[ja], ms.mma ? dots + (wib * kTile + lane) * 3 : nullptr);
        const double logP = fmin(0.0, s.s - lse);
        const double zeta = double(p.d + 4) * 0x1p-53 * s.a + 0x1p-51 * (fabs(s.s) + fabs(lse) + 1) + 0.0 + err_lse;
        const double y = logP + zeta;
        F[kS * n_k + j] = s.s, F[kEh * n_k + j] = s.e_hat, F[kEc * n_k + j] = s.e_c;
        F[kY * n_k + j] = y, F[kElp * n_k + j] = exp(y);
        mx = fmax(mx, s.s), hi_all = fmax(hi_all, s.s + s.e_hat);
        e_dot_max = fmax(e_dot_max, s.e_dot), e_hat_max = fmax(e_hat_max, s.e_hat);
        if (s.s > best) best = s.s, best_j = j;
      }
      __syncthreads();
    }
    mx = warp_max(mx), hi_all = warp_max(hi_all), e_dot_max = warp_max(e_dot_max), e_hat_max = warp_max(e_hat_max);
    for (int o = 16; o > 0; o /= 2) {  // argmax, the smallest key among equal scores (exact_max_key)
      const double ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int64_t oj = __shfl_xor_sync(0xffffffffu, best_j, o);
      if (ob > best || (ob == best && oj < best_j)) best = ob, best_j = oj;
    }
    __syncwarp();
    double others = -kInf;  // the largest s + e^ but the first largest s's
    for (int64_t j = lane; j < n_v; j += 32)
      if (j != best_j) others = fmax(others, F[kS * n_k + j] + F[kEh * n_k + j]);
    others = warp_max(others);
    // Each precision of the set from here on, over the same scores: its weights, l, o's coefficients
    // and lse (no block-wide barrier), then o's sums for every precision together.
#pragma unroll 1
    for (int tp = 0; tp < nt; ++tp) {
      const ModelDev& m = S.m[tp];
      double* Cw = F + (kCoef + 2 * tp) * n_k;  // o's W coefficient per key, then its accumulator's
      double* Ca = Cw + n_k;
      const int64_t nt_max = max_tiles(m);
      // The row's own steps, on its scratch (no block-wide barrier inside: every warp meets the next one).
      double eps = 0, eps_lse = 0, E_l = 0, acc0 = 0, l_dev = 0, l_low = 0;
      int64_t j_exact = -1;
      if (live) {
        const bool exact_max = m.exp_exact_at_zero && !m.p_normalised && best_j < n_v &&
                               F[kS * n_k + best_j] - F[kEh * n_k + best_j] > others;
        j_exact = exact_max ? best_j : -1;
        // Key tiles (key_tiles): per tile max s -+ e^, their running maxima, the rescales after t that may err.
        const int64_t bt = m.pv.block > 0 ? m.pv.block : (n_v > 1 ? n_v : 1), off = m.pv.block > 0 ? mod64(jb, bt) : 0;
        const int64_t n_t = div64(off + n_v + bt - 1, bt);
        for (int64_t t = lane; t < n_t; t += 32) {
          double tlo = -kInf, thi = -kInf;
          const int64_t j0 = t * bt - off > 0 ? t * bt - off : 0,
                        j1 = (t + 1) * bt - off < n_v ? (t + 1) * bt - off : n_v;
          for (int64_t j = j0; j < j1; ++j) {
            const double s = F[kS * n_k + j], e = F[kEh * n_k + j];
            tlo = fmax(tlo, s - e), thi = fmax(thi, s + e);
          }
          T[kTLo * nt_max + t] = tlo, T[kTHi * nt_max + t] = thi;
        }
        __syncwarp();
        double carry_lo = -kInf, carry_hi = -kInf;
        for (int64_t base = 0; base < n_t; base += 32) {  // running maxima: a max-scan across the warp
          const int64_t t = base + lane;
          double tlo = t < n_t ? T[kTLo * nt_max + t] : -kInf, thi = t < n_t ? T[kTHi * nt_max + t] : -kInf;
          for (int o = 1; o < 32; o *= 2) {
            const double ol_ = __shfl_up_sync(0xffffffffu, tlo, o), oh = __shfl_up_sync(0xffffffffu, thi, o);
            if (lane >= o) tlo = fmax(tlo, ol_), thi = fmax(thi, oh);
          }
          tlo = fmax(tlo, carry_lo), thi = fmax(thi, carry_hi);
          if (t < n_t) T[kPreLo * nt_max + t] = tlo, T[kPreHi * nt_max + t] = thi;
          carry_lo = __shfl_sync(0xffffffffu, tlo, 31), carry_hi = __shfl_sync(0xffffffffu, thi, 31);
        }
        __syncwarp();
        // moves_after[t]: the rescales after tile t that may err, a suffix count (integers: exact).
        double carry = 0;
        for (int64_t top = (n_t - 1) / 32 * 32; top >= 0; top -= 32) {
          const int64_t t = top + lane;
          double ind = 0;
          if (t + 1 < n_t) ind = !m.exp_exact_at_zero || T[kTHi * nt_max + t + 1] >= T[kPreLo * nt_max + t] ? 1.0 : 0.0;
          for (int o = 1; o < 32; o *= 2) {
            const double y = __shfl_down_sync(0xffffffffu, ind, o);
            if (lane + o < 32) ind += y;
          }
          if (t < n_t) T[kMoves * nt_max + t] = ind + carry;
          carry += __shfl_sync(0xffffffffu, ind, 0);
        }
        __syncwarp();
        // The weights' deviations (weight_errors).
        const double u = m.us, stored = m.l_sums_stored_p ? m.u_p / (1 - m.u_p) : 0.0;
        const closed_detail::Divisor by_bt = closed_detail::divisor(bt);
        for (int64_t j = lane; j < n_v; j += 32) {
          const double s = F[kS * n_k + j], e_hat = F[kEh * n_k + j], e_c = F[kEc * n_k + j];
          const int64_t t = closed_detail::quot(by_bt, off + j);
          double common = m.e_exp + u * (fabs(s - mx) + 2 * e_hat_max) + (j != j_exact ? stored : 0.0);
          common += T[kMoves * nt_max + t] * m.e_exp + u * fmax(0.0, hi_all - T[kPreLo * nt_max + t]);
          if (m.fa1) common += m.e_exp + u * fmax(0.0, T[kPreHi * nt_max + t] - T[kTLo * nt_max + t]);
          const double dow =
              (m.common_scale ? (e_hat - e_c) + m.delta_c * (fabs(s - mx) + 2 * e_dot_max) : e_hat) + common;
          const double dl = e_hat + common;
          eps = fmax(eps, dow), eps_lse = fmax(eps_lse, dl);
          F[kDow * n_k + j] = dow, F[kDl * n_k + j] = dl;
        }
        eps = warp_max(eps), eps_lse = warp_max(eps_lse);
        // l's chain and o's coefficients (forward, o_coefs): o's W coefficient into Cw, its accumulator
        // coefficient into Ca.
        const double tiny_w = m.floor_s / (m.exp_exact_at_zero ? 1.0 : 1 - m.e_exp);
        const int64_t bm = m.block_m > 1 ? m.block_m : 1;
        const int64_t i_last = ((i / bm + 1) * bm < p.n_q ? (i / bm + 1) * bm : p.n_q) - 1;
        const int64_t walked = div64(visible_keys(p, i_last, p.n_q, n_k).end - (jb - off) + bt - 1, bt);
        auto extra = [&](const ClosedChain& c) -> int64_t {
          if (c.block <= 0 || (Merge(c.merge) == Merge::Rescale && m.exp_exact_at_zero)) return 0;
          return walked - n_t > 0 ? walked - n_t : 0;
        };
        const int64_t o_l = key_offset(m.l, jb), o_pv = key_offset(m.pv, jb);
        const int64_t len_l = o_l + n_v, x_l = extra(m.l);
        const int64_t len_pv = o_pv + n_v, x_pv = extra(m.pv);
        const double pv_up = (m.l_sums_stored_p ? 0.0 : m.u_p) + (m.p_normalised ? gamma_n(m.o_normalise + 1, u) : 0.0);
        if (lane == 0) shp[0] = closed_shape(m.l, len_l, x_l), shp[1] = closed_shape(m.pv, len_pv, x_pv);
        __syncwarp();
        const ClosedShape &sh_l = shp[0], &sh_pv = shp[1];
        for (int64_t j = lane; j < n_v; j += 32) {
          const double y = F[kY * n_k + j], dow = F[kDow * n_k + j], elp = F[kElp * n_k + j];
          const double w = fmin(1.0, exp(y + dow + eps));
          const double kl = closed_kappa_at(m.l, sh_l, o_l + j);
          E_l += kl * w + (1 + kl) * tiny_w;
          const double kap_j = closed_kappa_at(m.pv, sh_pv, o_pv + j);
          Cw[j] = p_expm1(y, dow, elp);
          Ca[j] = kap_j * w + (1 + kap_j) * ((j != j_exact ? pv_up : 0.0) * w + m.floor_p + tiny_w + w * m.u_in);
          acc0 += (1 + kap_j) * w * m.floor_in;
        }
        E_l = warp_sum(E_l), acc0 = warp_sum(acc0);
        const double kmax_l = closed_kappa_max(m.l, sh_l);
        E_l = E_l * chain_scale(kmax_l) + chain_floors(m.l, sh_l);
        l_dev = E_l, l_low = 1 - E_l;  // LSum
        if (!(E_l < 0.5) && m.l_acc_u <= 0x1p-8) {
          const bool adds_exact = !m.ftz && m.l_chain.adder != Adder::TensorCore && !m.l_chain.truncates;
          const double lost =
              adds_exact ? grown_floors(closed_mult_events(m.l, sh_l) * m.l.floor, kmax_l) : chain_floors(m.l, sh_l);
          const double low = exp(-(17.0 / 16) * kmax_l) * (1 - 0x1p-50) - lost;
          if (low > 0)
            l_dev = fmax(E_l, 1 - low), l_low = low;
          else
            l_low = 0.0;
        }
        __syncwarp();
      }
      if (!live) continue;
      // lse (lse_bound).
      double up = 0, down = 0;
      for (int64_t j = lane; j < n_v; j += 32) {
        const double y = F[kY * n_k + j], dl = F[kDl * n_k + j], lp = fmin(0.0, y);
        const double e = lp == y ? F[kElp * n_k + j] : exp(lp);
        up += p_expm1(lp, dl, e), down += e * -expm1(-dl);
      }
      up = warp_sum(up), down = warp_sum(down);
      const double e_w = fmin(eps_lse, fmax(up, down < 1 ? -log1p(-down) : kInf));
      const double e_log_l = l_low > 0 ? fmax(log1p(l_dev), -log(l_low)) : kInf;
      double e_lse = e_w + e_log_l + m.log_rel * (fabs(lse - mx) + e_w + e_log_l) + m.floor_s;
      if (m.base2) e_lse += (m.us + m.delta_ln2) * (fabs(lse) + e_lse);
      if (lane == 0) {
        m.e_lse[ol] = e_lse;
        fin[tp] = OFinish{
            exp(eps), acc0, l_dev, l_low, chain_scale(closed_kappa_max(m.pv, shp[1])), chain_floors(m.pv, shp[1])};
      }
    }
    __syncwarp();
    // o's sums over the keys (o_sums), lanes owning columns c = lane + 32 e, v in tiles (every warp of
    // the block takes part: the barriers); then o_finish. One precision: one sweep over v. A set: two,
    // one for o's W sums and one for its accumulator's, each precision's side by side (a lane could not
    // hold all of them at once).
    double oc[Cols], ec[Cols], R_max[Cols];
#pragma unroll
    for (int e = 0; e < Cols; ++e) {
      const int c = lane + 32 * e;
      R_max[e] = 0;
      oc[e] = live && c < dv ? ms.o[oo + c] : 0.0, ec[e] = live && c < dv ? ms.err_o[oo + c] : 0.0;
    }
    // body(t0, a0, a1) for each tile of v: its keys [a0, a1) that this warp's row sees.
    auto sweep = [&](auto&& body) {
      for (int64_t t0 = lo; t0 < hi; t0 += kTile) {
        const int cnt = int(hi - t0 < kTile ? hi - t0 : kTile);
        load_tile(tile, vb + t0 * dv, cnt, dv);
        __syncthreads();
        body(t0, jb > t0 ? jb : t0, je < t0 + cnt ? je : t0 + cnt);  // (no keys unless live)
        __syncthreads();
      }
    };
    // A precision's coefficient of key t0 + lane (lane l holds key t0 + l's; the loops below take them
    // by shuffle, their bounds being the warp's row's, not by a dependent load per key).
    auto coef = [&](const double* C, int64_t t0, int64_t a0, int64_t a1) {
      const int64_t jl = t0 + lane;
      return jl >= a0 && jl < a1 ? C[jl - jb] : 0.0;
    };
    // o's error from its sums (o_finish), into each precision's e_o.
    auto finish = [&](int tp, int e, double w_sum, double e_acc) {
      const ModelDev& m = S.m[tp];
      const OFinish f = fin[tp];
      const int c = lane + 32 * e;
      const double ao = fabs(oc[e]), g_norm = gamma_n(m.o_normalise, m.us);
      const double W = fmin(times(f.exp_eps, w_sum), 2 * R_max[e]);
      const double E_acc = (e_acc + f.acc0) * f.sc_pv + f.fl_pv;
      double err = f.l_low > 0 ? W + (E_acc + f.l_dev * (ao + W)) / f.l_low : kInf;
      if (!m.p_normalised) err += g_norm * (ao + err);
      err += m.ftz ? m.floor_s : 0.0;
      m.e_o[oo + c] = err;
    };
    if constexpr (Tiles == 1) {
      double w_sum[Cols], e_acc[Cols];
#pragma unroll
      for (int e = 0; e < Cols; ++e) w_sum[e] = e_acc[e] = 0;
      const double *Cw = F + kCoef * n_k, *Ca = Cw + n_k;
      sweep([&](int64_t t0, int64_t a0, int64_t a1) {
        const double cw_l = coef(Cw, t0, a0, a1), ca_l = coef(Ca, t0, a0, a1);
        for (int64_t ja = a0; ja < a1; ++ja) {
          const double cw = __shfl_sync(0xffffffffu, cw_l, int(ja - t0)),
                       ca = __shfl_sync(0xffffffffu, ca_l, int(ja - t0));
          const double* v = tile + (ja - t0) * (dv + 1);
#pragma unroll
          for (int e = 0; e < Cols; ++e) {
            const int c = lane + 32 * e;
            if (c >= dv) break;
            const double y = fabs(v[c] - oc[e]) + ec[e];
            R_max[e] = fmax(R_max[e], y);
            w_sum[e] += times(cw, y);
            e_acc[e] += ca * fabs(v[c]);
          }
        }
      });
      if (!live) continue;
#pragma unroll
      for (int e = 0; e < Cols; ++e)
        if (lane + 32 * e < dv) finish(0, e, w_sum[e], e_acc[e]);
    } else {
      // W's sums (and R's maxima), held back in e_o until the accumulator's sums are in.
      double sum[Tiles][Cols];
      // One sweep over v for every precision: coefficient `field` of each (0: W's, 1: the
      // accumulator's), taken by shuffle key after key, and add(e, v_c, coefs) for each column.
      auto set_sweep = [&](int field, auto&& add) {
#pragma unroll
        for (int tp = 0; tp < Tiles; ++tp)
#pragma unroll
          for (int e = 0; e < Cols; ++e) sum[tp][e] = 0;
        sweep([&](int64_t t0, int64_t a0, int64_t a1) {
          double c_l[Tiles];
#pragma unroll
          for (int tp = 0; tp < Tiles; ++tp)
            c_l[tp] = tp < nt ? coef(F + (kCoef + 2 * tp + field) * n_k, t0, a0, a1) : 0.0;
          for (int64_t ja = a0; ja < a1; ++ja) {
            const double* v = tile + (ja - t0) * (dv + 1);
            double cf[Tiles];
#pragma unroll
            for (int tp = 0; tp < Tiles; ++tp) cf[tp] = __shfl_sync(0xffffffffu, c_l[tp], int(ja - t0));
#pragma unroll
            for (int e = 0; e < Cols; ++e) {
              const int c = lane + 32 * e;
              if (c >= dv) break;
              add(e, v[c], cf);
            }
          }
        });
      };
      set_sweep(0, [&](int e, double vc, const double* cw) {
        const double y = fabs(vc - oc[e]) + ec[e];
        R_max[e] = fmax(R_max[e], y);
#pragma unroll
        for (int tp = 0; tp < Tiles; ++tp)
          if (tp < nt) sum[tp][e] += times(cw[tp], y);
      });
      if (live) {
#pragma unroll
        for (int tp = 0; tp < Tiles; ++tp)
#pragma unroll
          for (int e = 0; e < Cols; ++e)
            if (tp < nt && lane + 32 * e < dv) S.m[tp].e_o[oo + lane + 32 * e] = sum[tp][e];
      }
      set_sweep(1, [&](int e, double vc, const double* ca) {
        const double av = fabs(vc);
#pragma unroll
        for (int tp = 0; tp < Tiles; ++tp)
          if (tp < nt) sum[tp][e] += ca[tp] * av;
      });
      if (!live) continue;
#pragma unroll
      for (int tp = 0; tp < Tiles; ++tp)
#pragma unroll
        for (int e = 0; e < Cols; ++e)
          if (tp < nt && lane + 32 * e < dv) finish(tp, e, S.m[tp].e_o[oo + lane + 32 * e], sum[tp][e]);
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// kWarps rows of one head per block, k and v in shared tiles: each tile's pairs (lanes own keys), once
// for the set, then each precision's d_q terms and its chain sum over them (lanes own columns).
// Tiles: the most precisions a launch takes (their sums are held in registers side by side).
//
// A row's constants for one precision of the set (kept in shared memory: one warp's, read by all its lanes).
struct RowPrec {
  double e_D, e_lse;
  int64_t o_dq;    // the row's first key's place in d_q's chain
  ClosedShape dq;  // the chain at the row's length
};
template <int Cols, int Tiles>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) backward_rows(const __grid_constant__ ModelSet S) {
  extern __shared__ double sm[];
  const ModelDev& ms = S.m[0];  // the set's shared part: the scores, dP and D
  const Problem& p = ms.p;
  const int lane = threadIdx.x % 32, wib = threadIdx.x / 32;
  const int d = int(p.d), dv = int(ms.dv), nt = Tiles == 1 ? 1 : S.n;
  double* kap_s = sm;                        // (d) the scores' chain weights
  double* kap_dp = kap_s + d;                // (d_v) dP's
  double* q = kap_dp + dv + wib * (d + dv);  // (d) this warp's q, then (d_v) its d_o
  double* dO = q + d;
  double* kt = kap_dp + dv + kWarps * (d + dv);  // (kTile, d + 1)
  double* vt = kt + kTile * (d + 1);             // (kTile, d_v + 1)
  // The tensor cores' three sums of each pair's score, then of its dP, warp by warp (kTile, 3): in the
  // warp's alpha_j, free until the pair's terms are written, where it holds them (the shared memory of
  // two blocks a multiprocessor has no room for more), else on their own.
  constexpr bool in_alpha = Tiles * kTile >= kTile * 3;
  double* dots = vt + kTile * (dv + 1);
  double* alpha_base = dots + (in_alpha ? 0 : kWarps * kTile * 3);
  double* alpha = alpha_base + wib * 2 * Tiles * kTile;  // (Tiles, kTile) this warp's alpha_j
  double* alpha0 = alpha + Tiles * kTile;                // (Tiles, 32) each lane's share of alpha_0
  RowPrec* rp = reinterpret_cast<RowPrec*>(alpha_base + kWarps * 2 * Tiles * kTile) + wib * Tiles;
  const int dots_r = in_alpha ? 2 * Tiles * kTile : kTile * 3;  // between two warps' sums
  const double* my_dots = dots + wib * dots_r + lane * 3;
  DotChain ws = ms.w_s, wdp = ms.w_dp;
  ws.kappa = kap_s, wdp.kappa = kap_dp;
  load_vec(kap_s, ms.w_s.kappa, d);
  load_vec(kap_dp, ms.w_dp.kappa, dv);
  const int64_t n_k = p.n_k;
  const int64_t n_groups = groups_of(int64_t(p.batch) * p.heads_q, p.n_q);
  for (int64_t x = blockIdx.x; x < n_groups; x += gridDim.x) {
    const Group gr = group_at(x, p.n_q);
    const int64_t b = gr.head / p.heads_q, h = gr.head % p.heads_q, g = h / ms.group, kvh = b * p.heads_kv + g;
    const int64_t i = gr.first + wib, r = gr.head * p.n_q + i;
    const bool live = wib < gr.count && ms.live[r];
    const KeyRange vis = live ? visible_keys(p, i, p.n_q, n_k) : KeyRange{};
    const int64_t jb = vis.begin, je = vis.end, n_v = je - jb;
    int64_t lo = n_k, hi = 0;
    for (int t = 0; t < gr.count; ++t) {
      const KeyRange kr = visible_keys(p, gr.first + t, p.n_q, n_k);
      if (kr.end > kr.begin) lo = kr.begin < lo ? kr.begin : lo, hi = kr.end > hi ? kr.end : hi;
    }
    const int64_t oq = live ? offset_q(p, b, h, i) : 0, oo = r * ms.dv;
    __syncthreads();  // the previous group's tiles and rows are done with
    for (int c = lane; c < d; c += 32) q[c] = live ? ms.q[oq + c] : 0.0;
    for (int c = lane; c < dv; c += 32) dO[c] = live ? ms.d_o[oo + c] : 0.0;
    __syncwarp();
    // D = d_o . o along its chain, from the kernel's own o (within each precision's finished bound of o).
    Row row{};  // e_D and e_lse: each precision's, in rp
    double sum_do = 0, q_abs = 0;
    if (live) {
      double D = 0, weighted = 0, plain = 0, sum_o = 0, err_D64 = 0;
      for (int c = lane; c < dv; c += 32) {
        const double o = ms.o[oo + c], ad = fabs(dO[c]), kp = ms.w_D.kappa[c];
        D += dO[c] * o;
        weighted += kp * ad * fabs(o), plain += ad * fabs(o);
        sum_do += ad, sum_o += fabs(o);
        err_D64 += ad * ms.err_o[oo + c];
      }
      for (int c = lane; c < d; c += 32) q_abs += fabs(q[c]);
      D = warp_sum(D), weighted = warp_sum(weighted), plain = warp_sum(plain);
      sum_do = warp_sum(sum_do), sum_o = warp_sum(sum_o), err_D64 = warp_sum(err_D64), q_abs = warp_sum(q_abs);
      row.D = D;
      row.err_D64 = err_D64 + double(dv + 1) * 0x1p-53 * plain;
      row.lse = ms.lse[r], row.err_lse = ms.err_lse[r];
#pragma unroll 1
      for (int tp = 0; tp < nt; ++tp) {
        const ModelDev& m = S.m[tp];
        double from_o = 0;
        for (int c = lane; c < dv; c += 32) from_o += (1 + m.w_D.kappa[c]) * fabs(dO[c]) * m.b_o[oo + c];
        from_o = warp_sum(from_o);
        const double e_D = dot_error(m, m.w_D, weighted, plain, sum_do, sum_o, dv) + from_o * m.w_D.scale;
        if (lane == 0) {
          const int64_t o_dq = key_offset(m.dq, jb);
          rp[tp] = RowPrec{e_D, m.b_lse[r], o_dq, closed_shape(m.dq, o_dq + n_v, 0)};
          double* st = m.row_stat + r * kRowStat;
          st[kD] = row.D, st[kED] = e_D, st[kErrD64] = row.err_D64, st[kSumDo] = sum_do, st[kQAbs] = q_abs;
        }
      }
    }
    __syncwarp();
    double E[Tiles][Cols];
#pragma unroll
    for (int tp = 0; tp < Tiles; ++tp) {
      alpha0[tp * 32 + lane] = 0;
#pragma unroll
      for (int e = 0; e < Cols; ++e) E[tp][e] = 0;
    }
    for (int64_t t0 = lo; t0 < hi; t0 += kTile) {
      const int cnt = int(hi - t0 < kTile ? hi - t0 : kTile);
      load_tile(kt, ms.k + (kvh * n_k + t0) * d, cnt, d);
      load_tile(vt, ms.v + (kvh * n_k + t0) * dv, cnt, dv);
      __syncthreads();
      const int64_t a0 = jb > t0 ? jb : t0, a1 = je < t0 + cnt ? je : t0 + cnt;
      const int64_t ja = t0 + lane;
      const bool mine = ja >= a0 && ja < a1;
      // The scores, then dP: on the tensor cores every warp's q, then d_o (rows d + d_v apart), against
      // the tile's k, then v, each round's sums read before the next overwrites them.
      const double* q0 = kap_dp + dv;
      Sc s{};
      DP dp{};
      if (ms.mma) {
        tile_dots<3>(q0, d + dv, kWarps, kt, d + 1, cnt, d, kap_s, dots, dots_r, 3);
        __syncthreads();
      }
      if (mine)
        s = score(ms, ws, q, kt + lane * (d + 1), q_abs, ms.k_abs_sum[kvh * n_k + ja], ms.mma ? my_dots : nullptr);
      if (ms.mma) {
        __syncthreads();
        tile_dots<3>(q0 + d, d + dv, kWarps, vt, dv + 1, cnt, dv, kap_dp, dots, dots_r, 3);
        __syncthreads();
      }
      if (mine)
        dp = d_p(ms, wdp, dO, vt + lane * (dv + 1), sum_do, ms.v_abs_sum[kvh * n_k + ja], ms.mma ? my_dots : nullptr);
      __syncwarp();  // (every lane's sums read before alpha_j, the same memory, is written)
      if (a1 > a0) {
        PairP pp{};
        if (mine) pp = pair_p(d, dv, s, dp, row);
#pragma unroll 1
        for (int tp = 0; tp < nt; ++tp) {
          double al = 0;
          if (mine) {
            const ModelDev& m = S.m[tp];
            Row rw = row;
            rw.e_D = rp[tp].e_D, rw.e_lse = rp[tp].e_lse;
            const PairBound pr = backward_pair(m, s, dp, rw, pp);
            const double e_ds = pr.e_ds + m.u_p * pr.ds_bar + m.floor_ds + pr.ds_bar * m.u_in;
            const double kq = closed_kappa_at(m.dq, rp[tp].dq, rp[tp].o_dq + ja - jb);
            al = kq * pr.ds_hi + (1 + kq) * e_ds;
            alpha0[tp * 32 + lane] += (1 + kq) * pr.ds_bar * m.floor_in;
          }
          alpha[tp * kTile + lane] = al;
        }
        __syncwarp();
        // d_q's chain sums: sum_j alpha_j |k_jc| for each precision, lanes owning columns.
        for (int64_t ja2 = a0; ja2 < a1; ++ja2) {
          const double* kr = kt + (ja2 - t0) * (d + 1);
#pragma unroll
          for (int e = 0; e < Cols; ++e) {
            const int c = lane + 32 * e;
            if (c >= d) break;
            const double ak = fabs(kr[c]);
#pragma unroll
            for (int tp = 0; tp < Tiles; ++tp) {
              if (tp >= nt) break;
              E[tp][e] += alpha[tp * kTile + ja2 - t0] * ak;
            }
          }
        }
      }
      __syncthreads();
    }
    if (!live) continue;
#pragma unroll
    for (int tp = 0; tp < Tiles; ++tp) {
      if (tp >= nt) break;
      const ModelDev& m = S.m[tp];
      const double a0s = warp_sum(alpha0[tp * 32 + lane]);
      const double dq_scale = chain_scale(closed_kappa_max(m.dq, rp[tp].dq));
#pragma unroll
      for (int e = 0; e < Cols; ++e) {
        const int c = lane + 32 * e;
        if (c >= d) break;
        m.dq_chain[oq + c] = (E[tp][e] + a0s) * dq_scale;
      }
      if (lane == 0) m.dq_floor[r] = chain_floors(m.dq, rp[tp].dq);
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// kWarps keys of one kv head per block; the rows of the group that see them in shared tiles of kTile
// (q, d_o and each row's constants): each tile's pairs (lanes own rows), once for the set, then each
// precision's d_k and d_v terms and their chain sums over them (lanes own columns). Parts: kDk, kDv or
// both, the gradients a launch sums (a whole set's d_k and d_v sums would not stay in registers
// together; d_v's terms need no dP).
enum TileStat { kTD = 0, kTErrD64, kTSumDo, kTQAbs, kTLse, kTErrLse, kTileStats };
enum KeyParts { kDk = 1, kDv = 2 };
template <int Cols, int Tiles, int Parts>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) backward_keys(const __grid_constant__ ModelSet S) {
  constexpr bool want_k = Parts & kDk, want_v = Parts & kDv;
  constexpr int n_parts = int(want_k) + int(want_v), slot_k = 0, slot_v = n_parts - 1;  // beta's slots
  extern __shared__ double sm[];
  const ModelDev& ms = S.m[0];  // the set's shared part
  const Problem& p = ms.p;
  const int lane = threadIdx.x % 32, wib = threadIdx.x / 32;
  const int d = int(p.d), dv = int(ms.dv), nt = Tiles == 1 ? 1 : S.n;
  double* kap_s = sm;                         // (d)
  double* kap_dp = kap_s + d;                 // (d_v)
  double* kr = kap_dp + dv + wib * (d + dv);  // (d) this warp's k, then (d_v) its v
  double* vr = kr + d;
  double* qt = kap_dp + dv + kWarps * (d + dv);  // (kTile, d + 1)
  double* dt = qt + kTile * (d + 1);             // (kTile, d_v + 1)
  double* st = dt + kTile * (dv + 1);            // (kTile, kTileStats)
  double* sp = st + kTile * kTileStats;          // (kTile, Tiles, 2): each precision's e_D, e_lse
  // The tensor cores' three sums of each pair's score, then of its dP, key (warp) by key (kTile, 3): in
  // the warp's beta_i, free until the pair's terms are written, where it holds them, else on their own
  // (backward_rows' alpha_j).
  constexpr bool in_beta = Tiles * n_parts * kTile >= kTile * 3;
  double* dots = sp + kTile * Tiles * 2;
  double* beta_base = dots + (in_beta ? 0 : kWarps * kTile * 3);
  // (Tiles, n_parts, kTile) this warp's beta_i (d_k's, d_v's), then (Tiles, n_parts, 32) each lane's
  // share of beta_0.
  double* beta = beta_base + wib * Tiles * n_parts * 2 * kTile;
  double* beta0 = beta + Tiles * n_parts * kTile;
  const int dots_c = in_beta ? Tiles * n_parts * 2 * kTile : kTile * 3;  // between two keys' sums
  const double* my_dots = dots + wib * dots_c + lane * 3;
  DotChain ws = ms.w_s, wdp = ms.w_dp;
  ws.kappa = kap_s, wdp.kappa = kap_dp;
  load_vec(kap_s, ms.w_s.kappa, d);
  load_vec(kap_dp, ms.w_dp.kappa, dv);
  const int64_t n_k = p.n_k;
  const int64_t n_groups = groups_of(int64_t(p.batch) * p.heads_kv, n_k);
  for (int64_t x = blockIdx.x; x < n_groups; x += gridDim.x) {
    const Group gr = group_at(x, n_k);
    const int64_t kvh = gr.head, b = kvh / p.heads_kv, g = kvh % p.heads_kv;
    const int64_t j = gr.first + wib, key = kvh * n_k + j;
    const bool has_key = wib < gr.count;
    // The rows of the group that see key j (kv_rows): rows [i0, i1) of every head, head-major.
    const int64_t i0 = has_key ? ms.kv_i0[j] : 0, i1 = has_key ? ms.kv_i1[j] : 0;
    const int64_t per_head = i1 > i0 ? i1 - i0 : 0, n = ms.group * per_head;
    const int64_t steps_per_head = per_head > 0 ? (i1 - 1) / kTensorCoreFused - i0 / kTensorCoreFused + 1 : 0;
    const int64_t n_steps = ms.group * steps_per_head;
    int64_t lo = p.n_q, hi = 0;  // the rows any key of the block is seen by
    for (int t = 0; t < gr.count; ++t) {
      const int64_t a = ms.kv_i0[gr.first + t], e = ms.kv_i1[gr.first + t];
      if (e > a) lo = a < lo ? a : lo, hi = e > hi ? e : hi;
    }
    __syncthreads();  // the previous group's tiles and keys are done with
    for (int c = lane; c < d; c += 32) kr[c] = has_key ? ms.k[key * d + c] : 0.0;
    for (int c = lane; c < dv; c += 32) vr[c] = has_key ? ms.v[key * dv + c] : 0.0;
    __syncwarp();
    const double k_abs = has_key ? ms.k_abs_sum[key] : 0.0, v_abs = has_key ? ms.v_abs_sum[key] : 0.0;
    double Ek[Tiles][Cols], Ev[Tiles][Cols];
#pragma unroll
    for (int tp = 0; tp < Tiles; ++tp) {
#pragma unroll
      for (int slot = 0; slot < n_parts; ++slot) beta0[(tp * n_parts + slot) * 32 + lane] = 0;
#pragma unroll
      for (int e = 0; e < Cols; ++e) Ek[tp][e] = Ev[tp][e] = 0;
    }
    for (int64_t hl = 0; hl < ms.group; ++hl) {
      const int64_t h = g * ms.group + hl, r_base = (b * p.heads_q + h) * p.n_q;
      for (int64_t t0 = lo; t0 < hi; t0 += kTile) {
        const int cnt = int(hi - t0 < kTile ? hi - t0 : kTile);
        load_tile(qt, ms.q + (r_base + t0) * d, cnt, d);
        load_tile(dt, ms.d_o + (r_base + t0) * dv, cnt, dv);
        for (int t = threadIdx.x; t < cnt; t += kThreads) {
          const int64_t r = r_base + t0 + t;
          const double* rs = ms.row_stat + r * kRowStat;
          double* o = st + t * kTileStats;
          o[kTD] = rs[kD], o[kTErrD64] = rs[kErrD64], o[kTSumDo] = rs[kSumDo];
          o[kTQAbs] = rs[kQAbs], o[kTLse] = ms.lse[r], o[kTErrLse] = ms.err_lse[r];
#pragma unroll
          for (int tp = 0; tp < Tiles; ++tp) {
            if (tp >= nt) break;
            sp[(t * Tiles + tp) * 2] = S.m[tp].row_stat[r * kRowStat + kED];
            sp[(t * Tiles + tp) * 2 + 1] = S.m[tp].b_lse[r];
          }
        }
        __syncthreads();
        const int64_t a0 = i0 > t0 ? i0 : t0, a1 = i1 < t0 + cnt ? i1 : t0 + cnt;
        const int64_t i = t0 + lane;
        const bool mine = i >= a0 && i < a1;
        // The scores, then dP (d_k's terms only): on the tensor cores the tile's q, then d_o rows
        // against every warp's k, then v (rows d + d_v apart), each round's sums read before the next
        // overwrites them.
        const double* k0 = kap_dp + dv;
        Sc s{};
        DP dp{};
        if (ms.mma) {
          tile_dots<3>(qt, d + 1, cnt, k0, d + dv, kWarps, d, kap_s, dots, 3, dots_c);
          __syncthreads();
        }
        if (mine)
          s = score(ms, ws, qt + lane * (d + 1), kr, st[lane * kTileStats + kTQAbs], k_abs, ms.mma ? my_dots : nullptr);
        if constexpr (want_k) {
          if (ms.mma) {
            __syncthreads();
            tile_dots<3>(dt, dv + 1, cnt, k0 + d, d + dv, kWarps, dv, kap_dp, dots, 3, dots_c);
            __syncthreads();
          }
          if (mine)
            dp = d_p(ms, wdp, dt + lane * (dv + 1), vr, st[lane * kTileStats + kTSumDo], v_abs,
                     ms.mma ? my_dots : nullptr);
        }
        __syncwarp();  // (every lane's sums read before beta_i, the same memory, is written)
        if (a1 > a0) {
          Row row{};
          PairP pp{};
          int64_t step = 0;
          if (mine) {
            const double* o = st + lane * kTileStats;
            row.D = o[kTD], row.err_D64 = o[kTErrD64], row.lse = o[kTLse], row.err_lse = o[kTErrLse];
            pp = pair_p(d, dv, s, dp, row);
            step = hl * steps_per_head + i / kTensorCoreFused - i0 / kTensorCoreFused;
          }
#pragma unroll 1
          for (int tp = 0; tp < nt; ++tp) {
            double bk = 0, bv = 0;
            if (mine) {
              const ModelDev& m = S.m[tp];
              row.e_D = sp[(lane * Tiles + tp) * 2], row.e_lse = sp[(lane * Tiles + tp) * 2 + 1];
              const PairBound pr = backward_pair(m, s, dp, row, pp);  // (dS's terms unused without kDk)
              const double kk = m.dkv_plain ? plain_kappa(m.dkv, hl * per_head + i - i0, n, step, n_steps)
                                            : closed_kappa_at(m.dkv, m.dkv_shape, hl * m.n_q16 + i);
              if constexpr (want_k) {
                const double e_ds = pr.e_ds + m.u_p * pr.ds_bar + m.floor_ds + pr.ds_bar * m.u_in;
                bk = kk * pr.ds_hi + (1 + kk) * e_ds;
                beta0[(tp * n_parts + slot_k) * 32 + lane] += (1 + kk) * pr.ds_bar * m.floor_in;
              }
              if constexpr (want_v) {
                const double e_p = pr.dP_w + m.u_p * pr.P_bar + m.floor_p + pr.P_bar * m.u_in;
                bv = kk * pr.P_hi + (1 + kk) * e_p;
                beta0[(tp * n_parts + slot_v) * 32 + lane] += (1 + kk) * pr.P_bar * m.floor_in;
              }
            }
            if constexpr (want_k) beta[(tp * n_parts + slot_k) * kTile + lane] = bk;
            if constexpr (want_v) beta[(tp * n_parts + slot_v) * kTile + lane] = bv;
          }
          __syncwarp();
          // The tile's rows one after another: sum_i beta_i |q_ic|, |d_o_ic| for each precision, lanes
          // owning columns.
          for (int64_t i2 = a0; i2 < a1; ++i2) {
            const int src = int(i2 - t0);
            const double *qa = qt + src * (d + 1), *da = dt + src * (dv + 1);
#pragma unroll
            for (int e = 0; e < Cols; ++e) {
              const int c = lane + 32 * e;
              const double aq = want_k && c < d ? fabs(qa[c]) : 0.0, ad = want_v && c < dv ? fabs(da[c]) : 0.0;
#pragma unroll
              for (int tp = 0; tp < Tiles; ++tp) {
                if (tp >= nt) break;
                if (want_k && c < d) Ek[tp][e] += beta[(tp * n_parts + slot_k) * kTile + src] * aq;
                if (want_v && c < dv) Ev[tp][e] += beta[(tp * n_parts + slot_v) * kTile + src] * ad;
              }
            }
          }
        }
        __syncthreads();
      }
    }
    if (!has_key) continue;
#pragma unroll
    for (int tp = 0; tp < Tiles; ++tp) {
      if (tp >= nt) break;
      const ModelDev& m = S.m[tp];
      const double bk0 = want_k ? warp_sum(beta0[(tp * n_parts + slot_k) * 32 + lane]) : 0.0;
      const double bv0 = want_v ? warp_sum(beta0[(tp * n_parts + slot_v) * 32 + lane]) : 0.0;
      double km, events;
      if (m.dkv_plain) {
        km = n > 0 ? plain_kappa(m.dkv, 0, n, 0, n_steps) : 0.0;
        events = double(n) * 3 + double(n_steps);
      } else {
        km = closed_kappa_max(m.dkv, m.dkv_shape);
        events = closed_events(m.dkv, m.dkv_shape);
      }
      const double sc_j = chain_scale(km);
#pragma unroll
      for (int e = 0; e < Cols; ++e) {
        const int c = lane + 32 * e;
        if (want_k && c < d) m.dk_chain[key * d + c] = (Ek[tp][e] + bk0) * sc_j;
        if (want_v && c < dv) m.dv_chain[key * dv + c] = (Ev[tp][e] + bv0) * sc_j;
      }
      if (lane == 0) m.kv_floor[key] = grown_floors(events * m.dkv.floor, km);
    }
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("GPU error model: ") + what + ": " + cudaGetErrorString(e));
}

// Shared memory of each kernel (doubles): the chain weights, each warp's row (or key), the tiles; the
// backward passes' per-precision terms for `tiles` precisions.
size_t forward_smem(const ModelDev& m, int tiles) {
  const int64_t d = m.p.d, width = d > m.dv ? d : m.dv;
  return size_t(d + kWarps * d + kTile * (width + 1) + kWarps * kTile * 3) * sizeof(double) +
         size_t(kWarps * tiles) * sizeof(OFinish) +
         size_t(kWarps * 2) * sizeof(ClosedShape);
}
size_t backward_rows_smem(const ModelDev& m, int tiles) {
  const int64_t d = m.p.d, dv = m.dv;
  const int64_t dots = tiles * kTile >= kTile * 3 ? 0 : kWarps * kTile * 3;  // backward_rows' in_alpha
  return size_t(d + dv + kWarps * (d + dv) + kTile * (d + 1) + kTile * (dv + 1) + dots + kWarps * 2 * tiles * kTile) *
             sizeof(double) +
         size_t(kWarps * tiles) * sizeof(RowPrec);
}
size_t backward_keys_smem(const ModelDev& m, int tiles, int parts) {
  const int64_t d = m.p.d, dv = m.dv;
  const int64_t dots = tiles * parts * kTile >= kTile * 3 ? 0 : kWarps * kTile * 3;  // backward_keys' in_beta
  return size_t(d + dv + kWarps * (d + dv) + kTile * (d + 1) + kTile * (dv + 1) + kTile * kTileStats +
                kTile * tiles * 2 + dots + kWarps * tiles * parts * 2 * kTile) *
         sizeof(double);
}

// Launches kernel on `blocks` blocks with `smem` bytes of dynamic shared memory (past the default 48 KiB
// by the kernel's attribute), then waits for it.
template <class Kernel>
void run_kernel(Kernel kernel, int64_t blocks, size_t smem, const ModelSet& s, const char* what) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)), what);
  kernel<<<unsigned(blocks), kThreads, smem>>>(s);
  check(cudaGetLastError(), what);
  check(cudaDeviceSynchronize(), what);
}

int64_t device_blocks() {
  int dev = 0, sms = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "device attribute");
  return int64_t(sms) * kBlocksPerSm;
}

// The kernels for the columns a lane owns: 4 where d and d_v are at most 128, else kMaxCols (fewer
// registers held, two blocks a multiprocessor). Only the narrow backward passes take a whole set: at
// kMaxCols the sums of five precisions would not stay in registers.
bool narrow(const ModelDev& m) { return m.p.d <= 128 && m.dv <= 128; }

void check_set(const ModelSet& s) {
  if (s.n < 1 || s.n > max_shared(s.m[0]))
    throw std::logic_error("GPU error model: a set of " + std::to_string(s.n) + " precisions");
}

}  // namespace

int64_t forward_blocks(const ModelDev& m, int64_t fit_warps) {
  const int64_t groups = groups_of(int64_t(m.p.batch) * m.p.heads_q, m.p.n_q);
  return std::min({groups, device_blocks(), fit_warps / kWarps});
}
int64_t warps_per_block() { return kWarps; }
int max_shared(const ModelDev& m) { return narrow(m) ? kMaxShared : 1; }

void launch_forward(const ModelSet& s) {
  check_set(s);
  const ModelDev& m = s.m[0];
  const int64_t blocks = m.scratch_warps / kWarps;
  if (!narrow(m))
    run_kernel(forward_rows<kMaxCols, 1>, blocks, forward_smem(m, 1), s, "forward");
  else if (s.n == 1)
    run_kernel(forward_rows<4, 1>, blocks, forward_smem(m, 1), s, "forward");
  else
    run_kernel(forward_rows<4, kMaxShared>, blocks, forward_smem(m, kMaxShared), s, "forward");
}

void launch_backward_rows(const ModelSet& s) {
  check_set(s);
  const ModelDev& m = s.m[0];
  const int64_t blocks = std::min(groups_of(int64_t(m.p.batch) * m.p.heads_q, m.p.n_q), device_blocks());
  if (!narrow(m))
    run_kernel(backward_rows<kMaxCols, 1>, blocks, backward_rows_smem(m, 1), s, "backward rows");
  else if (s.n == 1)
    run_kernel(backward_rows<4, 1>, blocks, backward_rows_smem(m, 1), s, "backward rows");
  else
    run_kernel(backward_rows<4, kMaxShared>, blocks, backward_rows_smem(m, kMaxShared), s, "backward rows");
}

void launch_backward_keys(const ModelSet& s) {
  check_set(s);
  const ModelDev& m = s.m[0];
  const int64_t blocks = std::min(groups_of(int64_t(m.p.batch) * m.p.heads_kv, m.p.n_k), device_blocks());
  if (!narrow(m)) {
    run_kernel(backward_keys<kMaxCols, 1, kDk | kDv>, blocks, backward_keys_smem(m, 1, 2), s, "backward keys");
  } else if (s.n == 1) {
    run_kernel(backward_keys<4, 1, kDk | kDv>, blocks, backward_keys_smem(m, 1, 2), s, "backward keys");
  } else {
    const size_t smem = backward_keys_smem(m, kMaxShared, 1);
    run_kernel(backward_keys<4, kMaxShared, kDk>, blocks, smem, s, "backward keys (d_k)");
    run_kernel(backward_keys<4, kMaxShared, kDv>, blocks, smem, s, "backward keys (d_v)");
  }
}

// ---------------------------------------------------------------------------------------------------
// The last steps of each element: the CPU model's expressions (bounds.cpp's finish_dq and finish_kv,
// rounded_bound), in the same order, so the same bits (--fmad=false here, -ffp-contract=off for fc_bounds on the host).
namespace {
__device__ inline double nan_max(double a, double b) {
  return (a != a || b != b) ? __longlong_as_double(0x7ff8000000000000LL) : (a < b ? b : a);
}
__device__ inline void fold_into(double* into, int64_t x, double b, bool first) {
  into[x] = first ? b : nan_max(into[x], b);
}

// (The model takes dense problems only, bounds_gpu.cpp: rows_q and rows_kv are batch · heads · n.)
__global__ void finish_o(const ModelDev m, const Finish f, double* o_max, double* lse_max, bool first) {
  const int64_t rows = rows_q(m.p), dv = m.dv, n = rows * dv;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n + rows; x += int64_t(gridDim.x) * blockDim.x) {
    if (x < n) {
      const double err = m.err_o[x];
      const double b = m.live[x / dv] ? rounded_bound(m.o[x], m.e_o[x], err, f.soft, f.o, true) * f.slack : err;
      m.e_o[x] = b;
      fold_into(o_max, x, b, first);
    } else {
      const int64_t r = x - n;
      const double err = m.err_lse[r];
      const double b = m.live[r] ? rounded_bound(m.lse[r], m.e_lse[r], err, f.soft, f.lse, true) * f.slack : err;
      m.e_lse[r] = b;
      fold_into(lse_max, r, b, first);
    }
  }
}

__global__ void finish_grads(const ModelDev m, const GradRef g, const GradConsts k, double* E_dq, double* E_dk,
                             double* E_dv, bool fresh) {
  const Problem& p = m.p;
  const int64_t rows = rows_q(p), keys = rows_kv(p);
  const int64_t d = p.d, dv = m.dv, nq = rows * d, nk = keys * d, nv = keys * dv;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < nq + nk + nv;
       x += int64_t(gridDim.x) * blockDim.x) {
    if (x < nq) {  // finish_dq
      const double dq = g.dq[x], err = g.err_dq[x];
      fold_into(E_dq, x,
                k.scale * (1 + k.dlt) * m.dq_chain[x] + k.floor_scale * (1 + k.dlt) * m.dq_floor[x / d] +
                    times(k.dlt, fabs(dq) + err) + k.floor,
                fresh);
    } else if (x < nq + nk) {  // finish_kv (no per-head stage: phi = 0)
      const int64_t y = x - nq;
      const double dk = g.dk[y], ek = g.err_dk[y];
      fold_into(E_dk, y,
                k.scale * (1 + k.dlt) * m.dk_chain[y] + k.floor_scale * (1 + k.dlt) * m.kv_floor[y / d] +
                    times(k.dlt, fabs(dk) + ek) + k.floor,
                fresh);
    } else {
      const int64_t z = x - nq - nk;
      fold_into(E_dv, z, m.dv_chain[z] + m.kv_floor[z / dv] + k.floor, fresh);
    }
  }
}

__global__ void round_grads(const ModelDev m, const GradRef g, const Finish f, const double* E_dq, const double* E_dk,
                            const double* E_dv, double* b_dq, double* b_dk, double* b_dv, bool first) {
  const Problem& p = m.p;
  const int64_t rows = rows_q(p), keys = rows_kv(p);
  const int64_t d = p.d, nq = rows * d, nk = keys * d, nv = keys * m.dv;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < nq + nk + nv;
       x += int64_t(gridDim.x) * blockDim.x) {
    if (x < nq) {
      const double err = g.err_dq[x];
      fold_into(b_dq, x, m.live[x / d] ? rounded_bound(g.dq[x], E_dq[x], err, f.soft, f.q, true) * f.slack : err,
                first);
    } else if (x < nq + nk) {
      const int64_t y = x - nq;
      fold_into(b_dk, y, rounded_bound(g.dk[y], E_dk[y], g.err_dk[y], f.soft, f.kv, true) * f.slack, first);
    } else {
      const int64_t z = x - nq - nk;
      fold_into(b_dv, z, rounded_bound(g.dv[z], E_dv[z], g.err_dv[z], f.soft, f.kv, false) * f.slack, first);
    }
  }
}

// A grid of elementwise threads for n elements (grid-stride beyond it).
unsigned elementwise_blocks(int64_t n) {
  return unsigned(std::clamp<int64_t>((n + 255) / 256, 1, device_blocks() * 16));
}
void finish_check(const char* what) {
  check(cudaGetLastError(), what);
  check(cudaDeviceSynchronize(), what);
}
}  // namespace

void launch_finish_o(const ModelDev& m, const Finish& f, double* o_max, double* lse_max, bool first) {
  const int64_t rows = rows_q(m.p);
  finish_o<<<elementwise_blocks(rows * (m.dv + 1)), 256>>>(m, f, o_max, lse_max, first);
  finish_check("o's last rounding");
}
void launch_finish_grads(const ModelDev& m, const GradRef& g, const GradConsts& k, double* E_dq, double* E_dk,
                         double* E_dv, bool fresh) {
  const int64_t rows = rows_q(m.p), keys = rows_kv(m.p);
  finish_grads<<<elementwise_blocks(rows * m.p.d + keys * (m.p.d + m.dv)), 256>>>(m, g, k, E_dq, E_dk, E_dv, fresh);
  finish_check("the gradients' errors");
}
void launch_round_grads(const ModelDev& m, const GradRef& g, const Finish& f, const double* E_dq, const double* E_dk,
                        const double* E_dv, double* b_dq, double* b_dk, double* b_dv, bool first) {
  const int64_t rows = rows_q(m.p), keys = rows_kv(m.p);
  round_grads<<<elementwise_blocks(rows * m.p.d + keys * (m.p.d + m.dv)), 256>>>(m, g, f, E_dq, E_dk, E_dv, b_dq, b_dk,
                                                                                 b_dv, first);
  finish_check("the gradients' last rounding");
}

int64_t scratch_stride(const ModelSet& s) {
  int64_t tiles = 0;
  for (int t = 0; t < s.n; ++t) tiles = std::max(tiles, max_tiles(s.m[t]));
  return (kCoef + 2 * s.n) * s.m[0].p.n_k + kTileFields * tiles;
}

}  // namespace fc::ref::gpu
