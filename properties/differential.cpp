// Differential bounds: the derivation is docs/error-model.md, "Differential bounds". Notation as
// there and in reference/bounds.cpp: s scores (fp64 from the inputs), a = |scale| |q||k|, m the row
// max, M the largest |s|, T the key tiles a row visits, u the accumulation unit, u_p P's unit.
// Magnitudes come from the certified reference (lse, o) or, for the gradients, from the runs' own
// lse and o: they only scale error terms.
#include "properties/differential.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "properties/constants.hpp"
#include "reference/parallel.hpp"
#include "verdict/verdict.hpp"

namespace fc::props {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// An exponent argument s - m is one rounding of two values each rounded once on the way in (the
// scale, log2 e): at most 2 u (|s| + |m|); exp / exp2 within 2 ulp = 4 u (docs/error-model.md §3).
constexpr double kArgRoundings = 2;
constexpr double kExpUnits = 4;
constexpr double kU64 = 0x1p-53;

// A factor times a magnitude; a zero magnitude contributes nothing even when the factor overflowed.
double times(double factor, double magnitude) { return magnitude == 0 ? 0.0 : factor * magnitude; }

// The arithmetic constants of one run (verdict::precision_of's model of kernel k under cfg on p).
struct RunModel {
  double u, u_out, u_p, u_pl, u_sx, tiny_p, tiny_out, acc_floor;
  int64_t block_n;  // keys per tile (n_k when untiled)
  RunModel(const Kernel& k, const Config& cfg, const Problem& p) {
    const ref::Coarse pr = ref::coarse(verdict::precision_of(k, cfg, p));
    u = pr.u_acc, u_out = ref::unit_roundoff(pr.storage), u_p = ref::unit_roundoff(pr.p_dtype);
    u_pl = u_p + (pr.l_sums_rounded_p ? u_p : 0.0);
    u_sx = ref::unit_roundoff(pr.s_dtype) > u ? ref::unit_roundoff(pr.s_dtype) : 0.0;
    const bool ftz = pr.flush_subnormals;
    auto floor_of = [ftz](DType t) { return ftz ? ref::min_normal(t) : ref::underflow_floor(t); };
    tiny_p = floor_of(pr.p_dtype) + floor_of(DType::F32);
    tiny_out = ref::underflow_floor(pr.storage) + (ftz ? ref::min_normal(DType::F32) : 0.0);
    acc_floor = floor_of(u >= 0x1p-12 ? DType::F16 : u >= 0x1p-25 ? DType::F32 : DType::F64);
    block_n = pr.block_n > 0 ? std::min<int64_t>(pr.block_n, p.n_k) : p.n_k;
  }
  // Rescale steps and the chain every accumulated value may pass through: n_v products and sums,
  // and per tile a rescale and (FA1) a renormalisation, then 1/l and the product: gamma(n_v + 5T + 8)
  // bounds any order and grouping of them.
  int64_t tiles(int64_t n_v) const { return (n_v + block_n - 1) / block_n; }
  double chain(int64_t n_v) const { return gamma(double(n_v + 5 * tiles(n_v) + 8), u); }
};

// One row's scores in fp64 and their magnitudes a_j = |scale| sum |q_l k_l|.
void row_scores(const Problem& p, const std::vector<double>& q, const std::vector<double>& k, int64_t b, int64_t h,
                int64_t i, int64_t n_v, std::vector<double>& s, std::vector<double>& a) {
  const double* q_i = &q[size_t(offset_q(p, b, h, i))];  // (d)
  const int64_t g = kv_head(p, int32_t(h));
  for (int64_t j = 0; j < n_v; ++j) {
    const double* k_j = &k[size_t(offset_kv(p, b, g, j))];  // (d)
    double dot = 0, abs_dot = 0;
    for (int64_t c = 0; c < p.d; ++c) dot += q_i[c] * k_j[c], abs_dot += std::fabs(q_i[c] * k_j[c]);
    s[size_t(j)] = p.scale * dot, a[size_t(j)] = std::fabs(p.scale) * abs_dot;
  }
}

// Parallel over rows once the work (n_q n_k d summed over heads) is worth threads.
void for_rows(const Problem& p, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t rows = p.batch * p.heads_q * p.n_q;
  const ref::SerialScope small(double(rows) * double(p.n_k) * double(p.d) < double(1 << 22));
  ref::parallel_rows(rows, 16, fn);
}

// One row's weights as forward_unshared bounds them (docs/error-model.md, "Differential bounds").
struct RowWeights {
  double m = -kInf, M = 0, e_s = 0;  // the row max, the largest |s|, the scores' error envelope
  double own_max = 0, l_dev = 0;     // the largest own deviation delta_j, l's deviation from them
};

// The row's score envelope, then this run's own error in each weight (relative, e^(+-delta_j)) into
// delta and the weights it may hold, relative to the exact P, into w.
RowWeights row_weights(const RunModel& r, const Problem& p, Shared shared, double lse, int64_t n_v,
                       const std::vector<double>& s, const std::vector<double>& a, std::vector<double>& delta,
                       std::vector<double>& w) {
  RowWeights rw;
  for (int64_t j = 0; j < n_v; ++j) {
    rw.m = std::max(rw.m, s[size_t(j)]), rw.M = std::max(rw.M, std::fabs(s[size_t(j)]));
    // The kernel's score error (d products and sums, the scale, the score's own rounding) and
    // fp64's evaluation of s here: they only widen the magnitudes' envelope below.
    rw.e_s = std::max(rw.e_s, gamma(double(p.d + 2), r.u) * a[size_t(j)] + r.u_sx * std::fabs(s[size_t(j)]) +
                                  gamma(double(p.d + 1), kU64) * a[size_t(j)]);
  }
  const int64_t T = r.tiles(n_v);
  // With the scores shared, the argument s_j - m_t and the rescale arguments (which telescope to
  // m - m_t) are differences of shared scores, each rounded once: 3 u (m - s_j), the exp, and per
  // tile a rescale's exp and up to four multiplies. ExactDots adds each run's own rounding of its
  // scaled scores (and of a score rounded to a narrower type). Weights: none.
  for (int64_t j = 0; j < n_v; ++j) {
    const double gap = rw.m - s[size_t(j)] + 2 * rw.e_s;
    double dj = 0;
    if (shared != Shared::Weights) dj = 3 * r.u * gap + kExpUnits * r.u + double(T) * (kExpUnits + 4) * r.u;
    if (shared == Shared::ExactDots)
      dj += (kArgRoundings * r.u + r.u_sx) * (std::fabs(s[size_t(j)]) + std::fabs(rw.m) + 2 * rw.e_s);
    delta[size_t(j)] = dj;
    rw.own_max = std::max(rw.own_max, dj);
    // The weights the run may hold, relative to the exact P: within e^(2 (e_s + delta_j)).
    w[size_t(j)] = std::min(1.0, std::exp(std::min(0.0, s[size_t(j)] - lse) + 2 * (rw.e_s + dj)));
    rw.l_dev += times(std::expm1(dj), w[size_t(j)]);
  }
  return rw;
}

// A row's o: the values v (n_v keys of d columns, row-major) of its keys, the certified o_r and its
// error err_o (d each). Adds each column's error of the run, before the store, to out (d). The keys
// are the outer loop (v's rows are contiguous: a long row's V, column by column, would stream through
// the caches d times per pass); each column's sums still run in key order, as alone.
void add_o_errors(const RunModel& r, Shared shared, const RowWeights& rw, const double* v, int64_t d, int64_t n_v,
                  const double* o_r, const double* err_o, const std::vector<double>& delta,
                  const std::vector<double>& w, double* out) {
  const double g_acc = r.chain(n_v);
  std::vector<double> dev(size_t(d), 0.0), mag(dev), sum_abs(dev), lo(size_t(d), kInf), hi(size_t(d), -kInf);  // (d,)
  for (int64_t j = 0; j < n_v; ++j) {
    const double* v_j = v + j * d;
    for (int64_t c = 0; c < d; ++c) {
      const double x = v_j[c];
      dev[size_t(c)] += times(w[size_t(j)], std::fabs(x - o_r[c])), mag[size_t(c)] += times(w[size_t(j)], std::fabs(x));
      sum_abs[size_t(c)] += std::fabs(x), lo[size_t(c)] = std::min(lo[size_t(c)], x);
      hi[size_t(c)] = std::max(hi[size_t(c)], x);
    }
  }
  // |o(computed scores) - o_ref|: the shared score error moves both runs' target alike.
  std::vector<double> R(static_cast<size_t>(d)), D(R.size()), weights(R.size(), 0.0);  // (d,)
  for (int64_t c = 0; c < d; ++c) {
    R[size_t(c)] = hi[size_t(c)] - lo[size_t(c)];
    D[size_t(c)] = std::min(R[size_t(c)], times(std::expm1(2 * rw.e_s), dev[size_t(c)])) + err_o[c];
  }
  // The weights' own errors move o by sum_j |dP_j| |v_j - o(computed scores)|.
  if (rw.own_max > 0) {
    for (int64_t j = 0; j < n_v; ++j) {
      const double* v_j = v + j * d;
      const double f = times(std::expm1(2 * delta[size_t(j)]), w[size_t(j)]);
      for (int64_t c = 0; c < d; ++c) weights[size_t(c)] += times(f, std::fabs(v_j[c] - o_r[c]) + D[size_t(c)]);
    }
    for (int64_t c = 0; c < d; ++c) weights[size_t(c)] = std::min(R[size_t(c)], weights[size_t(c)]);
  }
  const double p_round = shared == Shared::Weights ? 0.0 : r.u_pl;
  for (int64_t c = 0; c < d; ++c) {
    const double o_mag = std::fabs(o_r[c]) + D[size_t(c)];
    const double e = weights[size_t(c)] + times(p_round + g_acc, mag[size_t(c)]) + times(g_acc, o_mag) +
                     2 * r.u * o_mag + r.tiny_p * sum_abs[size_t(c)] + double(2 * n_v) * r.acc_floor;
    out[c] += (1 + r.u_out) * e + r.u_out * (o_mag + e) + r.tiny_out;
  }
}

}  // namespace

