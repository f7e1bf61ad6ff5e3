// The error model, element by element: head by head, row block by row block, the scores and dP from
// GEMMs, then each row's forward (o, lse) here and its backward terms in bounds_backward.cpp; every
// sum's rounding chain as per-term weights (bounds_chain.cpp). Derivation and the meaning of every
// term: docs/error-model.md. Notation: s scores, m the row max, T the key tiles a row visits,
// delta_j the exponent-argument error of weight j, W the weights' deviation term. Magnitudes (P,
// dP, D, dS) are recomputed here in fp64 from the inputs and the certified lse; their own evaluation
// error (zeta) is charged where it matters (the weights of a row), and kSlack covers the rest.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "bounds_model.hpp"
#include "reference/parallel.hpp"

namespace fc::ref {
namespace model {
namespace {

// Relative error of a constant rounded to float from its double value (which carries 2^-53 itself).
double const_err(double x) { return x == 0 ? 0.0 : std::fabs(double(float(x)) - x) / std::fabs(x) + 0x1p-52; }

}  // namespace

Consts::Consts(const Problem& p_, const Tensors64& in_, const Certified& ref_, const Precision& prec)
    : p(p_), in(in_), ref(ref_), ar(prec.ar), storage(prec.storage) {
  const DtypeSet types = prec.dtypes();
  out_q = types.q, out_kv = types.kv, out_o = types.o;
  lse_type = types.q == DType::F64 ? DType::F64 : DType::F32;
  ftz = ar.flush_subnormals;
  us = unit_roundoff(ar.soft);
  // FTZ flushes arithmetic results below the smallest normal; conversions to 16-bit keep subnormals.
  floor_s = ftz ? min_normal(ar.soft) : underflow_floor(ar.soft);
  // Inputs converted to a narrower operand type: its unit, and its underflow where its range is smaller.
  // Per-tensor dtypes: charged to every input when the operand type is coarser than any one of them.
  for (DType t : {types.q, types.kv, types.o}) {
    if (ar.operand == t) continue;
    if (coarser(ar.operand, t)) u_in = unit_roundoff(ar.operand);
    if (min_normal(ar.operand) > min_normal(t)) floor_in = underflow_floor(ar.operand);
  }
  // P (and dS): to storage when the kernel rounds them there, then to the operand type if narrower.
  const PRounding pr = p_rounding(prec);
  u_p = pr.u;
  const double floor_first = pr.first == storage ? storage_floor(prec) : underflow_floor(pr.first);
  floor_p = (pr.to_first ? floor_first : 0.0) + (pr.to_second ? underflow_floor(pr.second) : 0.0);
  // dS scaled before its rounding: the rounding's floor f, carried back through d_q, d_k = scale * sum, is f / |scale|.
  const double abs_scale = std::fabs(p.scale);
  floor_ds = floor_p * (ar.ds_scaled && abs_scale > 0 && abs_scale < 1 ? 1 / abs_scale : 1.0);
  u_store_s = ar.stores_s && coarser(storage, ar.soft) ? unit_roundoff(storage) : 0.0;
  floor_store_s = u_store_s > 0 ? storage_floor(prec) : 0.0;  // a tiny S or dP stored lands on the subnormal grid
  constexpr double kLog2e = 1.4426950408889634, kLn2 = 0.6931471805599453;
  const double c = ar.base2 ? p.scale * kLog2e : p.scale;
  delta_c = ar.soft == DType::F64 ? 0.0 : const_err(c) + (ar.base2 ? 0x1p-52 : 0.0);
  delta_out = ar.soft == DType::F64 ? 0.0 : const_err(p.scale);
  delta_l2e = const_err(kLog2e), delta_ln2 = const_err(kLn2);
  const double r_exp = ar.exp_ulps * 2 * us;  // an ulp is at most 2u of a normal result
  e_exp = r_exp / (1 - r_exp);                // |log(1 + r)| <= r / (1 - r)
  log_rel = ar.log_ulps * 2 * us;
  dv = head_dim_v(p);
  // A sink and an additive mask's values are not scaled: the constant's rounding no longer cancels.
  common_scale = !(p.softcap > 0) && !p.alibi && !p.sinks && p.mask_kind != MaskKind::Additive;
  // Softcap: c rounded to the element-wise type; the tanh within tanh_ulps ulp (an ulp of a normal
  // result is at most 2u of it, of a subnormal one twice the underflow floor).
  delta_cap = p.softcap > 0 && ar.soft != DType::F64 ? const_err(p.softcap) : 0.0;
  e_tanh = ar.tanh_ulps * 2 * us, tanh_floor = ar.tanh_ulps * 2 * underflow_floor(ar.soft);
  // The rows that see key j: both ends of a row's visible range grow with i (attention.h), so they
  // form one range [kv_i0, kv_i1), found by two pointers.
  kv_i0.assign(size_t(p.n_k), 0), kv_i1.assign(size_t(p.n_k), 0);
  for (int64_t j = 0, a = 0, z = 0; j < p.n_k; ++j) {
    while (a < p.n_q && visible_keys(p, a, p.n_q, p.n_k).end <= j) ++a;    // first row whose range ends past j
    while (z < p.n_q && visible_keys(p, z, p.n_q, p.n_k).begin <= j) ++z;  // first row whose range starts past j
    kv_i0[size_t(j)] = a, kv_i1[size_t(j)] = std::max(a, z);
  }
  group = p.heads_q / p.heads_kv;
  n_q16 = (int64_t(p.n_q) + 15) / 16 * 16;
  // Per-head gradients stored, then the group summed: each head's rounding to storage and the adds
  // between heads, in storage (the last is the output's own rounding) or in the accumulator type.
  // Each term goes through at most (group - 1) of each (docs/error-model.md, section 4): its
  // factor is within phi = (1 + u_storage)^(group - 1) (1 + u_acc)^(group - 1) - 1 of 1, evaluated
  // in the log domain (finite at every group size: no first-order (group - 1) u that passes 1). A
  // subnormal per-head gradient lands on storage's grid, and the adds carry that floor along.
  if (ar.kv_per_head && group > 1 && coarser(storage, ar.dkv.acc)) {
    const double x = double(group - 1) * (std::log1p(unit_roundoff(storage)) + std::log1p(unit_roundoff(ar.dkv.acc)));
    kv_head_phi = std::expm1(x * (1 + 0x1p-50)) * (1 + 0x1p-50);  // outward past log1p's and expm1's errors
    kv_head_floor = double(group) * storage_floor(prec) * (1 + kv_head_phi);
  }
  w_s = chain_weights(ar.s, p.d, ftz), w_dp = chain_weights(ar.dp, dv, ftz), w_D = chain_weights(ar.d_o_o, dv, ftz);
  // Absent rows (masked) counted as present: an exact add of zero, so only looser.
  if (!is_plain(ar.dkv)) w_kv_full = chain_weights(ar.dkv, group * n_q16, ftz);
}

// Rows per block: the block's (rows, n_k) matrices stay within ~64 MiB.
int64_t block_rows(int64_t n_k) { return std::clamp<int64_t>((int64_t(1) << 20) / std::max<int64_t>(n_k, 1), 1, 64); }

void HeadPass::kv_head(int64_t b_, int64_t g_) {
  const Problem& p = k.p;
  b = b_, g = g_;
  const int64_t ok = offset_kv(p, b, g, 0);
  K = Eigen::Map<const Mat>(&k.in.k[size_t(ok)], p.n_k, p.d);
  V = Eigen::Map<const Mat>(&k.in.v[size_t(offset_v(p, b, g, 0))], p.n_k, k.dv);
  Kabs = K.cwiseAbs();
  v_finite = V.allFinite();
  k_abs_sum.assign(size_t(p.n_k), 0.0), v_abs_sum = k_abs_sum;
  for (int64_t j = 0; j < p.n_k; ++j)
    k_abs_sum[size_t(j)] = Kabs.row(j).sum(), v_abs_sum[size_t(j)] = V.row(j).cwiseAbs().sum();
  if (bwd) {
    E_dk.setZero(p.n_k, p.d), E_dv.setZero(p.n_k, k.dv);
    beta0_k.assign(size_t(p.n_k), 0.0), beta0_v = beta0_k;
    if (k.kv_head_phi > 0) M_dk.setZero(p.n_k, p.d), M_dv.setZero(p.n_k, k.dv);
  }
}

void HeadPass::begin_block(int64_t h_, int64_t i0_, int64_t rows, const HeadPass* shared) {
  const Problem& p = k.p;
  h = h_, i0 = i0_;
  const Eigen::Map<const Mat> Q(&k.in.q[size_t(offset_q(p, b, h, i0))], rows, p.d);  // (R, d)
  const Mat Qabs = Q.cwiseAbs();
  const Eigen::Map<const Eigen::RowVectorXd> ks(k.w_s.kappa.data(), p.d);
  // Another arithmetic's pass on the same block: its products of the inputs alone are these ones
  // (the same GEMMs on the same operands, so the same bits), and its chain-weighted ones too where
  // the chains over d are the same.
  if (shared) {
    pS = shared->pS, pA = shared->pA;
  } else {
    S.noalias() = Q * K.transpose();  // (R, n_k) q.k (the scale is applied per element)
    A.noalias() = Qabs * Kabs.transpose();
    pS = &S, pA = &A;
  }
  if (shared && shared->k.w_s.kappa == k.w_s.kappa) {
    pEs = shared->pEs;
  } else {
    Es.noalias() = (Qabs.array().rowwise() * ks.array()).matrix() * Kabs.transpose();
    pEs = &Es;
  }
  if (bwd) {
    const Eigen::Map<const Mat> dO(&k.in.d_o[size_t(offset_o(p, b, h, i0))], rows, k.dv);  // (R, d_v)
    const Mat dOabs = dO.cwiseAbs(), Vabs = V.cwiseAbs();
    const Eigen::Map<const Eigen::RowVectorXd> kd(k.w_dp.kappa.data(), k.dv);
    if (shared) {
      pDP = shared->pDP, pMDP = shared->pMDP;
    } else {
      DP.noalias() = dO * V.transpose();
      MDP.noalias() = dOabs * Vabs.transpose();
      pDP = &DP, pMDP = &MDP;
    }
    if (shared && shared->k.w_dp.kappa == k.w_dp.kappa) {
      pEdp = shared->pEdp;
    } else {
      Edp.noalias() = (dOabs.array().rowwise() * kd.array()).matrix() * Vabs.transpose();
      pEdp = &Edp;
    }
    alpha.setZero(rows, p.n_k), beta_k.setZero(rows, p.n_k), beta_v.setZero(rows, p.n_k);
    alpha0.assign(size_t(rows), 0.0), dq_scale.assign(size_t(rows), 1.0), dq_floor.assign(size_t(rows), 0.0);
    if (k.kv_head_phi > 0) mag_k.setZero(rows, p.n_k), mag_v.setZero(rows, p.n_k);
  }
}

bool HeadPass::row_begin(int64_t r) {
  const Problem& p = k.p;
  const int64_t i = i0 + r, oq = offset_q(p, b, h, i), oo = offset_o(p, b, h, i);
  const int64_t ol = offset_lse(p, b, h, i);
  const KeyRange vis = visible_keys(p, i, p.n_q, p.n_k);
  // No key (or every key masked off by a mask tensor or block mask): the contract fixes o = 0,
  // lse = -inf (or the sink), d_q = 0 exactly.
  if (!k.any_live(b, h, i, vis)) {
    for (int64_t c = 0; c < k.dv; ++c) B.o[size_t(oo + c)] = at(k.ref.err.o, oo + c);
    for (int64_t c = 0; bwd && c < p.d; ++c) B.d_q[size_t(oq + c)] = at(k.ref.err.d_q, oq + c);
    const double sink = p.sinks ? k.in.seq.sinks[size_t(h)] : -kInf;
    B.lse[size_t(ol)] = std::isfinite(sink)
                            ? sink_only_lse_bound(Precision{k.storage, k.ar}, sink, at(k.ref.err.lse, ol))
                            : at(k.ref.err.lse, ol);
    return false;
  }
  rw_vis = vis, rw_row = RowInfo{};
  forward(r, vis);
  return true;
}

void HeadPass::row_end(int64_t r) {
  forward_finish(r, rw_row);
  if (bwd) backward(r, rw_vis, rw_row);
}

void HeadPass::end_block(int64_t rows) {
  const Problem& p = k.p;
  if (!bwd) return;
  finish_dq(rows);
  const Eigen::Map<const Mat> Q(&k.in.q[size_t(offset_q(p, b, h, i0))], rows, p.d);      // (R, d)
  const Eigen::Map<const Mat> dO(&k.in.d_o[size_t(offset_o(p, b, h, i0))], rows, k.dv);  // (R, d_v)
  E_dk.noalias() += beta_k.transpose() * Q.cwiseAbs();
  E_dv.noalias() += beta_v.transpose() * dO.cwiseAbs();
  if (k.kv_head_phi > 0) {
    M_dk.noalias() += mag_k.transpose() * Q.cwiseAbs();
    M_dv.noalias() += mag_v.transpose() * dO.cwiseAbs();
  }
}

namespace {

// Key tiles: the running max can move at tile t only if some score of t may exceed every earlier
// one; a rescale by exp(m_old - m_new) errs only then (exp(0) = 1 when declared exact). Its
// argument's roundings telescope: together at most u (max s - the running max at the weight's tile).
// Tiles start at multiples of the block in key index: a window's first key sits `off` into its tile.
KeyTiles key_tiles(const std::vector<Score>& sc, int64_t n_t, int64_t off, int64_t bt, bool exp_exact_at_zero,
                   int64_t n_keys, int64_t sink_tile) {
  const int64_t n_v = int64_t(sc.size());
  KeyTiles kt;
  kt.t_lo.assign(size_t(n_t), -kInf), kt.t_hi.assign(size_t(n_t), -kInf);
  kt.pre_lo.resize(size_t(n_t)), kt.pre_hi.resize(size_t(n_t));
  kt.moves_after.assign(size_t(n_t), 0.0);
  for (int64_t j = 0; j < n_v; ++j) {
    const size_t t = size_t(j < n_keys ? (off + j) / bt : sink_tile);  // the sink: a tile of its own
    kt.t_lo[t] = std::max(kt.t_lo[t], sc[size_t(j)].s - sc[size_t(j)].e_hat);
    kt.t_hi[t] = std::max(kt.t_hi[t], sc[size_t(j)].s + sc[size_t(j)].e_hat);
  }
  for (int64_t t = 0; t < n_t; ++t) {
    kt.pre_lo[size_t(t)] = std::max(t ? kt.pre_lo[size_t(t - 1)] : -kInf, kt.t_lo[size_t(t)]);
    kt.pre_hi[size_t(t)] = std::max(t ? kt.pre_hi[size_t(t - 1)] : -kInf, kt.t_hi[size_t(t)]);
  }
  for (int64_t t = n_t - 2; t >= 0; --t)
    kt.moves_after[size_t(t)] = kt.moves_after[size_t(t + 1)] +
                                (!exp_exact_at_zero || kt.t_hi[size_t(t + 1)] >= kt.pre_lo[size_t(t)] ? 1.0 : 0.0);
  return kt;
}

// The row's maximum, when no other score can reach it: its weight is exp(0) = 1 exactly (the max
// subtracts itself exactly), so rounding it to storage is exact too. -1 when there is no such key.
int64_t exact_max_key(const std::vector<Score>& sc, const Arithmetic& ar) {
  const int64_t n_v = int64_t(sc.size());
  int64_t j_max = 0;
  for (int64_t j = 1; j < n_v; ++j)
    if (sc[size_t(j)].s > sc[size_t(j_max)].s) j_max = j;
  double others = -kInf;
  for (int64_t j = 0; j < n_v; ++j)
    if (j != j_max) others = std::max(others, sc[size_t(j)].s + sc[size_t(j)].e_hat);
  const bool exact_max =
      ar.exp_exact_at_zero && !ar.p_normalised && sc[size_t(j_max)].s - sc[size_t(j_max)].e_hat > others;
  return exact_max ? j_max : -1;
}

}  // namespace

RowScores HeadPass::scores(int64_t r, KeyRange vis) {
  const Problem& p = k.p;
  const int64_t jb = vis.begin, n_v = vis.end - vis.begin, i = i0 + r;
  const double* q = &k.in.q[size_t(offset_q(p, b, h, i))];  // (d)
  const double scale = std::fabs(p.scale);
  double q_abs_sum = 0;
  for (int64_t c = 0; c < p.d; ++c) q_abs_sum += std::fabs(q[c]);
  sc.resize(size_t(n_v));
  RowScores rs;
  const bool masked = per_key_mask(p);
  for (int64_t j = 0; j < n_v; ++j) {
    Score& s = sc[size_t(j)];
    const int64_t ja = jb + j;
    s = Score{};
    const double a = (*pA)(r, ja);
    s.s = p.scale * (*pS)(r, ja), s.a = scale * a;
    const double e_dot = scale * k.dot_error(k.w_s, (*pEs)(r, ja), a, q_abs_sum, k_abs_sum[size_t(ja)], p.d);
    s.e_c = k.delta_c * (std::fabs(s.s) + e_dot);
    // The product with the (rounded) scale: one rounding; a baseline then stores S in storage.
    const double after = e_dot + s.e_c + k.us * (std::fabs(s.s) + e_dot + s.e_c);
    s.e_hat = after + k.u_store_s * (std::fabs(s.s) + after) + k.floor_store_s;
    k.transform(s, h, i, ja);
    if (masked) k.add_mask(s, k.in.seq.bias(p, b, h, i, ja));
    if (s.dead) continue;  // weight exactly 0: in no max, no error
    rs.m = std::max(rs.m, s.s), rs.hi_all = std::max(rs.hi_all, s.s + s.e_hat);
    rs.e_dot_max = std::max(rs.e_dot_max, e_dot), rs.e_hat_max = std::max(rs.e_hat_max, s.e_hat);
  }
  return rs;
}

WeightEps HeadPass::weight_errors(const RowScores& rs, const KeyTiles& kt, int64_t off, int64_t bt, int64_t j_exact,
                                  double lse, double err_lse) {
  const Arithmetic& ar = k.ar;
  const int64_t n_v = int64_t(sc.size());
  const bool fa1 = ar.pv.merge == Merge::Serial;  // o kept normalised: each tile also scales its own P V
  const double u = k.us, stored = ar.l_sums_stored_p ? k.u_p / (1 - k.u_p) : 0.0;
  logP.resize(size_t(n_v)), zeta.resize(size_t(n_v)), d_o_w.resize(size_t(n_v)), d_l.resize(size_t(n_v));
  w_hat.resize(size_t(n_v)), e_lp.resize(size_t(n_v));
  WeightEps we;
  for (int64_t j = 0; j < n_v; ++j) {
    const Score& s = sc[size_t(j)];
    if (s.dead) {  // a masked key: the kernel's weight is exp(-inf) = 0 exactly
      d_o_w[size_t(j)] = d_l[size_t(j)] = 0, logP[size_t(j)] = -kInf, zeta[size_t(j)] = 0, e_lp[size_t(j)] = 0;
      continue;
    }
    const int64_t t = tile_of(j, off, bt);
    double common = k.e_exp + u * (std::fabs(s.s - rs.m) + 2 * rs.e_hat_max) + (j != j_exact ? stored : 0.0);
    common += kt.moves_after[size_t(t)] * k.e_exp + u * std::max(0.0, rs.hi_all - kt.pre_lo[size_t(t)]);
    if (fa1) common += k.e_exp + u * std::max(0.0, kt.pre_hi[size_t(t)] - kt.t_lo[size_t(t)]);
    // o: the constant's rounding scales every s - m alike (not through softcap or ALiBi); lse: it
    // shifts the scores themselves.
    d_o_w[size_t(j)] =
        (k.common_scale ? (s.e_hat - s.e_c) + k.delta_c * (std::fabs(s.s - rs.m) + 2 * rs.e_dot_max) : s.e_hat) +
        common;
    d_l[size_t(j)] = s.e_hat + common;
    we.eps = std::max(we.eps, d_o_w[size_t(j)]), we.eps_lse = std::max(we.eps_lse, d_l[size_t(j)]);
    // The exact log P <= 0; its fp64 evaluation errs by zeta (s in fp64, the certified lse's error).
    logP[size_t(j)] = std::min(0.0, s.s - lse);
    zeta[size_t(j)] =
        double(k.p.d + 4) * 0x1p-53 * s.a + 0x1p-51 * (std::fabs(s.s) + std::fabs(lse) + 1) + s.z + err_lse;
    e_lp[size_t(j)] = std::exp(logP[size_t(j)] + zeta[size_t(j)]);
  }
  // Computed weights, normalised by their own exact sum: P^_j = P_j e^eta_j / Z, |eta_j| <= delta_j,
  // Z >= e^-eps, so P^_j <= P_j e^(delta_j + eps) (and <= 1).
  for (int64_t j = 0; j < n_v; ++j)
    w_hat[size_t(j)] = std::min(1.0, std::exp(logP[size_t(j)] + zeta[size_t(j)] + d_o_w[size_t(j)] + we.eps));
  return we;
}

void HeadPass::o_coefs(int64_t oo, const ChainWeights& wpv, int64_t o_pv, int64_t j_exact, double tiny_w) {
  const Arithmetic& ar = k.ar;
  const int64_t n_v = int64_t(sc.size());
  const double u = k.us;
  // o, column by column at once: W's coefficients, and P V's chain, term j's weight on |v_jc|.
  const double pv_up = (ar.l_sums_stored_p ? 0.0 : k.u_p) + (ar.p_normalised ? gamma(ar.o_normalise + 1, u) : 0.0);
  coef_w.resize(size_t(n_v)), coef_acc.resize(size_t(n_v));
  double acc0 = 0;  // the operands' underflow, the same for every column
  for (int64_t j = 0; j < n_v; ++j) {
    const double w = w_hat[size_t(j)], kap = wpv.kappa[size_t(j < n_keys ? o_pv + j : sink_pos_pv)];
    // Sum_j (P^_j - P_j)(v_j - o) = (1/Z) sum_j P_j (e^eta_j - 1)(v_j - o): o is P's own average.
    coef_w[size_t(j)] = p_expm1(logP[size_t(j)] + zeta[size_t(j)], d_o_w[size_t(j)], e_lp[size_t(j)]);
    coef_acc[size_t(j)] = kap * w + (1 + kap) * ((j != j_exact ? pv_up : 0.0) * w + k.floor_p + tiny_w + w * k.u_in);
    acc0 += (1 + kap) * w * k.floor_in;
  }
  rw.acc0 = acc0;
  const int64_t dv = k.dv;
  err_o.assign(size_t(dv), 0.0);  // (d_v) the certified o's own error: o_exact is within it
  for (int64_t c = 0; c < dv; ++c) err_o[size_t(c)] = at(k.ref.err.o, oo + c);
  w_sum.assign(size_t(dv), 0.0), R_max.assign(size_t(dv), 0.0), e_acc.assign(size_t(dv), 0.0);
}

void o_sums(HeadPass* const* hps, int64_t n) {
  HeadPass& h0 = *hps[0];
  const int64_t n_v = int64_t(h0.sc.size()), dv = h0.k.dv, jb = h0.rw.jb;
  const double* o = &h0.k.ref.value.o[size_t(h0.rw.oo)];  // (d_v)
  const std::vector<double>& err_o = h0.err_o;
  std::vector<double>& R_max = h0.R_max;
  // Where o, its error and the key's factor are finite, times(cw, x) is cw * x and std::max is
  // Eigen's max: the same operations in the same order, in vector registers (bitwise the same).
  using Row = Eigen::Map<Eigen::ArrayXd>;
  using CRow = Eigen::Map<const Eigen::ArrayXd>;
  const CRow o_r(o, dv), err_r(err_o.data(), dv);
  Row max_r(R_max.data(), dv);
  const bool finite_row = h0.v_finite && o_r.isFinite().all() && err_r.isFinite().all();
  Eigen::ArrayXd& x = h0.x_key;   // (d_v) one key's |v - o| + err_o
  Eigen::ArrayXd& av = h0.v_key;  // (d_v) its |v|
  x.resize(dv), av.resize(dv);
  for (int64_t j = 0; j < n_v; ++j) {
    if (h0.sc[size_t(j)].dead) continue;  // weight exactly 0 and its v not read
    const double* v = j < h0.n_keys ? h0.V.data() + (jb + j) * dv : h0.zero_v.data();  // (d_v); the sink's is 0
    const CRow v_r(v, dv);
    if (finite_row) {
      x = (v_r - o_r).abs() + err_r;
      max_r = max_r.max(x), av = v_r.abs();
    } else {
      for (int64_t c = 0; c < dv; ++c)
        R_max[size_t(c)] = std::max(R_max[size_t(c)], std::fabs(v[c] - o[c]) + err_o[size_t(c)]);
    }
    for (int64_t t = 0; t < n; ++t) {  // each pass's sums: its own coefficients, in key order
      HeadPass& hp = *hps[t];
      const double cw = hp.coef_w[size_t(j)], ca = hp.coef_acc[size_t(j)];
      if (finite_row && std::isfinite(cw)) {
        Row w_r(hp.w_sum.data(), dv), acc_r(hp.e_acc.data(), dv);
        w_r += cw * x;
        acc_r += ca * av;
        continue;
      }
      for (int64_t c = 0; c < dv; ++c) {
        const double dvc = std::fabs(v[c] - o[c]) + err_o[size_t(c)];
        hp.w_sum[size_t(c)] += times(cw, dvc);
        hp.e_acc[size_t(c)] += ca * std::fabs(v[c]);
      }
    }
  }
  for (int64_t t = 1; t < n; ++t) hps[t]->R_max = R_max;  // the same keys, v, o and err_o
}

void HeadPass::o_finish(int64_t oo, const ChainWeights& wpv, LSum l, double eps) {
  const Arithmetic& ar = k.ar;
  const double u = k.us, acc0 = rw.acc0;
  const double* o = &k.ref.value.o[size_t(oo)];  // (d_v)
  e_o.assign(size_t(k.dv), 0.0);
  const double exp_eps = std::exp(eps), chain_scale = wpv.scale(), chain_floors = wpv.floors();
  const double g_norm = gamma(ar.o_normalise, u);
  for (int64_t c = 0; c < k.dv; ++c) {
    const double ao = std::fabs(o[c]);
    const double W = std::min(times(exp_eps, w_sum[size_t(c)]), 2 * R_max[size_t(c)]);
    const double E_acc = (e_acc[size_t(c)] + acc0) * chain_scale + chain_floors;
    // o^ = acc^ / l^: (acc^ - o l^) / l^ with |l^ / Z - 1| <= dev and l^ / Z >= low.
    double e = l.low > 0 ? W + (E_acc + l.dev * (ao + W)) / l.low : kInf;
    if (!ar.p_normalised) e += g_norm * (ao + e);  // 1/l rounded
    e += k.ftz ? k.floor_s : 0.0;                                    // the product flushed
    B.o[size_t(oo + c)] = rounded_bound(o[c], e, err_o[size_t(c)], ar.soft, k.out_o, true) * kSlack;
    e_o[size_t(c)] = B.o[size_t(oo + c)];  // |kernel o - exact o|, for D
  }
}

double HeadPass::lse_bound(int64_t ol, double lse, double err_lse, double m, double eps_lse, LSum l) {
  const Arithmetic& ar = k.ar;
  const int64_t n_v = int64_t(sc.size());
  // lse = m + log l (base 2: ln 2 (m2 + log2 l)): the shift m cancels; the weights' arguments, l's
  // chain and the log remain; then the add (base 2: and the product with a rounded ln 2). The
  // weights' share: lse^ - lse = log sum_j P_j e^eta_j, |eta_j| <= d_l_j, lies between
  // log(1 - sum_j P_j (1 - e^-d_l_j)) and log(1 + sum_j P_j (e^d_l_j - 1)).
  double up = 0, down = 0;
  for (int64_t j = 0; j < n_v; ++j) {
    const double y = logP[size_t(j)] + zeta[size_t(j)], lp = std::min(0.0, y), e = exp_known(lp, y, e_lp[size_t(j)]);
    up += p_expm1(lp, d_l[size_t(j)], e), down += e * -std::expm1(-d_l[size_t(j)]);
  }
  const double e_w = std::min(eps_lse, std::max(up, down < 1 ? -std::log1p(-down) : kInf));
  // |log(l^ / Z)| <= max(log(1 + dev), -log(low)); -log(low) is the larger where low = 1 - dev.
  const double e_log_l = l.low > 0 ? std::max(std::log1p(l.dev), -std::log(l.low)) : kInf;
  double e_lse = e_w + e_log_l + k.log_rel * (std::fabs(lse - m) + e_w + e_log_l) + k.floor_s;
  if (ar.base2) e_lse += (k.us + k.delta_ln2) * (std::fabs(lse) + e_lse);
  B.lse[size_t(ol)] = rounded_bound(lse, e_lse, err_lse, ar.soft, k.lse_type, true) * kSlack;
  return B.lse[size_t(ol)];
}

void HeadPass::forward(int64_t r, KeyRange vis) {
  const Problem& p = k.p;
  const Arithmetic& ar = k.ar;
  // Row i sees keys [jb, jb + n_v); local index j is key jb + j.
  const int64_t jb = vis.begin, n_v = vis.end - vis.begin;
  const int64_t i = i0 + r, oo = offset_o(p, b, h, i), ol = offset_lse(p, b, h, i);
  const double lse = k.ref.value.lse[size_t(ol)], err_lse = at(k.ref.err.lse, ol);
  RowScores rs = scores(r, vis);
  n_keys = n_v;
  const double sink = p.sinks ? k.in.seq.sinks[size_t(h)] : -kInf;
  const bool has_sink = std::isfinite(sink);
  if (has_sink) {
    // The sink: exact (an fp32 logit) but for its rounding to the element-wise type and, in base 2,
    // the product with a rounded log2 e; no dot, no scale.
    Score s;
    s.s = sink;
    s.e_hat = std::fabs(sink) * (k.us + (ar.base2 ? k.delta_l2e + k.us : 0.0)) * (1 + 4 * k.us) + k.floor_s;
    sc.push_back(s);
    rs.m = std::max(rs.m, s.s), rs.hi_all = std::max(rs.hi_all, s.s + s.e_hat);
    rs.e_hat_max = std::max(rs.e_hat_max, s.e_hat);
    zero_v.assign(size_t(k.dv), 0.0);
  }
  const int64_t bt = ar.pv.block > 0 ? ar.pv.block : std::max<int64_t>(n_v, 1), off = ar.pv.block > 0 ? jb % bt : 0;
  const int64_t n_t_keys = (off + n_v + bt - 1) / bt;
  const int64_t n_t = n_t_keys + (has_sink ? 1 : 0);
  sink_tile = has_sink ? n_t_keys : -1;
  const KeyTiles kt = key_tiles(sc, n_t, off, bt, ar.exp_exact_at_zero, n_keys, sink_tile);
  const int64_t j_exact = exact_max_key(sc, ar);
  const WeightEps we = weight_errors(rs, kt, off, bt, j_exact, lse, err_lse);
  // l: the declared chain over the weights; each exp may underflow (absolute floor_s against a
  // largest weight exp(0) = 1, up to the exp's own error).
  const double tiny_w = k.floor_s / (ar.exp_exact_at_zero ? 1.0 : 1 - k.e_exp);
  // The key tiles the row's query tile walks past the row's last key: FA1 merges each (an empty
  // partial); a rescale there multiplies by exp(0), exact only when declared so.
  const int64_t bm = std::max(1, ar.block_m), i_last = std::min<int64_t>(p.n_q, (i / bm + 1) * bm) - 1;
  const int64_t walked = (visible_keys(p, i_last, p.n_q, p.n_k).end - (jb - off) + bt - 1) / bt;
  auto extra = [&](const Chain& c) {
    if (c.block <= 0 || (c.merge == Merge::Rescale && ar.exp_exact_at_zero)) return int64_t(0);
    return std::max<int64_t>(0, walked - n_t);
  };
  const int64_t o_l = key_offset(ar.l, jb), o_pv = key_offset(ar.pv, jb);
  // The sink's chain position: a new block after the keys' (the kernel adds it after the last tile).
  auto next_block = [](const Chain& c, int64_t n) { return c.block > 0 ? (n + c.block - 1) / c.block * c.block : n; };
  sink_pos_l = next_block(ar.l, o_l + n_v), sink_pos_pv = next_block(ar.pv, o_pv + n_v);
  const int64_t len_l = has_sink ? sink_pos_l + 1 : o_l + n_v, len_pv = has_sink ? sink_pos_pv + 1 : o_pv + n_v;
  // Rows of a block mostly share their lengths (every row, without a mask): the weights are a pure
  // function of (length, extra merges), kept from the previous row.
  const ChainWeights& wl = memo_l.get(ar.l, len_l, k.ftz, extra(ar.l));
  const ChainWeights& wpv = memo_pv.get(ar.pv, len_pv, k.ftz, extra(ar.pv));
  double E_l = 0;
  for (int64_t j = 0; j < int64_t(sc.size()); ++j) {
    const double kl = wl.kappa[size_t(j < n_keys ? o_l + j : sink_pos_l)];
    E_l += kl * w_hat[size_t(j)] + (1 + kl) * tiny_w;
  }
  E_l = E_l * wl.scale() + wl.floors();
  // l^'s lower side. Two-sided, 1 - E_l, while E_l < 1/2. Past it (a long row summed in a 16-bit
  // accumulator: 4096 serial fp16 adds give kappa_max = 2) l, a sum of non-negative terms, keeps at
  // least (1 - c u) of what each rounding that holds a term receives; every declared step charges
  // c u <= 11 u <= 1/17 for a unit u <= 2^-8, so prod (1 - c_i u) >= exp(-(17/16) kappa_j), and an
  // underflow loses at most the floors (absolute: Z >= 1, its largest weight being exp(0)); with
  // gradual underflow and round-to-nearest adds only the chain's multiplications can (mult_events).
  LSum ls{E_l, 1 - E_l};
  if (!(E_l < 0.5) && unit_roundoff(ar.l.acc) <= 0x1p-8) {
    const bool adds_exact = !k.ftz && ar.l.adder != Adder::TensorCore && !ar.l.truncates;
    const double lost = adds_exact ? grown_floors(wl.mult_events * wl.floor, wl.kappa_max) : wl.floors();
    const double low = std::exp(-(17.0 / 16) * wl.kappa_max) * (1 - 0x1p-50) - lost;
    ls = low > 0 ? LSum{std::max(E_l, 1 - low), low} : LSum{E_l, 0.0};
  }
  o_coefs(oo, wpv, o_pv, j_exact, tiny_w);
  rw.oo = oo, rw.ol = ol, rw.jb = jb, rw.o_pv = o_pv, rw.has_sink = has_sink;
  rw.lse = lse, rw.err_lse = err_lse, rw.m = rs.m, rw.eps = we.eps, rw.eps_lse = we.eps_lse;
  rw.l = ls, rw.tiny_w = tiny_w, rw.wpv = &wpv;
}

void HeadPass::forward_finish(int64_t r, RowInfo& row) {
  o_finish(rw.oo, *rw.wpv, rw.l, rw.eps);
  row.e_lse = lse_bound(rw.ol, rw.lse, rw.err_lse, rw.m, rw.eps_lse, rw.l);
  if (k.ar.p_from != PFrom::Max) lse_normalised(r, rw_vis, *rw.wpv, rw.o_pv, rw.tiny_w, row);
  if (rw.has_sink) sc.pop_back();  // the backward's pairs are the keys alone
}

double sink_only_lse_bound(const Precision& prec, double sink, double err_ref) {
  const Arithmetic& ar = prec.ar;
  const double us = unit_roundoff(ar.soft), r_exp = ar.exp_ulps * 2 * us, e_exp = r_exp / (1 - r_exp);
  constexpr double kLog2e = 1.4426950408889634, kLn2 = 0.6931471805599453;
  // The argument sink - sink: 0 exactly, or (base 2) the difference of two equal roundings: 0. l =
  // exp(0) (and its rounding to storage where the kernel stores P): within e_exp of 1, or 1.
  const double e_l = ar.exp_exact_at_zero ? 0.0 : 2 * e_exp + 2 * unit_roundoff(prec.storage);
  double e = e_l + ar.log_ulps * 2 * us * e_l + (ar.flush_subnormals ? min_normal(ar.soft) : underflow_floor(ar.soft));
  // Base 2: sink log2 e rounded, then ln 2 (m2 + log2 l) rounded twice.
  if (ar.base2) e += (const_err(kLog2e) + const_err(kLn2) + 3 * us) * (std::fabs(sink) + e) * (1 + 4 * us);
  const DType lse_type = prec.storage == DType::F64 ? DType::F64 : DType::F32;
  return rounded_bound(sink, e, err_ref, ar.soft, lse_type, true) * kSlack;
}

}  // namespace model

namespace {

void check_terms(const Problem& p) {
  const int64_t group = p.heads_q / p.heads_kv;
  if (p.n_k > kMaxTerms || group * p.n_q > kMaxTerms || p.d > kMaxTerms || head_dim_v(p) > kMaxTerms)
    throw std::invalid_argument(
        "error model: a sum of more than 2^20 terms (n_k, heads_q/heads_kv * n_q, d or d_v) is "
        "beyond what its evaluation covers");
}

}  // namespace

Bounds error_bounds(const Problem& p, const Tensors64& in, const Certified& ref, const Precision& prec) {
  check_terms(p);
  // Varlen and paged problems: one dense problem per sequence (bounds_variants.cpp).
  if (p.varlen || is_paged(p)) return model::sequence_bounds(p, in, ref, prec);
  return model::dense_bounds(p, in, ref, prec);
}

Bounds error_bounds_max(const Problem& p, const Tensors64& in, const Certified& ref,
                        const std::vector<Precision>& precs) {
  if (precs.empty()) throw std::invalid_argument("error model: no arithmetic to bound");
  std::vector<Bounds> all;
  if (p.varlen || is_paged(p)) {
    for (const Precision& prec : precs) all.push_back(error_bounds(p, in, ref, prec));
  } else {
    check_terms(p);
    all = model::dense_bounds(p, in, ref, precs);
  }
  Bounds out = std::move(all[0]);
  auto widen = [](std::vector<double>& into, const std::vector<double>& b) {
    for (size_t x = 0; x < into.size() && x < b.size(); ++x)
      into[x] =
          (into[x] != into[x] || b[x] != b[x]) ? std::numeric_limits<double>::quiet_NaN() : std::max(into[x], b[x]);
  };
  for (size_t x = 1; x < all.size(); ++x)
    widen(out.o, all[x].o), widen(out.lse, all[x].lse), widen(out.d_q, all[x].d_q), widen(out.d_k, all[x].d_k),
        widen(out.d_v, all[x].d_v);
  return out;
}

namespace model {

namespace {

// One row block of every arithmetic's pass, row by row: the first pass's products of the inputs
// shared, and each row's pass over keys x d_v for o's bound run once for all passes (o_sums).
void run_block(std::vector<HeadPass>& hps, int64_t h, int64_t i0, int64_t rows) {
  for (size_t x = 0; x < hps.size(); ++x) hps[x].begin_block(h, i0, rows, x > 0 ? &hps[0] : nullptr);
  std::vector<HeadPass*> live;
  live.reserve(hps.size());
  for (int64_t r = 0; r < rows; ++r) {
    live.clear();
    for (HeadPass& hp : hps)
      if (hp.row_begin(r)) live.push_back(&hp);
    if (live.empty()) continue;
    o_sums(live.data(), int64_t(live.size()));
    for (HeadPass* hp : live) hp->row_end(r);
  }
  for (HeadPass& hp : hps) hp.end_block(rows);
}

}  // namespace

std::vector<Bounds> dense_bounds(const Problem& p, const Tensors64& in, const Certified& ref,
                                 const std::vector<Precision>& precs) {
  const int64_t group = p.heads_q / p.heads_kv, n_prec = int64_t(precs.size());
  const bool bwd = !in.d_o.empty();
  std::vector<std::unique_ptr<Consts>> ks;
  std::vector<Bounds> Bs(precs.size());
  std::vector<std::pair<std::vector<double>*, int64_t>> arrays;  // each arithmetic's, zeroed a task each
  for (size_t x = 0; x < precs.size(); ++x) {
    ks.push_back(std::make_unique<Consts>(p, in, ref, precs[x]));
    Bounds& B = Bs[x];
    arrays.insert(arrays.end(), {{&B.o, numel_o(p)}, {&B.lse, numel_lse(p)}});
    if (bwd) arrays.insert(arrays.end(), {{&B.d_q, numel_q(p)}, {&B.d_k, numel_kv(p)}, {&B.d_v, numel_v(p)}});
  }
  zero_each(arrays);
  if (precs.empty()) return Bs;
  bool phi = false;
  for (const auto& k : ks) phi = phi || k->kv_head_phi > 0;
  const Consts& k = *ks[0];
  // One pass per arithmetic over each block, the first one's products of the inputs shared.
  auto make_passes = [&](int64_t b, int64_t g) {
    std::vector<HeadPass> hps;
    hps.reserve(size_t(n_prec));
    for (int64_t x = 0; x < n_prec; ++x) hps.emplace_back(*ks[size_t(x)], Bs[size_t(x)], bwd), hps.back().kv_head(b, g);
    return hps;
  };
  // A kv head's row blocks (its group's heads, then rows) are dealt round robin to `lanes` lanes,
  // each with its own d_k, d_v sums, added in lane order before finish_kv: the lanes depend only on
  // the problem, so the bounds are bitwise the same on any number of threads. At most kLanes, and
  // fewer where their (n_k, d + d_v) sums would pass ~1 GiB together.
  constexpr int64_t kLanes = 16;
  const int64_t rows = block_rows(p.n_k), blocks_per_head = (int64_t(p.n_q) + rows - 1) / rows;
  const int64_t blocks = group * blocks_per_head;
  const int64_t sums = std::max<int64_t>(1, int64_t(p.n_k) * (p.d + k.dv) * (phi ? 2 : 1) * n_prec);
  const int64_t lanes = std::clamp<int64_t>(std::min(blocks, (int64_t(1) << 27) / sums), 1, kLanes);
  // One lane of kv head (b, g): its blocks into each arithmetic's pass (kv_head already called).
  auto run_lane = [&](std::vector<HeadPass>& hps, int64_t g, int64_t lane) {
    for (int64_t blk = lane; blk < blocks; blk += lanes) {
      const int64_t h = g * group + blk / blocks_per_head, i0 = blk % blocks_per_head * rows;
      run_block(hps, h, i0, std::min<int64_t>(rows, p.n_q - i0));
    }
  };
  const int64_t n_groups = int64_t(p.batch) * p.heads_kv;
  const SerialScope small(double(p.batch) * p.heads_q * p.n_q * double(p.n_k) * double(p.d + k.dv) < double(1 << 22));
  if (lanes == 1) {  // the kv heads side by side, each on one lane
    parallel_for(n_groups, [&](int64_t bg) {
      std::vector<HeadPass> hps = make_passes(bg / p.heads_kv, bg % p.heads_kv);
      run_lane(hps, bg % p.heads_kv, 0);
      for (HeadPass& hp : hps)
        if (bwd) hp.finish_kv();
    });
    return Bs;
  }
  struct LaneSums {
    Mat E_dk, E_dv, M_dk, M_dv;
    std::vector<double> beta0_k, beta0_v;
  };
  std::vector<LaneSums> part(static_cast<size_t>(lanes * n_prec));  // lane-major
  for (int64_t bg = 0; bg < n_groups; ++bg) {  // kv heads one after another, their lanes side by side
    const int64_t b = bg / p.heads_kv, g = bg % p.heads_kv;
    parallel_for(lanes, [&](int64_t lane) {
      std::vector<HeadPass> hps = make_passes(b, g);
      run_lane(hps, g, lane);
      for (int64_t x = 0; x < n_prec; ++x) {
        HeadPass& hp = hps[size_t(x)];
        LaneSums& ls = part[size_t(lane * n_prec + x)];
        ls.E_dk = std::move(hp.E_dk), ls.E_dv = std::move(hp.E_dv), ls.M_dk = std::move(hp.M_dk);
        ls.M_dv = std::move(hp.M_dv), ls.beta0_k = std::move(hp.beta0_k), ls.beta0_v = std::move(hp.beta0_v);
      }
    });
    if (!bwd) continue;
    for (int64_t x = 0; x < n_prec; ++x) {
      HeadPass hp(*ks[size_t(x)], Bs[size_t(x)], bwd);
      hp.kv_head(b, g);
      LaneSums& total = part[size_t(x)];
      for (int64_t lane = 1; lane < lanes; ++lane) {
        const LaneSums& ls = part[size_t(lane * n_prec + x)];
        total.E_dk += ls.E_dk, total.E_dv += ls.E_dv;
        if (hp.k.kv_head_phi > 0) total.M_dk += ls.M_dk, total.M_dv += ls.M_dv;
        for (int64_t j = 0; j < p.n_k; ++j)
          total.beta0_k[size_t(j)] += ls.beta0_k[size_t(j)], total.beta0_v[size_t(j)] += ls.beta0_v[size_t(j)];
      }
      hp.E_dk = std::move(total.E_dk), hp.E_dv = std::move(total.E_dv), hp.M_dk = std::move(total.M_dk);
      hp.M_dv = std::move(total.M_dv), hp.beta0_k = std::move(total.beta0_k), hp.beta0_v = std::move(total.beta0_v);
      hp.finish_kv();
    }
  }
  return Bs;
}

Bounds dense_bounds(const Problem& p, const Tensors64& in, const Certified& ref, const Precision& prec) {
  return std::move(dense_bounds(p, in, ref, std::vector<Precision>{prec})[0]);
}

}  // namespace model
}  // namespace fc::ref
