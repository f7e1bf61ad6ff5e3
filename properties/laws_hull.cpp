// Laws of the softmax's shape, judged from the kernel's own arithmetic rather than the reference's
// bound: the LSE bracket (the row max's weight is exactly exp(0) = 1 and every weight is at most 1,
// so m <= lse <= m + log n up to the final roundings) and the convex hull (the same weights, up to
// P's rounding, scale the numerator and l: o is a convex combination of V's rows up to that and the
// sums' roundings). Score, exponent and rescale errors cancel in both; derivation in
// docs/error-model.md, "Differential bounds".
#include <fmt/format.h>

#include <cmath>

#include "properties/constants.hpp"
#include "properties/laws.hpp"
#include "verdict/verdict.hpp"

namespace fc::props {
namespace {

// Row maxima of the scores in fp64 and, per row, the kernel's score error at the max (d products
// and sums, the scale, a score rounded to a narrower type) plus fp64's own evaluation error.
void row_maxima(const Inputs& in, const ref::Coarse& pr, std::vector<double>& m, std::vector<double>& err) {
  const Problem& p = in.p;
  const std::vector<double> q = in.q.to_f64(), k = in.k.to_f64();
  const double u_sx = ref::unit_roundoff(pr.s_dtype) > pr.u_acc ? ref::unit_roundoff(pr.s_dtype) : 0.0;
  m.assign(size_t(numel_lse(p)), -kInf), err.assign(m.size(), 0.0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        const size_t row = size_t(offset_lse(p, b, h, i));
        const double* q_i = &q[size_t(offset_q(p, b, h, i))];  // (d)
        for (int64_t j = 0; j < n_visible(p.mask, i, p.n_q, p.n_k); ++j) {
          const double* k_j = &k[size_t(offset_kv(p, b, kv_head(p, int32_t(h)), j))];  // (d)
          double dot = 0, abs_dot = 0;
          for (int64_t x = 0; x < p.d; ++x) dot += q_i[x] * k_j[x], abs_dot += std::fabs(q_i[x] * k_j[x]);
          const double s = p.scale * dot, a = std::fabs(p.scale) * abs_dot;
          m[row] = std::max(m[row], s);
          err[row] = std::max(err[row], gamma(double(p.d + 2), pr.u_acc) * a + u_sx * std::fabs(s) +
                                            gamma(double(p.d + 2), 0x1p-53) * a);
        }
      }
}

std::string law_lse_bracket(const Kernel& k, const Case& c) {
  const Run r = execute(k, c.in, c.cfg, false);
  if (!r.error.empty()) return r.error;
  const Problem& p = c.in.p;
  const ref::Coarse pr = ref::coarse(precision_of(k, c.cfg, p));
  const double u = pr.u_acc, u32 = ref::unit_roundoff(DType::F32);
  // Exact scores (grid inputs, a power-of-two scale, a kernel that computes s - m from s itself):
  // the kernel's max is the exact max, its weight exactly 1, and lse >= max s exactly.
  const bool exact = k.info.exact.exact_scores && is_pow2(p.scale) && dots_exact(c.in, u);
  std::vector<double> m, m_err;
  row_maxima(c.in, pr, m, m_err);
  const int64_t bn = pr.block_n > 0 ? pr.block_n : p.n_k;
  for (int64_t row = 0; row < numel_lse(p); ++row) {
    const double lse = r.out.lse.get(row);
    const int64_t n_v = n_visible(p.mask, row % p.n_q, p.n_q, p.n_k);
    if (n_v == 0) {
      if (lse != -kInf)
        return fmt::format("{} = {} on a row with no visible key (expected -inf)\n", element_name(p, "lse", row), lse);
      continue;
    }
    const double m_r = m[size_t(row)], log_n = std::log(double(n_v));
    const int64_t T = (n_v + bn - 1) / bn;
    // Below: the max's own score error, the fold of the scale (and log2 e) into m and back, exp(0)'s
    // excess over 1 on an approximate exp2, and the fp32 store. Above: also n_v weights of at most
    // 1 each (exp's excess), l's chain, log's and the add's roundings.
    const double lo_tol =
        exact ? 0.0 : m_err[size_t(row)] + 5 * u * (std::fabs(m_r) + std::fabs(lse)) + 4 * u + u32 * std::fabs(lse);
    const double hi_tol = m_err[size_t(row)] + 4 * u + gamma(double(n_v + 5 * T + 8), u) +
                          5 * u * (std::fabs(m_r) + std::fabs(lse) + log_n) + u32 * std::fabs(lse) +
                          0x1p-52 * (std::fabs(m_r) + log_n);
    if (!(lse >= m_r - lo_tol && lse <= m_r + log_n + hi_tol))
      return fmt::format("{} = {:.9g} outside [max s = {:.17g} - {:.3g}, max s + log {} = {:.17g} + {:.3g}]{}\n",
                         element_name(p, "lse", row), lse, m_r, lo_tol, n_v, m_r + log_n, hi_tol,
                         exact ? " (exact scores: the lower end is exact)" : "");
  }
  return "";
}

// V for the hull law: as generated, or (half the cases) one-signed columns |v| + 2 max|v| + 1, so
// that a kernel whose weights do not sum to one shows up outside the hull (a hull containing 0
// hides a shrink toward 0).
HostTensor hull_values(const Case& c) {
  if (c.aux % 2 == 0) return c.in.v;
  double vmax = 0;
  for (int64_t x = 0; x < c.in.v.numel(); ++x) vmax = std::max(vmax, std::fabs(c.in.v.get(x)));
  if (!(3 * vmax + 1 < std::min(max_finite(dtype_kv(c.in.p)), max_finite(dtype_o(c.in.p))) / 4)) return c.in.v;
  HostTensor v = c.in.v;
  for (int64_t x = 0; x < v.numel(); ++x) v.set(x, std::fabs(c.in.v.get(x)) + 2 * vmax + 1);  // rounds to storage
  return v;
}

std::string law_convex_hull(const Kernel& k, const Case& c) {
  Inputs in = c.in;
  in.v = hull_values(c);
  const Run r = execute(k, in, c.cfg, false);
  if (!r.error.empty()) return r.error;
  const Problem& p = in.p;
  const ref::Coarse pr = ref::coarse(precision_of(k, c.cfg, p));
  const double u = pr.u_acc, u_out = ref::unit_roundoff(pr.storage), u_p = ref::unit_roundoff(pr.p_dtype);
  const double u_pl = u_p + (pr.l_sums_rounded_p ? u_p : 0.0);
  const bool ftz = pr.flush_subnormals;
  auto floor_of = [ftz](DType t) { return ftz ? ref::min_normal(t) : ref::underflow_floor(t); };
  const double tiny_p = floor_of(pr.p_dtype) + floor_of(DType::F32);
  const double tiny_out = ref::underflow_floor(pr.storage) + (ftz ? ref::min_normal(DType::F32) : 0.0);
  const double acc_floor = floor_of(u >= 0x1p-12 ? DType::F16 : u >= 0x1p-25 ? DType::F32 : DType::F64);
  const int64_t bn = pr.block_n > 0 ? pr.block_n : p.n_k;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        const int64_t n_v = n_visible(p.mask, i, p.n_q, p.n_k), T = (n_v + bn - 1) / bn;
        // The weights' sum deviates from 1 by P's rounding (numerator only) and the two chains.
        const double theta = u_pl + 2 * gamma(double(n_v + 5 * T + 8), u) + 2 * u;
        for (int64_t x = 0; x < p.d && n_v > 0; ++x) {
          double lo = kInf, hi = -kInf, sum_abs = 0;
          for (int64_t j = 0; j < n_v; ++j) {
            const double v = in.v.get(offset_kv(p, b, kv_head(p, int32_t(h)), j) + x);
            lo = std::min(lo, v), hi = std::max(hi, v), sum_abs += std::fabs(v);
          }
          const int64_t at = offset_q(p, b, h, i) + x;
          const double o = r.out.o.get(at);
          const double tol = theta * std::max(std::fabs(lo), std::fabs(hi)) + (2 * u + u_out) * std::fabs(o) +
                             tiny_p * sum_abs + double(2 * n_v) * acc_floor + tiny_out;
          if (!(o >= lo - tol && o <= hi + tol))
            return fmt::format("{} = {:.9g} outside its column's range of V [{:.9g}, {:.9g}] +- {:.3g}\n",
                               element_name(p, "o", at), o, lo, hi, tol);
        }
      }
  return "";
}

}  // namespace

void add_hull_laws(std::vector<Law>& out) {
  using R = Regime;
  out.push_back({.id = "lse_bracket",
                 .sentence = "max_j s_ij <= lse_i <= max_j s_ij + log n_k",
                 .regimes = {R::Grid, R::Normal, R::Outliers, R::Huge, R::FarBelow, R::Ties, R::AllEqual, R::SubnormalP,
                             R::FullyMasked},
                 .pow2_scale = true,
                 .check = law_lse_bracket,
                 .needs_lse = true});
  out.push_back(
      {.id = "convex_hull",
       .sentence = "every output lies within its column's range of V",
       .regimes = {R::Normal, R::Outliers, R::Huge, R::FarBelow, R::Fp16Max, R::Ties, R::SubnormalP, R::Subnormal},
       .check = law_convex_hull});
}

}  // namespace fc::props
