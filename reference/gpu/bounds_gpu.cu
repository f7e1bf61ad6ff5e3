// The error model's O(n_q n_k d) work on the GPU (bounds_gpu.hpp): the same formulas as
// reference/bounds.cpp and bounds_backward.cpp, element for element, evaluated in float64 on the
// device. Only the order of the fp64 sums differs from the CPU's (GEMMs there, warp reductions and
// per-lane loops here); kSlack covers any order (docs/error-model.md, "The error model on the GPU").
//
// Three kernels, one warp per row or key, each warp looping over its rows (persistent warps):
//   forward_rows   a row's scores (into the warp's scratch), its key tiles, its weights' deviations,
//                  l's chain and o's coefficients (scratch), then o's sums over keys x d_v (lanes own
//                  columns) and lse's sums: o's and lse's error before their last rounding;
//   backward_rows  D from the finished bound of o, each pair's dP and dS terms (lanes own keys), then
//                  d_q's chain sum (lanes own columns) and the row's constants for the key pass;
//   backward_keys  each key's pairs over the group's rows that see it (lanes own rows), recomputed
//                  from those constants, then d_k's and d_v's chain sums (lanes own columns).
// Every bound's last rounding (rounded_bound) is applied on the host, with the CPU's own function.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "reference/gpu/bounds_gpu_dev.hpp"