ForwardTolerance operator+(const ForwardTolerance& a, const ForwardTolerance& b) {
  ForwardTolerance t = a;
  for (size_t x = 0; x < t.o.size(); ++x) t.o[x] += b.o[x];
  for (size_t x = 0; x < t.lse.size(); ++x) t.lse[x] += b.lse[x];
  return t;
}

ForwardTolerance forward_unshared(const Kernel& k, const Inputs& in, const ref::Certified& ref, const Config& cfg,
                                  Shared shared) {
  const Problem& p = in.p;
  const RunModel r(k, cfg, p);
  const std::vector<double> q = in.q.to_f64(), kk = in.k.to_f64(), v = in.v.to_f64();
  const double u32 = ref::unit_roundoff(DType::F32);
  ForwardTolerance t;
  t.o.assign(size_t(numel_q(p)), 0.0);
  t.lse.assign(size_t(numel_lse(p)), 0.0);
  for_rows(p, [&](int64_t r0, int64_t r1) {
    std::vector<double> s(static_cast<size_t>(p.n_k)), a(s.size()), w(s.size()), delta(s.size());  // (n_k,)
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t i = row % p.n_q, h = row / p.n_q % p.heads_q, b = row / p.n_q / p.heads_q;
      const int64_t n_v = n_visible(p.mask, i, p.n_q, p.n_k), oq = offset_q(p, b, h, i);
      const int64_t g = kv_head(p, int32_t(h));
      const double lse = ref.value.lse[size_t(row)];
      if (n_v == 0) continue;     // o = 0 and lse = -inf exactly, in both runs: tolerance 0
      if (!std::isfinite(lse)) {  // uncertified row: no claim, and no silent pass either
        for (int64_t c = 0; c < p.d; ++c) t.o[size_t(oq + c)] = kNaN;
        t.lse[size_t(row)] = kNaN;
        continue;
      }
      row_scores(p, q, kk, b, h, i, n_v, s, a);
      const RowWeights rw = row_weights(r, p, shared, lse, n_v, s, a, delta, w);
      add_o_errors(r, shared, rw, &v[size_t(offset_kv(p, b, g, 0))], p.d, n_v, &ref.value.o[size_t(oq)],
                   &ref.err.o[size_t(oq)], delta, w, &t.o[size_t(oq)]);
      // lse = m + log l: l's relative error from the weights (|log(1 +- x)| <= x / (1 - x)) and its
      // chain, then log's, the add's and the fp32 store's roundings.
      const double x = rw.l_dev + r.chain(n_v);
      const double lse_mag = std::fabs(lse) + rw.e_s;
      t.lse[size_t(row)] += (x < 1 ? x / (1 - x) : kInf) +
                            kArgRoundings * r.u * (std::fabs(lse - rw.m) + rw.e_s + lse_mag) + u32 * (lse_mag + x);
    }
  });
  return t;
}

