// The error model's variants (docs/error-model.md, "Variants"): softcap's and ALiBi's roundings
// on each score, and varlen and paged problems cut into one dense problem per sequence. Windows and
// d_v != d live in the dense walk itself (bounds.cpp: a row's visible keys are one range).
#include <algorithm>
#include <cmath>

#include "bounds_model.hpp"

namespace fc::ref::model {

namespace {

// The largest sech^2(x) = 1/cosh^2(x) over |x| in [y - dy, y + dy] (y >= 0): sech^2 falls with |x|
// and sech^2(x) <= 4 e^-2|x|.
double sech2_max(double y, double dy) {
  const double z = y - dy;
  return z > 0 ? std::min(1.0, 4 * std::exp(-2 * z)) : 1.0;
}

}  // namespace

void Consts::transform(Score& s, int64_t h, int64_t i, int64_t j) const {
  if (p.softcap > 0) {
    // The kernel computes y^ = fl(s^ / c^), t^ = tanh(y^), fl(c^ t^) with c^ = c rounded to its
    // element-wise type (relative delta_cap). y^ - s/c: the score's error over c, the division's
    // rounding, c^'s error and an underflow floor; the tanh maps it with the largest sech^2 in reach
    // (<= 1: softcap never amplifies an error, and a saturated score's error vanishes), then errs
    // by tanh_ulps ulp itself; the product adds c^'s error on t^ and one rounding.
    const double c = p.softcap, sigma = s.s, y = sigma / c, t = std::tanh(y), ay = std::fabs(y);
    const double dy = (s.e_hat + us * (std::fabs(sigma) + s.e_hat)) / c + delta_cap * ay * (1 + 2 * delta_cap) +
                      floor_s + 0x1p-50 * (ay + 1);  // the last: y and t in fp64
    const double d_tanh = sech2_max(ay, dy) * dy;
    const double dt = d_tanh + e_tanh * (std::fabs(t) + d_tanh) + tanh_floor;
    const double sc = c * t;
    double e = c * dt * (1 + delta_cap) + delta_cap * c * (std::fabs(t) + dt);
    e += us * (std::fabs(sc) + e) + floor_s;               // the product c^ t^
    e += u_store_s * (std::fabs(sc) + e) + floor_store_s;  // a baseline stores the capped S
    s.z += 0x1p-49 * (std::fabs(sc) + 1);                  // fp64's tanh (<= 4 ulp) and the product
    s.capped = true, s.t = t, s.dt = dt;
    s.g_hi = sech2_max(ay, 0x1p-49 * (ay + 1));  // the exact sech^2, y known to fp64's accuracy
    s.s = sc, s.e_hat = e;
  }
  if (p.alibi) {
    // The bias slope |i' - j|: the slope is fp32 and the distance an integer below 2^24, both exact
    // in the element-wise type; their product rounds once, the subtraction once (a baseline stores it).
    const double bias = in.seq.alibi_slopes[size_t(h)] * double(alibi_distance(p.mask, i, j, p.n_q, p.n_k));
    const double sb = s.s - bias;  // fp64: one rounding, in z
    double e = s.e_hat + us * std::fabs(bias) + floor_s;
    e += us * (std::fabs(sb) + e);
    e += u_store_s * (std::fabs(sb) + e) + floor_store_s;
    s.z += 0x1p-52 * std::fabs(sb);
    s.s = sb, s.e_hat = e;
  }
}

void Consts::add_mask(Score& s, double bias) const {
  if (bias == -kInf) {
    s = Score{};
    s.s = -kInf, s.dead = true;
    return;
  }
  if (bias == 0) return;
  // The mask's value is exact in its dtype (F32, F16, BF16), hence in the element-wise type (fp32 or
  // wider); base 2 multiplies it by a rounded log2 e first; the add rounds once; a baseline stores S.
  const double sb = s.s + bias;  // fp64: one rounding, in z
  double e = s.e_hat + (ar.base2 ? (delta_l2e + us) * std::fabs(bias) * (1 + 2 * us) : 0.0);
  e += us * (std::fabs(sb) + e) + floor_s;
  e += u_store_s * (std::fabs(sb) + e) + floor_store_s;
  // A baseline storing S may overflow there (a large additive value in F16): no claim (an infinite error).
  if (u_store_s > 0 && std::fabs(sb) + e >= max_finite(storage)) e = kInf;
  s.z += 0x1p-52 * std::fabs(sb);
  s.s = sb, s.e_hat = e;
}

bool Consts::any_live(int64_t b, int64_t h, int64_t i, KeyRange vis) const {
  if (!per_key_mask(p)) return vis.end > vis.begin;
  for (int64_t j = vis.begin; j < vis.end; ++j)
    if (in.seq.bias(p, b, h, i, j) != -kInf) return true;
  return false;
}

namespace {

// Sequence b of a varlen (or paged) problem as a dense batch-1 problem and its tensors.
Problem sequence_problem(const Problem& p, int64_t n_q, int64_t n_k) {
  Problem s = p;
  s.batch = 1, s.n_q = int32_t(n_q), s.n_k = int32_t(n_k);
  s.varlen = false, s.padded = false, s.total_q = s.total_k = 0;
  s.page_size = s.num_pages = s.pages_per_seq = 0;
  return s;
}

Tensors64 sequence_tensors(const Problem& p, const Tensors64& in, int64_t b, const Problem& s) {
  const Seqs seqs = in.seq.seqs();
  const int64_t d = p.d, dv = head_dim_v(p);
  Tensors64 t;
  t.q.resize(size_t(numel_q(s))), t.k.resize(size_t(numel_kv(s))), t.v.resize(size_t(numel_v(s)));
  if (!in.d_o.empty()) t.d_o.resize(size_t(numel_o(s)));
  for (int64_t h = 0; h < p.heads_q; ++h)
    for (int64_t i = 0; i < s.n_q; ++i) {
      const int64_t from = q_row(p, seqs, b, h, i), to = h * s.n_q + i;
      std::copy_n(&in.q[size_t(from * d)], d, &t.q[size_t(to * d)]);
      if (!in.d_o.empty()) std::copy_n(&in.d_o[size_t(from * dv)], dv, &t.d_o[size_t(to * dv)]);
    }
  for (int64_t g = 0; g < p.heads_kv; ++g)
    for (int64_t j = 0; j < s.n_k; ++j) {
      const int64_t from = kv_row(p, seqs, b, g, j), to = g * s.n_k + j;
      std::copy_n(&in.k[size_t(from * d)], d, &t.k[size_t(to * d)]);
      std::copy_n(&in.v[size_t(from * dv)], dv, &t.v[size_t(to * dv)]);
    }
  t.seq.alibi_slopes = in.seq.alibi_slopes;
  t.seq.sinks = in.seq.sinks;
  return t;
}

}  // namespace

// Each sequence is its own dense problem (the kernel's tiles start at its first query and key) with
// its own certified reference; its bounds (on |y - exact|) gain the caller's reference error, since
// the verdict measures |y - ref|. A sequence without queries produces nothing; one without keys
// has only empty rows (o = 0, lse = -inf, d_q = 0: the reference's error alone). Paged: a
// physical key row that several logical keys read holds the sum of their gradients, which the
// kernel forms in its element-wise type and rounds to storage once: each term's error before its
// last rounding (its bound plus that rounding), the adds' roundings and the final rounding.
Bounds sequence_bounds(const Problem& p, const Tensors64& in, const Certified& ref, const Precision& prec) {
  const Seqs seqs = in.seq.seqs();
  const int64_t d = p.d, dv = head_dim_v(p);
  const bool bwd = !in.d_o.empty() || (numel_o(p) == 0 && !ref.value.d_k.empty());
  Bounds B;
  auto init = [](std::vector<double>& x, const std::vector<double>& err, int64_t n) {
    x.assign(size_t(n), 0.0);
    for (int64_t e = 0; e < n; ++e) x[size_t(e)] = at(err, e);
  };
  init(B.o, ref.err.o, numel_o(p)), init(B.lse, ref.err.lse, numel_lse(p));
  if (bwd)
    init(B.d_q, ref.err.d_q, numel_q(p)), init(B.d_k, ref.err.d_k, numel_kv(p)), init(B.d_v, ref.err.d_v, numel_v(p));
  // Per physical key row: the logical keys summed into it, their bounds and magnitudes |y| + 2 bound.
  std::vector<double> uses(bwd ? size_t(rows_kv(p)) : 0, 0.0);
  std::vector<double> sum_k(B.d_k.size(), 0.0), mag_k = sum_k, sum_v(B.d_v.size(), 0.0), mag_v = sum_v;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t n_q = seq_n_q(p, seqs, b), n_k = seq_n_k(p, seqs, b);
    if (n_k == 0 && p.sinks)  // rows of no key: lse is the sink (bounds.cpp)
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < n_q; ++i) {
          const int64_t ol = lse_index(p, seqs, b, h, i);
          const double sink = in.seq.sinks[size_t(h)];
          if (std::isfinite(sink)) B.lse[size_t(ol)] = sink_only_lse_bound(prec, sink, at(ref.err.lse, ol));
        }
    if (n_q == 0 || n_k == 0) continue;
    const Problem s = sequence_problem(p, n_q, n_k);
    const Tensors64 t = sequence_tensors(p, in, b, s);
    const Certified c = certified(s, t);
    const Bounds sb = dense_bounds(s, t, c, prec);
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < n_q; ++i) {
        const int64_t row = q_row(p, seqs, b, h, i), sr = h * n_q + i, ol = lse_index(p, seqs, b, h, i);
        B.lse[size_t(ol)] = (sb.lse[size_t(sr)] + at(ref.err.lse, ol)) * kSlack;
        for (int64_t x = 0; x < dv; ++x)
          B.o[size_t(row * dv + x)] = (sb.o[size_t(sr * dv + x)] + at(ref.err.o, row * dv + x)) * kSlack;
        for (int64_t x = 0; bwd && x < d; ++x)
          B.d_q[size_t(row * d + x)] = (sb.d_q[size_t(sr * d + x)] + at(ref.err.d_q, row * d + x)) * kSlack;
      }
    for (int64_t g = 0; bwd && g < p.heads_kv; ++g)
      for (int64_t j = 0; j < n_k; ++j) {
        const int64_t row = kv_row(p, seqs, b, g, j), sr = g * n_k + j;
        uses[size_t(row)] += 1;
        for (int64_t x = 0; x < d; ++x) {
          const double e = sb.d_k[size_t(sr * d + x)];
          sum_k[size_t(row * d + x)] += e,
              mag_k[size_t(row * d + x)] += std::fabs(c.value.d_k[size_t(sr * d + x)]) + 2 * e;
        }
        for (int64_t x = 0; x < dv; ++x) {
          const double e = sb.d_v[size_t(sr * dv + x)];
          sum_v[size_t(row * dv + x)] += e,
              mag_v[size_t(row * dv + x)] += std::fabs(c.value.d_v[size_t(sr * dv + x)]) + 2 * e;
        }
      }
  }
  if (!bwd) return B;
  const double u_out = unit_roundoff(prec.dtypes().kv), u_s = unit_roundoff(prec.ar.soft);  // d_k, d_v's type
  const double fl = 2 * underflow_floor(prec.dtypes().kv) + 2 * underflow_floor(prec.ar.soft);
  auto finish = [&](std::vector<double>& bound, const std::vector<double>& sum, const std::vector<double>& mag,
                    const std::vector<double>& err, int64_t w) {
    for (size_t row = 0; row < uses.size(); ++row) {
      const double n = uses[row];
      for (int64_t x = 0; n > 0 && x < w; ++x) {
        const size_t e = row * size_t(w) + size_t(x);
        const double extra = n == 1 ? 0.0 : (2 * u_out + n * u_s) * mag[e] + n * fl;
        bound[e] = (sum[e] + extra + at(err, int64_t(e))) * kSlack;
      }
    }
  };
  finish(B.d_k, sum_k, mag_k, ref.err.d_k, d), finish(B.d_v, sum_v, mag_v, ref.err.d_v, dv);
  return B;
}

}  // namespace fc::ref::model