namespace fc::ref::gpu {
namespace {

constexpr int kWarps = 8;  // warps per block
constexpr int kThreads = kWarps * 32;
constexpr int kMaxCols = 8;  // columns a lane owns: d, d_v <= 256
constexpr double kInf = __builtin_huge_val();
constexpr double kTcOwn = 2 + kTensorCoreFused + 1;  // bounds_chain.cpp
constexpr double kTcLater = 2 + kTensorCoreFused / 2.0;
enum ScratchField { kS = 0, kEh, kEc, kA, kY, kDow, kDl, kElp, kFields };
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
__device__ inline double chain_floors(const ClosedChain& c, int64_t n, int64_t extra) {
  return grown_floors(closed_events(c, n, extra) * c.floor, closed_kappa_max(c, n, extra));
}
// bounds_model.hpp's key_offset.
__device__ inline int64_t key_offset(const ClosedChain& c, int64_t jb) {
  if (c.block > 0) return jb % c.block;
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
__device__ inline Sc score(const ModelDev& m, const double* q, const double* kr, double q_abs_sum, double k_abs_sum) {
  const int d = int(m.p.d);
  const Dot x = dot(q, kr, m.w_s, d);
  const double scale = fabs(m.p.scale);
  Sc s;
  s.s = m.p.scale * x.xy, s.a = scale * x.abs;
  s.e_dot = scale * dot_error(m, m.w_s, x.weighted, x.abs, q_abs_sum, k_abs_sum, d);
  s.e_c = m.delta_c * (fabs(s.s) + s.e_dot);
  const double after = s.e_dot + s.e_c + m.us * (fabs(s.s) + s.e_dot + s.e_c);
  s.e_hat = after + m.u_store_s * (fabs(s.s) + after) + m.floor_store_s;
  return s;
}

// dP = d_o . v and its error (HeadPass::backward).
struct DP {
  double dp, mag, e_dp;
};
__device__ inline DP d_p(const ModelDev& m, const double* d_o, const double* v, double sum_do, double v_abs_sum) {
  const int dv = int(m.dv);
  const Dot x = dot(d_o, v, m.w_dp, dv);
  return {x.xy, x.abs, dot_error(m, m.w_dp, x.weighted, x.abs, sum_do, v_abs_sum, dv)};
}

// The row's constants the backward's pairs need (RowInfo, and the certified lse).
struct Row {
  double lse, err_lse, e_lse, D, e_D, err_D64;
};
struct PairBound {
  double P_hi, dP_w, P_bar, ds_hi, e_ds, ds_bar;
};
// bounds_backward.cpp's backward_pair (no softcap).
__device__ inline PairBound backward_pair(const ModelDev& m, const Sc& s, DP dp, const Row& row) {
  double e_dp = dp.e_dp + m.u_store_s * (fabs(dp.dp) + dp.e_dp) + m.floor_store_s;
  const double e_lse = row.e_lse + (m.base2 ? (m.delta_l2e + m.us) * (fabs(row.lse) + row.e_lse) : 0.0);
  const double e_arg = s.e_hat + e_lse;
  const double xi = e_arg + m.us * (fabs(s.s - row.lse) + e_arg) + m.e_exp;
  const double logP = fmin(0.0, s.s - row.lse);
  const double zeta = double(m.p.d + 4) * 0x1p-53 * s.a + 0x1p-51 * (fabs(s.s) + fabs(row.lse) + 1) + 0.0 + row.err_lse;
  const double y = logP + zeta, e_y = exp(y), lp = fmin(0.0, y);
  PairBound pr;
  pr.P_hi = fmin(1.0, e_y);
  pr.dP_w = fmin(1.0, p_expm1(lp, xi, lp == y ? e_y : exp(lp))) + m.floor_s;
  pr.P_bar = fmin(1.0, pr.P_hi + pr.dP_w);
  const double gap = fabs(dp.dp - row.D) + double(m.dv + 1) * 0x1p-53 * dp.mag + row.err_D64;
  const double e_gap = e_dp + row.e_D;
  double e_ds = pr.dP_w * gap + pr.P_bar * e_gap;
  if (m.ds_from_stored_p) e_ds += (m.u_p * pr.P_bar + m.floor_p) * (gap + e_gap);
  e_ds += gamma_n(2, m.us) * pr.P_bar * (gap + e_gap) + 2 * m.floor_s;
  pr.e_ds = e_ds, pr.ds_hi = pr.P_hi * gap, pr.ds_bar = pr.ds_hi + e_ds;
  return pr;
}

// Row r of the dense query side: (b, h, i).
struct RowIx {
  int64_t b, h, i;
};
__device__ inline RowIx row_ix(const Problem& p, int64_t r) {
  return {r / (int64_t(p.heads_q) * p.n_q), r / p.n_q % p.heads_q, r % p.n_q};
}

// The largest n_t any row can have (bounds.cpp, forward: off < bt).
__host__ __device__ inline int64_t max_tiles(const ModelDev& m) {
  return m.pv.block > 0 ? (m.p.n_k + 2 * int64_t(m.pv.block) - 1) / m.pv.block + 1 : 1;
}

// ---------------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads) forward_rows(ModelDev m) {
  extern __shared__ double sm[];
  const Problem& p = m.p;
  const int lane = threadIdx.x % 32, wib = threadIdx.x / 32;
  const int64_t warp = int64_t(blockIdx.x) * kWarps + wib;
  if (warp >= m.scratch_warps) return;
  double* q = sm + wib * p.d;  // (d) the row's q
  double* F = m.scratch + warp * m.scratch_stride;
  const int64_t n_k = p.n_k, nt_max = max_tiles(m);
  double* T = F + kFields * n_k;
  const int64_t rows = int64_t(p.batch) * p.heads_q * p.n_q;
  const int dv = int(m.dv);
  for (int64_t r = warp; r < rows; r += m.scratch_warps) {
    const RowIx id = row_ix(p, r);
    const int64_t g = id.h / m.group;
    const KeyRange vis = visible_keys(p, id.i, p.n_q, n_k);
    const int64_t jb = vis.begin, n_v = vis.end - vis.begin;
    const int64_t oq = offset_q(p, id.b, id.h, id.i), oo = r * m.dv, ol = r;
    if (lane == 0) m.live[r] = n_v > 0;
    if (n_v <= 0) continue;
    __syncwarp();
    for (int c = lane; c < p.d; c += 32) q[c] = m.q[oq + c];
    __syncwarp();
    double q_abs = 0;
    for (int c = lane; c < p.d; c += 32) q_abs += fabs(q[c]);
    q_abs = warp_sum(q_abs);
    const double lse = m.lse[ol], err_lse = m.err_lse[ol];
    // Scores (HeadPass::scores) and the row's maxima; the first key of the largest s.
    double mx = -kInf, hi_all = -kInf, e_dot_max = 0, e_hat_max = 0, best = -kInf;
    int64_t best_j = n_v;
    for (int64_t j = lane; j < n_v; j += 32) {
      const int64_t ja = jb + j;
      const Sc s = score(m, q, m.k + offset_kv(p, id.b, g, ja), q_abs, m.k_abs_sum[(id.b * p.heads_kv + g) * n_k + ja]);
      F[kS * n_k + j] = s.s, F[kEh * n_k + j] = s.e_hat, F[kEc * n_k + j] = s.e_c, F[kA * n_k + j] = s.a;
      mx = fmax(mx, s.s), hi_all = fmax(hi_all, s.s + s.e_hat);
      e_dot_max = fmax(e_dot_max, s.e_dot), e_hat_max = fmax(e_hat_max, s.e_hat);
      if (s.s > best) best = s.s, best_j = j;
    }
    mx = warp_max(mx), hi_all = warp_max(hi_all), e_dot_max = warp_max(e_dot_max), e_hat_max = warp_max(e_hat_max);
    for (int o = 16; o > 0; o /= 2) {  // argmax, the smallest key among equal scores (exact_max_key)
      const double ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int64_t oj = __shfl_xor_sync(0xffffffffu, best_j, o);
      if (ob > best || (ob == best && oj < best_j)) best = ob, best_j = oj;
    }
    __syncwarp();
    double others = -kInf;
    for (int64_t j = lane; j < n_v; j += 32)
      if (j != best_j) others = fmax(others, F[kS * n_k + j] + F[kEh * n_k + j]);
    others = warp_max(others);
    const bool exact_max =
        m.exp_exact_at_zero && !m.p_normalised && best_j < n_v && F[kS * n_k + best_j] - F[kEh * n_k + best_j] > others;
    const int64_t j_exact = exact_max ? best_j : -1;
    // Key tiles (key_tiles): per tile max s -+ e^, their running maxima, the rescales after t that may err.
    const int64_t bt = m.pv.block > 0 ? m.pv.block : (n_v > 1 ? n_v : 1), off = m.pv.block > 0 ? jb % bt : 0;
    const int64_t n_t = (off + n_v + bt - 1) / bt;
    for (int64_t t = lane; t < n_t; t += 32) {
      double lo = -kInf, hi = -kInf;
      const int64_t j0 = t * bt - off > 0 ? t * bt - off : 0, j1 = (t + 1) * bt - off < n_v ? (t + 1) * bt - off : n_v;
      for (int64_t j = j0; j < j1; ++j) {
        const double s = F[kS * n_k + j], e = F[kEh * n_k + j];
        lo = fmax(lo, s - e), hi = fmax(hi, s + e);
      }
      T[kTLo * nt_max + t] = lo, T[kTHi * nt_max + t] = hi;
    }
    __syncwarp();
    double carry_lo = -kInf, carry_hi = -kInf;
    for (int64_t base = 0; base < n_t; base += 32) {  // running maxima: a max-scan across the warp
      const int64_t t = base + lane;
      double lo = t < n_t ? T[kTLo * nt_max + t] : -kInf, hi = t < n_t ? T[kTHi * nt_max + t] : -kInf;
      for (int o = 1; o < 32; o *= 2) {
        const double ol_ = __shfl_up_sync(0xffffffffu, lo, o), oh = __shfl_up_sync(0xffffffffu, hi, o);
        if (lane >= o) lo = fmax(lo, ol_), hi = fmax(hi, oh);
      }
      lo = fmax(lo, carry_lo), hi = fmax(hi, carry_hi);
      if (t < n_t) T[kPreLo * nt_max + t] = lo, T[kPreHi * nt_max + t] = hi;
      carry_lo = __shfl_sync(0xffffffffu, lo, 31), carry_hi = __shfl_sync(0xffffffffu, hi, 31);
    }
    __syncwarp();
    // moves_after[t]: the rescales after tile t that may err, a suffix count (integers: exact).
    double carry = 0;
    for (int64_t top = (n_t - 1) / 32 * 32; top >= 0; top -= 32) {
      const int64_t t = top + lane;
      double ind = 0;
      if (t + 1 < n_t) ind = !m.exp_exact_at_zero || T[kTHi * nt_max + t + 1] >= T[kPreLo * nt_max + t] ? 1.0 : 0.0;
      for (int o = 1; o < 32; o *= 2) {
        const double x = __shfl_down_sync(0xffffffffu, ind, o);
        if (lane + o < 32) ind += x;
      }
      if (t < n_t) T[kMoves * nt_max + t] = ind + carry;
      carry += __shfl_sync(0xffffffffu, ind, 0);
    }
    __syncwarp();
    // The weights' deviations (weight_errors).
    const double u = m.us, stored = m.l_sums_stored_p ? m.u_p / (1 - m.u_p) : 0.0;
    double eps = 0, eps_lse = 0;
    for (int64_t j = lane; j < n_v; j += 32) {
      const double s = F[kS * n_k + j], e_hat = F[kEh * n_k + j], e_c = F[kEc * n_k + j], a = F[kA * n_k + j];
      const int64_t t = (off + j) / bt;
      double common = m.e_exp + u * (fabs(s - mx) + 2 * e_hat_max) + (j != j_exact ? stored : 0.0);
      common += T[kMoves * nt_max + t] * m.e_exp + u * fmax(0.0, hi_all - T[kPreLo * nt_max + t]);
      if (m.fa1) common += m.e_exp + u * fmax(0.0, T[kPreHi * nt_max + t] - T[kTLo * nt_max + t]);
      const double dow = (m.common_scale ? (e_hat - e_c) + m.delta_c * (fabs(s - mx) + 2 * e_dot_max) : e_hat) + common;
      const double dl = e_hat + common;
      eps = fmax(eps, dow), eps_lse = fmax(eps_lse, dl);
      const double logP = fmin(0.0, s - lse);
      const double zeta = double(p.d + 4) * 0x1p-53 * a + 0x1p-51 * (fabs(s) + fabs(lse) + 1) + 0.0 + err_lse;
      const double y = logP + zeta;
      F[kY * n_k + j] = y, F[kDow * n_k + j] = dow, F[kDl * n_k + j] = dl, F[kElp * n_k + j] = exp(y);
    }
    eps = warp_max(eps), eps_lse = warp_max(eps_lse);
    // l's chain and o's coefficients (forward, o_coefs): w^ into kEc, o's W coefficient into kA, its
    // accumulator coefficient into kS.
    const double tiny_w = m.floor_s / (m.exp_exact_at_zero ? 1.0 : 1 - m.e_exp);
    const int64_t bm = m.block_m > 1 ? m.block_m : 1;
    const int64_t i_last = ((id.i / bm + 1) * bm < p.n_q ? (id.i / bm + 1) * bm : p.n_q) - 1;
    const int64_t walked = (visible_keys(p, i_last, p.n_q, n_k).end - (jb - off) + bt - 1) / bt;
    auto extra = [&](const ClosedChain& c) -> int64_t {
      if (c.block <= 0 || (Merge(c.merge) == Merge::Rescale && m.exp_exact_at_zero)) return 0;
      return walked - n_t > 0 ? walked - n_t : 0;
    };
    const int64_t o_l = key_offset(m.l, jb), o_pv = key_offset(m.pv, jb);
    const int64_t len_l = o_l + n_v, len_pv = o_pv + n_v, x_l = extra(m.l), x_pv = extra(m.pv);
    const double pv_up = (m.l_sums_stored_p ? 0.0 : m.u_p) + (m.p_normalised ? gamma_n(m.o_normalise + 1, u) : 0.0);
    double E_l = 0, acc0 = 0;
    __syncwarp();
    for (int64_t j = lane; j < n_v; j += 32) {
      const double y = F[kY * n_k + j], dow = F[kDow * n_k + j], elp = F[kElp * n_k + j];
      const double w = fmin(1.0, exp(y + dow + eps));
      const double kl = closed_kappa(m.l, len_l, x_l, o_l + j);
      E_l += kl * w + (1 + kl) * tiny_w;
      const double kap = closed_kappa(m.pv, len_pv, x_pv, o_pv + j);
      F[kA * n_k + j] = p_expm1(y, dow, elp);
      F[kS * n_k + j] = kap * w + (1 + kap) * ((j != j_exact ? pv_up : 0.0) * w + m.floor_p + tiny_w + w * m.u_in);
      acc0 += (1 + kap) * w * m.floor_in;
    }
    E_l = warp_sum(E_l), acc0 = warp_sum(acc0);
    const double kmax_l = closed_kappa_max(m.l, len_l, x_l);
    E_l = E_l * chain_scale(kmax_l) + chain_floors(m.l, len_l, x_l);
    double l_dev = E_l, l_low = 1 - E_l;  // LSum
    if (!(E_l < 0.5) && m.l_acc_u <= 0x1p-8) {
      const bool adds_exact = !m.ftz && m.l_chain.adder != Adder::TensorCore && !m.l_chain.truncates;
      const double lost = adds_exact ? grown_floors(closed_mult_events(m.l, len_l, x_l) * m.l.floor, kmax_l)
                                     : chain_floors(m.l, len_l, x_l);
      const double low = exp(-(17.0 / 16) * kmax_l) * (1 - 0x1p-50) - lost;
      if (low > 0)
        l_dev = fmax(E_l, 1 - low), l_low = low;
      else
        l_low = 0.0;
    }
    __syncwarp();
    // o's sums over the keys (o_sums), lanes owning columns c = lane + 32 e, then o_finish.
    double w_sum[kMaxCols], R_max[kMaxCols], e_acc[kMaxCols], oc[kMaxCols], ec[kMaxCols];
#pragma unroll
    for (int e = 0; e < kMaxCols; ++e) {
      const int c = lane + 32 * e;
      w_sum[e] = R_max[e] = e_acc[e] = 0;
      oc[e] = c < dv ? m.o[oo + c] : 0.0, ec[e] = c < dv ? m.err_o[oo + c] : 0.0;
    }
    const double* vb = m.v + (id.b * p.heads_kv + g) * n_k * m.dv;
    for (int64_t j = 0; j < n_v; ++j) {
      const double cw = F[kA * n_k + j], ca = F[kS * n_k + j];
      const double* v = vb + (jb + j) * m.dv;
#pragma unroll
      for (int e = 0; e < kMaxCols; ++e) {
        const int c = lane + 32 * e;
        if (c >= dv) break;
        const double x = fabs(v[c] - oc[e]) + ec[e];
        R_max[e] = fmax(R_max[e], x);
        w_sum[e] += times(cw, x);
        e_acc[e] += ca * fabs(v[c]);
      }
    }
    const double exp_eps = exp(eps), sc_pv = chain_scale(closed_kappa_max(m.pv, len_pv, x_pv));
    const double fl_pv = chain_floors(m.pv, len_pv, x_pv), g_norm = gamma_n(m.o_normalise, u);
#pragma unroll
    for (int e = 0; e < kMaxCols; ++e) {
      const int c = lane + 32 * e;
      if (c >= dv) break;
      const double ao = fabs(oc[e]);
      const double W = fmin(times(exp_eps, w_sum[e]), 2 * R_max[e]);
      const double E_acc = (e_acc[e] + acc0) * sc_pv + fl_pv;
      double err = l_low > 0 ? W + (E_acc + l_dev * (ao + W)) / l_low : kInf;
      if (!m.p_normalised) err += g_norm * (ao + err);
      err += m.ftz ? m.floor_s : 0.0;
      m.e_o[oo + c] = err;
    }
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
    if (lane == 0) m.e_lse[ol] = e_lse;
    __syncwarp();
  }
}

// ---------------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads) backward_rows(ModelDev m) {
  extern __shared__ double sm[];
  const Problem& p = m.p;
  const int lane = threadIdx.x % 32, wib = threadIdx.x / 32;
  const int64_t warp = int64_t(blockIdx.x) * kWarps + wib;
  if (warp >= m.scratch_warps) return;
  const int d = int(p.d), dv = int(m.dv);
  double* q = sm + wib * (d + dv);  // (d) the row's q, then (d_v) its d_o
  double* dO = q + d;
  double* alpha = m.scratch + warp * m.scratch_stride;  // (n_k)
  const int64_t n_k = p.n_k, rows = int64_t(p.batch) * p.heads_q * p.n_q;
  for (int64_t r = warp; r < rows; r += m.scratch_warps) {
    if (!m.live[r]) continue;
    const RowIx id = row_ix(p, r);
    const int64_t g = id.h / m.group;
    const KeyRange vis = visible_keys(p, id.i, p.n_q, n_k);
    const int64_t jb = vis.begin, n_v = vis.end - vis.begin;
    const int64_t oq = offset_q(p, id.b, id.h, id.i), oo = r * m.dv;
    __syncwarp();
    for (int c = lane; c < d; c += 32) q[c] = m.q[oq + c];
    for (int c = lane; c < dv; c += 32) dO[c] = m.d_o[oo + c];
    __syncwarp();
    // D = d_o . o along its chain, from the kernel's own o (within the finished bound of o).
    double D = 0, weighted = 0, plain = 0, from_o = 0, sum_do = 0, sum_o = 0, err_D64 = 0, q_abs = 0;
    for (int c = lane; c < dv; c += 32) {
      const double o = m.o[oo + c], ad = fabs(dO[c]), kap = m.w_D.kappa[c];
      D += dO[c] * o;
      weighted += kap * ad * fabs(o), plain += ad * fabs(o);
      from_o += (1 + kap) * ad * m.b_o[oo + c], sum_do += ad, sum_o += fabs(o);
      err_D64 += ad * m.err_o[oo + c];
    }
    for (int c = lane; c < d; c += 32) q_abs += fabs(q[c]);
    D = warp_sum(D), weighted = warp_sum(weighted), plain = warp_sum(plain), from_o = warp_sum(from_o);
    sum_do = warp_sum(sum_do), sum_o = warp_sum(sum_o), err_D64 = warp_sum(err_D64), q_abs = warp_sum(q_abs);
    Row row;
    row.D = D;
    row.e_D = dot_error(m, m.w_D, weighted, plain, sum_do, sum_o, dv) + from_o * m.w_D.scale;
    row.err_D64 = err_D64 + double(dv + 1) * 0x1p-53 * plain;
    row.lse = m.lse[r], row.err_lse = m.err_lse[r], row.e_lse = m.b_lse[r];
    if (lane == 0) {
      double* st = m.row_stat + r * kRowStat;
      st[kD] = row.D, st[kED] = row.e_D, st[kErrD64] = row.err_D64, st[kSumDo] = sum_do, st[kQAbs] = q_abs;
    }
    const int64_t o_dq = key_offset(m.dq, jb), len_dq = o_dq + n_v;
    const int64_t kvh = id.b * p.heads_kv + g;
    double alpha0 = 0;
    for (int64_t j = lane; j < n_v; j += 32) {
      const int64_t ja = jb + j;
      const Sc s = score(m, q, m.k + offset_kv(p, id.b, g, ja), q_abs, m.k_abs_sum[kvh * n_k + ja]);
      const DP dp = d_p(m, dO, m.v + (kvh * n_k + ja) * m.dv, sum_do, m.v_abs_sum[kvh * n_k + ja]);
      const PairBound pr = backward_pair(m, s, dp, row);
      const double e_ds = pr.e_ds + m.u_p * pr.ds_bar + m.floor_ds + pr.ds_bar * m.u_in;
      const double kq = closed_kappa(m.dq, len_dq, 0, o_dq + j);
      alpha[j] = kq * pr.ds_hi + (1 + kq) * e_ds;
      alpha0 += (1 + kq) * pr.ds_bar * m.floor_in;
    }
    alpha0 = warp_sum(alpha0);
    __syncwarp();
    // d_q's chain sum: sum_j alpha_j |k_jc|, lanes owning columns.
    double E[kMaxCols];
#pragma unroll
    for (int e = 0; e < kMaxCols; ++e) E[e] = 0;
    const double* kb = m.k + offset_kv(p, id.b, g, jb);
    for (int64_t j = 0; j < n_v; ++j) {
      const double a = alpha[j];
      const double* kr = kb + j * d;
#pragma unroll
      for (int e = 0; e < kMaxCols; ++e) {
        const int c = lane + 32 * e;
        if (c >= d) break;
        E[e] += a * fabs(kr[c]);
      }
    }
    const double dq_scale = chain_scale(closed_kappa_max(m.dq, len_dq, 0));
#pragma unroll
    for (int e = 0; e < kMaxCols; ++e) {
      const int c = lane + 32 * e;
      if (c >= d) break;
      m.dq_chain[oq + c] = (E[e] + alpha0) * dq_scale;
    }
    if (lane == 0) m.dq_floor[r] = chain_floors(m.dq, len_dq, 0);
    __syncwarp();
  }
}

// ---------------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads) backward_keys(ModelDev m, int64_t n_warps) {
  extern __shared__ double sm[];
  const Problem& p = m.p;
  const int lane = threadIdx.x % 32, wib = threadIdx.x / 32;
  const int64_t warp = int64_t(blockIdx.x) * kWarps + wib;
  if (warp >= n_warps) return;
  const int d = int(p.d), dv = int(m.dv);
  double* kr = sm + wib * (d + dv);  // (d) the key's k, then (d_v) its v
  double* vr = kr + d;
  const int64_t n_k = p.n_k, keys = int64_t(p.batch) * p.heads_kv * n_k;
  for (int64_t key = warp; key < keys; key += n_warps) {
    const int64_t kvh = key / n_k, j = key % n_k, b = kvh / p.heads_kv, g = kvh % p.heads_kv;
    __syncwarp();
    for (int c = lane; c < d; c += 32) kr[c] = m.k[key * d + c];
    for (int c = lane; c < dv; c += 32) vr[c] = m.v[key * dv + c];
    __syncwarp();
    const double k_abs = m.k_abs_sum[key], v_abs = m.v_abs_sum[key];
    // The rows of the group that see key j (kv_rows): rows [i0, i1) of every head, head-major.
    const int64_t i0 = m.kv_i0[j], i1 = m.kv_i1[j];
    const int64_t per_head = i1 > i0 ? i1 - i0 : 0, n = m.group * per_head;
    const int64_t steps_per_head = per_head > 0 ? (i1 - 1) / kTensorCoreFused - i0 / kTensorCoreFused + 1 : 0;
    const int64_t n_steps = m.group * steps_per_head;
    double Ek[kMaxCols], Ev[kMaxCols], b0k = 0, b0v = 0;
#pragma unroll
    for (int e = 0; e < kMaxCols; ++e) Ek[e] = Ev[e] = 0;
    for (int64_t base = 0; base < n; base += 32) {
      const int64_t x = base + lane;
      double bk = 0, bv = 0;
      int64_t r = -1;
      if (x < n) {
        const int64_t hl = x / per_head, i = i0 + x % per_head, h = g * m.group + hl;
        r = (b * p.heads_q + h) * p.n_q + i;
        const double* st = m.row_stat + r * kRowStat;
        Row row;
        row.D = st[kD], row.e_D = st[kED], row.err_D64 = st[kErrD64];
        row.lse = m.lse[r], row.err_lse = m.err_lse[r], row.e_lse = m.b_lse[r];
        const Sc s = score(m, m.q + r * d, kr, st[kQAbs], k_abs);
        const DP dp = d_p(m, m.d_o + r * dv, vr, st[kSumDo], v_abs);
        const PairBound pr = backward_pair(m, s, dp, row);
        const double e_ds = pr.e_ds + m.u_p * pr.ds_bar + m.floor_ds + pr.ds_bar * m.u_in;
        const double e_p = pr.dP_w + m.u_p * pr.P_bar + m.floor_p + pr.P_bar * m.u_in;
        double kk;
        if (m.dkv_plain) {
          const int64_t step = hl * steps_per_head + i / kTensorCoreFused - i0 / kTensorCoreFused;
          kk = plain_kappa(m.dkv, hl * per_head + i - i0, n, step, n_steps);
        } else {
          kk = closed_kappa(m.dkv, m.group * m.n_q16, 0, hl * m.n_q16 + i);
        }
        bk = kk * pr.ds_hi + (1 + kk) * e_ds;
        bv = kk * pr.P_hi + (1 + kk) * e_p;
        b0k += (1 + kk) * pr.ds_bar * m.floor_in, b0v += (1 + kk) * pr.P_bar * m.floor_in;
      }
      // The batch's rows one after another: sum_i beta_i |q_ic|, |d_o_ic|, lanes owning columns.
      const int cnt = n - base < 32 ? int(n - base) : 32;
      for (int src = 0; src < cnt; ++src) {
        const double sk = __shfl_sync(0xffffffffu, bk, src), sv = __shfl_sync(0xffffffffu, bv, src);
        const int64_t rs = __shfl_sync(0xffffffffu, r, src);
        const double *qa = m.q + rs * d, *da = m.d_o + rs * dv;
#pragma unroll
        for (int e = 0; e < kMaxCols; ++e) {
          const int c = lane + 32 * e;
          if (c < d) Ek[e] += sk * fabs(qa[c]);
          if (c < dv) Ev[e] += sv * fabs(da[c]);
        }
      }
    }
    b0k = warp_sum(b0k), b0v = warp_sum(b0v);
    double km, events;
    if (m.dkv_plain) {
      km = n > 0 ? plain_kappa(m.dkv, 0, n, 0, n_steps) : 0.0;
      events = double(n) * 3 + double(n_steps);
    } else {
      km = closed_kappa_max(m.dkv, m.group * m.n_q16, 0);
      events = closed_events(m.dkv, m.group * m.n_q16, 0);
    }
    const double sc_j = chain_scale(km);
#pragma unroll
    for (int e = 0; e < kMaxCols; ++e) {
      const int c = lane + 32 * e;
      if (c < d) m.dk_chain[key * d + c] = (Ek[e] + b0k) * sc_j;
      if (c < dv) m.dv_chain[key * dv + c] = (Ev[e] + b0v) * sc_j;
    }
    if (lane == 0) m.kv_floor[key] = grown_floors(events * m.dkv.floor, km);
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("GPU error model: ") + what + ": " + cudaGetErrorString(e));
}