GradientTolerance gradient_order_difference(const Kernel& k, const Inputs& in, const Config& cfg, const Outputs& ra,
                                            const Outputs& rb) {
  const Problem& p = in.p;
  const RunModel r(k, cfg, p);
  const std::vector<double> q = in.q.to_f64(), kk = in.k.to_f64(), v = in.v.to_f64(), d_o = in.d_o.to_f64();
  const int64_t group = p.heads_q / p.heads_kv;
  // Sums of |terms| per output element (the same terms in both runs). d_q's rows are each row's own;
  // d_k, d_v rows belong to one (sequence, kv head) group, whose group * n_q query rows are contiguous
  // in the row order: they are cut into blocks of 64 rows dealt round robin to at most kLanes lanes,
  // each summing into its own (n_k, d) slice, the lanes then added in lane order. Memory stays linear
  // in the problem (a partial per lane of one group's keys, never one per block of the whole tensor)
  // and the sums are the same whatever the thread count.
  std::vector<double> mag_dq(size_t(numel_q(p)), 0.0);
  GradientTolerance t;
  t.d_k.assign(size_t(numel_kv(p)), 0.0);
  t.d_v.assign(size_t(numel_kv(p)), 0.0);
  constexpr int64_t kBlock = 64, kLanes = 8;
  const int64_t group_rows = group * p.n_q, blocks = (group_rows + kBlock - 1) / kBlock;
  const int64_t lanes = std::min(blocks, kLanes), slice = int64_t(p.n_k) * p.d;
  // Rows [r0, r1) of group (b, g) into dk, dv: (n_k, d) slices of the group's keys.
  auto rows_of = [&](int64_t b, int64_t g, int64_t r0, int64_t r1, double* dk, double* dv) {
    std::vector<double> s(static_cast<size_t>(p.n_k)), a(s.size());  // (n_k,)
    for (int64_t gr = r0; gr < r1; ++gr) {
      const int64_t i = gr % p.n_q, h = g * group + gr / p.n_q, row = (b * p.heads_q + h) * p.n_q + i;
      const int64_t n_v = n_visible(p.mask, i, p.n_q, p.n_k), oq = offset_q(p, b, h, i);
      // The runs recompute P = exp(s - lse) from their own lse: the smaller lse bounds both.
      const double lse = std::min(ra.lse.get(row), rb.lse.get(row));
      if (n_v == 0 || !std::isfinite(lse)) continue;
      row_scores(p, q, kk, b, h, i, n_v, s, a);
      double D = 0;  // |D_i| = |d_o_i . o_i| from the larger |o| of the two runs, with its dot's rounding
      for (int64_t c = 0; c < p.d; ++c)
        D += std::fabs(d_o[size_t(oq + c)]) * std::max(std::fabs(ra.o.get(oq + c)), std::fabs(rb.o.get(oq + c)));
      D *= 1 + gamma(double(p.d + 1), r.u);
      for (int64_t j = 0; j < n_v; ++j) {
        const int64_t okv = offset_kv(p, b, g, j), lj = j * p.d;
        // P's computed value: exp of (score + its error - lse) and the argument's and exp's roundings.
        const double e_s = gamma(double(p.d + 2), r.u) * a[size_t(j)] + r.u_sx * std::fabs(s[size_t(j)]) +
                           gamma(double(p.d + 1), kU64) * a[size_t(j)];
        const double x = s[size_t(j)] + e_s - lse;
        const double P =
            std::exp(x + kArgRoundings * r.u * (std::fabs(s[size_t(j)]) + std::fabs(lse)) + kExpUnits * r.u) *
                (1 + r.u_p) +
            r.tiny_p;
        double dP = 0;
        for (int64_t c = 0; c < p.d; ++c) dP += std::fabs(d_o[size_t(oq + c)] * v[size_t(okv + c)]);
        // |dS| = P |dP - D|: the subtraction, the product and dS's rounding to P's type.
        const double dS =
            times(P, (dP * (1 + gamma(double(p.d + 1), r.u)) + D) * (1 + 3 * r.u) * (1 + r.u_p)) + r.tiny_p;
        for (int64_t c = 0; c < p.d; ++c) {
          mag_dq[size_t(oq + c)] += times(dS, std::fabs(p.scale * kk[size_t(okv + c)]));
          dk[lj + c] += times(dS, std::fabs(p.scale * q[size_t(oq + c)]));
          dv[lj + c] += times(P, std::fabs(d_o[size_t(oq + c)]));
        }
      }
    }
  };
  auto lane_of = [&](int64_t b, int64_t g, int64_t lane, double* dk, double* dv) {
    for (int64_t blk = lane; blk < blocks; blk += lanes)
      rows_of(b, g, blk * kBlock, std::min(group_rows, (blk + 1) * kBlock), dk, dv);
  };
  {
    const int64_t n_groups = int64_t(p.batch) * p.heads_kv;
    const ref::SerialScope small(double(p.batch * p.heads_q * p.n_q) * double(p.n_k) * double(p.d) < double(1 << 22));
    if (lanes <= 1) {  // one lane per group: the groups side by side, each into its own slice of t
      ref::parallel_for(n_groups, [&](int64_t bg) {
        const int64_t b = bg / p.heads_kv, g = bg % p.heads_kv, o = offset_kv(p, b, g, 0);
        lane_of(b, g, 0, &t.d_k[size_t(o)], &t.d_v[size_t(o)]);
      });
    } else {  // groups one after another, their lanes side by side, added in lane order
      std::vector<std::vector<double>> part_dk(static_cast<size_t>(lanes)),
          part_dv(static_cast<size_t>(lanes));  // each (n_k, d)
      for (int64_t bg = 0; bg < n_groups; ++bg) {
        const int64_t b = bg / p.heads_kv, g = bg % p.heads_kv, o = offset_kv(p, b, g, 0);
        ref::parallel_for(lanes, [&](int64_t lane) {
          part_dk[size_t(lane)].assign(size_t(slice), 0.0), part_dv[size_t(lane)].assign(size_t(slice), 0.0);
          lane_of(b, g, lane, part_dk[size_t(lane)].data(), part_dv[size_t(lane)].data());
        });
        for (int64_t lane = 0; lane < lanes; ++lane)
          for (int64_t x = 0; x < slice; ++x)
            t.d_k[size_t(o + x)] += part_dk[size_t(lane)][size_t(x)],
                t.d_v[size_t(o + x)] += part_dv[size_t(lane)][size_t(x)];
      }
    }
  }
  t.d_q.assign(size_t(numel_q(p)), 0.0);
  // Any order of N terms: gamma(N - 1) sum |terms| per run, plus a final scaling, then each run's
  // rounding to storage (different sums round apart: u_out |y| each) and its underflow floors.
  auto finish = [&](std::vector<double>& tol, const std::vector<double>& mag, double n_terms, const HostTensor& ya,
                    const HostTensor& yb) {
    const double g = gamma(n_terms + 2, r.u);
    for (size_t x = 0; x < tol.size(); ++x)
      tol[x] = 2 * (times(g, mag[x]) * (1 + r.u_out) + (n_terms + 1) * r.acc_floor + r.tiny_out) +
               r.u_out * (std::fabs(ya.get(int64_t(x))) + std::fabs(yb.get(int64_t(x))));
  };
  std::vector<double> mag_dk = t.d_k, mag_dv = t.d_v;
  finish(t.d_q, mag_dq, double(p.n_k), ra.d_q, rb.d_q);
  finish(t.d_k, mag_dk, double(group * p.n_q), ra.d_k, rb.d_k);
  finish(t.d_v, mag_dv, double(group * p.n_q), ra.d_v, rb.d_v);
  return t;
}

}  // namespace fc::props
