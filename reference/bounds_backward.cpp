// The error model's backward (recomputation from the saved lse): each (query, key) pair's
// recomputed P and dS with their errors, turned into the coefficients of the gradients' chain sums
// (alpha: d_q over keys; beta: d_k, d_v over the group's query rows), which bounds.cpp multiplies
// out with |k|, |q|, |d_o| as GEMMs. docs/error-model.md, "Backward".
#include <algorithm>
#include <cmath>

#include "bounds_model.hpp"
#include "contract/tensor.hpp"

namespace fc::ref::model {

// Softcap's chain rule: dS = P (dP - D) g with g = 1 - tanh^2(s/c) = sech^2, which the kernel computes
// as 1 - t^ t^ from its own tanh t^ (|t^ - t| <= dt): |t^2 - t^2| <= dt (2|t| + dt), then the square's
// and the subtraction's roundings; the product with the raw dS (stored first by a baseline) is one more.
void cap_derivative(const Consts& k, const Score& s, Pair& pr) {
  const double t = std::fabs(s.t) + 0x1p-40, th = t + s.dt;
  const double e_sq = s.dt * (2 * t + s.dt);
  const double e_g = e_sq + k.us * th * th + k.us * (s.g_hi + e_sq + k.us * th * th) + k.floor_s;
  const double g_bar = std::min(1.0 + e_g, s.g_hi + e_g);
  const double raw_bar = pr.ds_bar * (1 + k.u_store_s) + k.floor_p;
  pr.e_ds = pr.e_ds * g_bar + pr.ds_hi * e_g + k.u_store_s * pr.ds_bar * g_bar + k.floor_p * g_bar +
            k.us * raw_bar * g_bar + k.floor_s;
  pr.ds_hi *= s.g_hi;
  pr.ds_bar = pr.ds_hi + pr.e_ds;
}

Pair backward_pair(const Consts& k, const Score& s, double dp, double mag_dp, double e_dp, double lse, double err_lse,
                   const RowInfo& row, double y_fw, double e_fw) {
  const Problem& p = k.p;
  const Arithmetic& ar = k.ar;
  // A baseline stores dP in storage: relative, and absolute where a tiny dP lands on the subnormal grid.
  e_dp += k.u_store_s * (std::fabs(dp) + e_dp) + k.floor_store_s;
  // P^ = exp(s^ - lse^): the kernel's lse error does not cancel here, nor the scale constant's; base 2
  // also rounds lse2 = lse log2 e (a rounded constant and the product).
  const double e_lse = row.e_lse + (ar.base2 ? (k.delta_l2e + k.us) * (std::fabs(lse) + row.e_lse) : 0.0);
  const double e_arg = s.e_hat + e_lse;
  const double xi = e_arg + k.us * (std::fabs(s.s - lse) + e_arg) + k.e_exp;
  // The exact log P <= 0 (fp64 evaluation error zeta); P^ and P both lie in [0, 1].
  const double logP = std::min(0.0, s.s - lse);
  const double zeta = double(p.d + 4) * 0x1p-53 * s.a + 0x1p-51 * (std::fabs(s.s) + std::fabs(lse) + 1) + s.z + err_lse;
  Pair pr;
  const double y = logP + zeta, e_y = exp_known(y, y_fw, e_fw), lp = std::min(0.0, y);
  pr.P_hi = std::min(1.0, e_y);
  pr.dP_w = std::min(1.0, p_expm1(lp, xi, exp_known(lp, y, e_y))) + k.floor_s;  // the exp may underflow
  pr.P_bar = std::min(1.0, pr.P_hi + pr.dP_w);
  // dS = P (dP - D): the fp64 gap is within gap_err of the exact one.
  const double gap = std::fabs(dp - row.D) + double(k.dv + 1) * 0x1p-53 * mag_dp + row.err_D64;
  const double e_gap = e_dp + row.e_D;
  double e_ds = pr.dP_w * gap + pr.P_bar * e_gap;
  // A baseline rounds P to storage before the product.
  if (ar.ds_from_stored_p) e_ds += (k.u_p * pr.P_bar + k.floor_p) * (gap + e_gap);
  // The subtraction and the product, in the element-wise type (each may underflow).
  e_ds += gamma(2, k.us) * pr.P_bar * (gap + e_gap) + 2 * k.floor_s;
  pr.e_ds = e_ds, pr.ds_hi = pr.P_hi * gap, pr.ds_bar = pr.ds_hi + e_ds;
  if (s.capped) cap_derivative(k, s, pr);
  return pr;
}

namespace {

// The rows of the group that see key j: rows i_first(j) <= i < i_end(j) of every head (a row's
// visible keys are one range whose ends grow with i), in the kernel's order, head-major. Tensor-core steps of kTensorCoreFused rows
// start at multiples of it in every head (n_q16 is a multiple of 16).
struct KvRows {
  int64_t i_first, per_head, n, steps_per_head, n_steps;
};
KvRows kv_rows(const Consts& k, int64_t j) {
  KvRows r;
  const int64_t i_end = k.kv_i1[size_t(j)];  // the rows [i_first, i_end) of each head see key j
  r.i_first = k.kv_i0[size_t(j)];
  r.per_head = std::max<int64_t>(0, i_end - r.i_first), r.n = k.group * r.per_head;
  r.steps_per_head = r.per_head > 0 ? (i_end - 1) / kTensorCoreFused - r.i_first / kTensorCoreFused + 1 : 0;
  r.n_steps = k.group * r.steps_per_head;
  return r;
}

}  // namespace

double kv_kappa(const Consts& k, int64_t j, int64_t hl, int64_t i) {
  if (!is_plain(k.ar.dkv)) return k.w_kv_full.kappa[size_t(hl * k.n_q16 + i)];
  const KvRows r = kv_rows(k, j);
  const int64_t step = hl * r.steps_per_head + i / kTensorCoreFused - r.i_first / kTensorCoreFused;
  return plain_kappa(k.ar.dkv, hl * r.per_head + i - r.i_first, r.n, step, r.n_steps);
}

double kv_kappa_max(const Consts& k, int64_t j) {
  if (!is_plain(k.ar.dkv)) return k.w_kv_full.kappa_max;
  const KvRows r = kv_rows(k, j);
  return r.n > 0 ? plain_kappa(k.ar.dkv, 0, r.n, 0, r.n_steps) : 0.0;
}

double kv_events(const Consts& k, int64_t j) {
  if (!is_plain(k.ar.dkv)) return k.w_kv_full.events;
  const KvRows r = kv_rows(k, j);
  return double(r.n) * 3 + double(r.n_steps);
}

void HeadPass::backward(int64_t r, KeyRange vis, RowInfo& row) {
  const Problem& p = k.p;
  const int64_t jb = vis.begin, n_v = vis.end - vis.begin;  // local key j is key jb + j
  const int64_t i = i0 + r, oo = offset_o(p, b, h, i), ol = offset_lse(p, b, h, i), hl = h - g * k.group;
  const double* d_o = &k.in.d_o[size_t(oo)];     // (d_v)
  const double* o = &k.ref.value.o[size_t(oo)];  // (d_v)
  // D = d_o . o along its chain, from the kernel's own o (within e_o of the exact one).
  double D = 0, weighted = 0, plain = 0, from_o = 0, sum_do = 0, sum_o = 0, err_D64 = 0;
  for (int64_t c = 0; c < k.dv; ++c) {
    const double ad = std::fabs(d_o[c]), kap = k.w_D.kappa[size_t(c)];
    D += d_o[c] * o[c];
    weighted += kap * ad * std::fabs(o[c]), plain += ad * std::fabs(o[c]);
    from_o += (1 + kap) * ad * e_o[size_t(c)], sum_do += ad, sum_o += std::fabs(o[c]);
    err_D64 += ad * at(k.ref.err.o, oo + c);
  }
  row.D = D;
  row.e_D = k.dot_error(k.w_D, weighted, plain, sum_do, sum_o, k.dv) + from_o * k.w_D.scale();
  row.err_D64 = err_D64 + double(k.dv + 1) * 0x1p-53 * plain;
  const double lse = k.ref.value.lse[size_t(ol)], err_lse = at(k.ref.err.lse, ol);
  const int64_t o_dq = key_offset(k.ar.dq, jb);
  const ChainWeights& wdq = memo_dq.get(k.ar.dq, o_dq + n_v, k.ftz, 0);
  dq_scale[size_t(r)] = wdq.scale(), dq_floor[size_t(r)] = wdq.floors();
  for (int64_t j = 0; j < n_v; ++j) {
    const int64_t ja = jb + j;
    if (sc[size_t(j)].dead) continue;  // a masked key: P = 0 and dS = 0 exactly, no term
    const double mag = (*pMDP)(r, ja);
    const double e_dp = k.dot_error(k.w_dp, (*pEdp)(r, ja), mag, sum_do, v_abs_sum[size_t(ja)], k.dv);
    const Pair pr = backward_pair(k, sc[size_t(j)], (*pDP)(r, ja), mag, e_dp, lse, err_lse, row,
                                  logP[size_t(j)] + zeta[size_t(j)], e_lp[size_t(j)]);
    // Each term of the sums carries its own error (dS^ or P^, its rounding to the operand type) and
    // its operand's rounding; the chain charges the rest.
    const double e_ds = pr.e_ds + k.u_p * pr.ds_bar + k.floor_ds + pr.ds_bar * k.u_in;
    const double e_p = pr.dP_w + k.u_p * pr.P_bar + k.floor_p + pr.P_bar * k.u_in;
    const double kq = wdq.kappa[size_t(o_dq + j)], kk = kv_kappa(k, ja, hl, i);
    alpha(r, ja) = kq * pr.ds_hi + (1 + kq) * e_ds;
    alpha0[size_t(r)] += (1 + kq) * pr.ds_bar * k.floor_in;
    beta_k(r, ja) = kk * pr.ds_hi + (1 + kk) * e_ds;
    beta_v(r, ja) = kk * pr.P_hi + (1 + kk) * e_p;
    if (k.kv_head_phi > 0) mag_k(r, ja) = pr.ds_hi, mag_v(r, ja) = pr.P_hi;
    beta0_k[size_t(ja)] += (1 + kk) * pr.ds_bar * k.floor_in, beta0_v[size_t(ja)] += (1 + kk) * pr.P_bar * k.floor_in;
  }
}

void HeadPass::finish_dq(int64_t rows) {
  const Problem& p = k.p;
  const Mat E = alpha * Kabs;  // (R, d): sum_j alpha_ij |k_jc|
  const double scale = std::fabs(p.scale), floor = k.ftz ? k.floor_s : 0.0, floor_scale = std::max(1.0, scale);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r, oq = offset_q(p, b, h, i);
    const KeyRange vis = visible_keys(p, i, p.n_q, p.n_k);
    if (!k.any_live(b, h, i, vis)) continue;
    for (int64_t c = 0; c < p.d; ++c) {
      const double dq = k.ref.value.d_q[size_t(oq + c)], err = at(k.ref.err.d_q, oq + c);
      const double chain = (E(r, c) + alpha0[size_t(r)]) * dq_scale[size_t(r)];
      // d_q = scale' * acc: the constant's rounding; the product is the output's last rounding. The
      // chain's underflow floor times max(1, |scale|): a kernel that scales its terms before the sum
      // loses them unscaled, one that scales the sum loses them scaled.
      const double e = scale * (1 + k.delta_out) * chain + floor_scale * (1 + k.delta_out) * dq_floor[size_t(r)] +
                       times(k.delta_out, std::fabs(dq) + err) + floor;
      B.d_q[size_t(oq + c)] = rounded_bound(dq, e, err, k.ar.soft, k.out_q, true) * kSlack;
    }
  }
}