int64_t blocks_for(int64_t warps) { return (warps + kWarps - 1) / kWarps; }

}  // namespace

void launch_forward(const ModelDev& m) {
  const size_t smem = size_t(kWarps) * size_t(m.p.d) * sizeof(double);
  forward_rows<<<unsigned(blocks_for(m.scratch_warps)), kThreads, smem>>>(m);
  check(cudaGetLastError(), "forward launch");
  check(cudaDeviceSynchronize(), "forward");
}

void launch_backward_rows(const ModelDev& m) {
  const size_t smem = size_t(kWarps) * size_t(m.p.d + m.dv) * sizeof(double);
  backward_rows<<<unsigned(blocks_for(m.scratch_warps)), kThreads, smem>>>(m);
  check(cudaGetLastError(), "backward rows launch");
  check(cudaDeviceSynchronize(), "backward rows");
}

void launch_backward_keys(const ModelDev& m) {
  const size_t smem = size_t(kWarps) * size_t(m.p.d + m.dv) * sizeof(double);
  const int64_t keys = int64_t(m.p.batch) * m.p.heads_kv * m.p.n_k;
  const int64_t warps = keys < m.scratch_warps ? keys : m.scratch_warps;
  backward_keys<<<unsigned(blocks_for(warps)), kThreads, smem>>>(m, warps);
  check(cudaGetLastError(), "backward keys launch");
  check(cudaDeviceSynchronize(), "backward keys");
}

int64_t scratch_stride(const ModelDev& m) { return kFields * m.p.n_k + kTileFields * max_tiles(m); }

}  // namespace fc::ref::gpu