void HeadPass::finish_kv() {
  const Problem& p = k.p;
  // Stored-head sums of a huge group (phi past ~1e30, or +inf past G ~ 1.8e5 at BF16): any finite
  // stored value y has |y| <= max_finite, so |y - exact| <= max_finite + |r| + err_r, a bound that
  // also admits an overflow to either infinity (within_bound): the model's bound, at most that.
  const double top = max_finite(k.out_kv);
  auto capped = [&](double bound, double r, double err_r) {
    if (!(k.kv_head_phi > 0) || std::isnan(bound) || std::isnan(r)) return bound;
    return std::min(bound, (top + std::fabs(r) + err_r) * kSlack);
  };
  const double scale = std::fabs(p.scale), floor = k.ftz ? k.floor_s : 0.0, floor_scale = std::max(1.0, scale);
  const double f_kv = k.ftz ? min_normal(k.ar.dkv.acc) : underflow_floor(k.ar.dkv.acc);
  for (int64_t j = 0; j < p.n_k; ++j) {
    const double km = kv_kappa_max(k, j), sc_j = chain_scale(km);
    const double fl = grown_floors(kv_events(k, j) * f_kv, km);
    for (int64_t c = 0; c < p.d; ++c) {
      const int64_t x = offset_kv(p, b, g, j) + c;
      const double dk = k.ref.value.d_k[size_t(x)], ek = at(k.ref.err.d_k, x);
      // d_k = scale' * acc (the product is the last rounding). Per-head gradients stored
      // (kv_head_phi): the heads' chains, each term's factor after them and its share of sum |terms|.
      double chain_k = (E_dk(j, c) + beta0_k[size_t(j)]) * sc_j;
      if (k.kv_head_phi > 0) chain_k = chain_k * (1 + k.kv_head_phi) + times(k.kv_head_phi, M_dk(j, c));
      // A per-head d_k stored scaled or unscaled (then scaled): its floor is max(1, |scale|) kv_head_floor.
      const double e_k = scale * (1 + k.delta_out) * chain_k +
                         floor_scale * (1 + k.delta_out) * (fl * (1 + k.kv_head_phi) + k.kv_head_floor) +
                         times(k.delta_out, std::fabs(dk) + ek) + floor;
      B.d_k[size_t(x)] = capped(rounded_bound(dk, e_k, ek, k.ar.soft, k.out_kv, true) * kSlack, dk, ek);
    }
    for (int64_t c = 0; c < k.dv; ++c) {  // d_v = acc, converted to storage
      const int64_t x = offset_v(p, b, g, j) + c;
      const double dv = k.ref.value.d_v[size_t(x)], ev = at(k.ref.err.d_v, x);
      double chain_v = (E_dv(j, c) + beta0_v[size_t(j)]) * sc_j;
      if (k.kv_head_phi > 0) chain_v = chain_v * (1 + k.kv_head_phi) + times(k.kv_head_phi, M_dv(j, c));
      const double e_v = chain_v + fl * (1 + k.kv_head_phi) + k.kv_head_floor + floor;
      B.d_v[size_t(x)] = capped(rounded_bound(dv, e_v, ev, k.ar.soft, k.out_kv, false) * kSlack, dv, ev);
    }
  }
}

}  // namespace fc::ref::model
