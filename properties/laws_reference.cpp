// Laws held against the certified reference and its error bound: agreement (ordinary and extreme
// regimes), the FlashAttention rule, block-size invariance, rows summing to one, the LSE bracket and
// the convex hull of V.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "properties/execute.hpp"
#include "properties/laws.hpp"

namespace fc::props {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string law_reference(const Kernel& k, const Case& c) {
  const Run r = execute(k, c.in, c.cfg, has_backward(k, c));
  if (!r.error.empty()) return r.error;
  return check_outputs(k, c.in, r.out, oracle(k, c.in, c.cfg));
}

std::string law_fa_rule(const Kernel& k, const Case& c) {
  const Kernel* base = find_kernel("cpu_naive");
  if (!base || !claims(*base, c.in.p)) return "";  // no same-precision baseline for this problem
  const bool bwd = has_backward(k, c) && base->info.backward;
  const Run r = execute(k, c.in, c.cfg, bwd), rb = execute(*base, c.in, Config{}, bwd);
  if (!r.error.empty() || !rb.error.empty()) return r.error + rb.error;
  const ref::Certified ref = certify(c.in);
  std::string msg;
  auto one = [&](const char* name, const HostTensor& a, const HostTensor& b, const std::vector<double>& v,
                 const std::vector<double>& e) {
    const ref::FaRule f = ref::fa_rule(a.to_f64(), b.to_f64(), v, e, c.in.p.dtype);
    if (!f.holds)
      msg += fmt::format("{}: max error {:.3g} > 2 x baseline's {:.3g} + rounding noise {:.3g}\n", name, f.kernel_err,
                         f.baseline_err, f.noise);
  };
  one("o", r.out.o, rb.out.o, ref.value.o, ref.err.o);
  if (bwd) {
    one("d_q", r.out.d_q, rb.out.d_q, ref.value.d_q, ref.err.d_q);
    one("d_k", r.out.d_k, rb.out.d_k, ref.value.d_k, ref.err.d_k);
    one("d_v", r.out.d_v, rb.out.d_v, ref.value.d_v, ref.err.d_v);
  }
  return msg;
}

std::string law_block_size(const Kernel& k, const Case& c) {
  const bool bwd = has_backward(k, c);
  const Run a = execute(k, c.in, c.cfg, bwd), b = execute(k, c.in, c.cfg2, bwd);
  if (!a.error.empty() || !b.error.empty()) return a.error + b.error;
  const ref::Certified ref = certify(c.in);
  const ref::Bounds ba = bounds_for(k, c.in, c.cfg, ref), bb = bounds_for(k, c.in, c.cfg2, ref);
  const Problem& p = c.in.p;
  std::string msg = agree(p, "o", a.out.o, b.out.o, ba.o, bb.o);
  if (k.info.writes_lse) msg += agree(p, "lse", a.out.lse, b.out.lse, ba.lse, bb.lse);
  if (bwd)
    msg += agree(p, "d_q", a.out.d_q, b.out.d_q, ba.d_q, bb.d_q) +
           agree(p, "d_k", a.out.d_k, b.out.d_k, ba.d_k, bb.d_k) +
           agree(p, "d_v", a.out.d_v, b.out.d_v, ba.d_v, bb.d_v);
  return msg;
}

std::string law_rows_sum(const Kernel& k, const Case& c) {
  Inputs in = c.in;
  for (int64_t x = 0; x < in.v.numel(); ++x) in.v.set(x, 1.0);  // V = 1, exact in every dtype
  const Run r = execute(k, in, c.cfg, false);
  if (!r.error.empty()) return r.error;
  const Problem& p = in.p;
  std::vector<double> expected(static_cast<size_t>(numel_q(p)));  // (batch, heads_q, n_q, d): 1, or 0 for empty rows
  for (int64_t row = 0; row < numel_lse(p); ++row)
    for (int64_t x = 0; x < p.d; ++x)
      expected[size_t(row * p.d + x)] = n_visible(p.mask, row % p.n_q, p.n_q, p.n_k) > 0 ? 1.0 : 0.0;
  const ref::Bounds B = bounds_for(k, in, c.cfg, certify(in));
  return within(p, "o", r.out.o.to_f64(), expected, B.o, p.dtype);
}

// Row maxima of the scores and their fp64 evaluation error (d + 1 roundings of a dot in fp64).
void row_maxima(const Inputs& in, std::vector<double>& m, std::vector<double>& err) {
  const Problem& p = in.p;
  m.assign(size_t(numel_lse(p)), -kInf), err.assign(m.size(), 0.0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        const size_t row = size_t(offset_lse(p, b, h, i));
        for (int64_t j = 0; j < n_visible(p.mask, i, p.n_q, p.n_k); ++j) {
          double dot = 0, abs_dot = 0;
          for (int64_t x = 0; x < p.d; ++x) {
            const double t =
                in.q.get(offset_q(p, b, h, i) + x) * in.k.get(offset_kv(p, b, kv_head(p, int32_t(h)), j) + x);
            dot += t, abs_dot += std::fabs(t);
          }
          m[row] = std::max(m[row], p.scale * dot);
          err[row] = std::max(err[row], double(p.d + 2) * 0x1p-53 * std::fabs(p.scale) * abs_dot);
        }
      }
}

std::string law_lse_bracket(const Kernel& k, const Case& c) {
  const Run r = execute(k, c.in, c.cfg, false);
  if (!r.error.empty()) return r.error;
  const Problem& p = c.in.p;
  std::vector<double> m, m_err;
  row_maxima(c.in, m, m_err);
  const ref::Bounds B = bounds_for(k, c.in, c.cfg, certify(c.in));
  for (int64_t row = 0; row < numel_lse(p); ++row) {
    const double lse = r.out.lse.get(row);
    const int64_t n_v = n_visible(p.mask, row % p.n_q, p.n_q, p.n_k);
    if (n_v == 0) {
      if (lse != -kInf)
        return fmt::format("{} = {} on a row with no visible key (expected -inf)\n", element_name(p, "lse", row), lse);
      continue;
    }
    const double m_r = m[size_t(row)], hi_gap = std::log(double(n_v));
    // The bracket's own fp64 evaluation (max and log) is widened by its rounding, never by a literal.
    const double tol = B.lse[size_t(row)] + m_err[size_t(row)] + 4 * 0x1p-53 * (std::fabs(m_r) + hi_gap);
    if (!(lse >= m_r - tol && lse <= m_r + hi_gap + tol))
      return fmt::format("{} = {:.9g} outside [max s = {:.9g}, max s + log {} = {:.9g}] +- {:.3g}\n",
                         element_name(p, "lse", row), lse, m_r, n_v, m_r + hi_gap, tol);
  }
  return "";
}

std::string law_convex_hull(const Kernel& k, const Case& c) {
  const Run r = execute(k, c.in, c.cfg, false);
  if (!r.error.empty()) return r.error;
  const Problem& p = c.in.p;
  const ref::Bounds B = bounds_for(k, c.in, c.cfg, certify(c.in));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        const int64_t n_v = n_visible(p.mask, i, p.n_q, p.n_k);
        for (int64_t x = 0; x < p.d && n_v > 0; ++x) {
          double lo = kInf, hi = -kInf;
          for (int64_t j = 0; j < n_v; ++j) {
            const double v = c.in.v.get(offset_kv(p, b, kv_head(p, int32_t(h)), j) + x);
            lo = std::min(lo, v), hi = std::max(hi, v);
          }
          const int64_t at = offset_q(p, b, h, i) + x;
          const double o = r.out.o.get(at), bd = B.o[size_t(at)];
          if (!(o >= lo - bd && o <= hi + bd))
            return fmt::format("{} = {:.9g} outside its column's range of V [{:.9g}, {:.9g}] +- bound {:.3g}\n",
                               element_name(p, "o", at), o, lo, hi, bd);
        }
      }
  return "";
}

}  // namespace

void add_reference_laws(std::vector<Law>& out) {
  using R = Regime;
  out.push_back({.id = "reference",
                 .sentence = "every output agrees with the certified reference within its error bound",
                 .regimes = {R::Normal, R::Outliers, R::Ties, R::AllEqual, R::Grid, R::FullyMasked, R::LongRow},
                 .backward = true,
                 .check = law_reference});
  out.push_back({.id = "extreme",
                 .sentence = "extreme inputs stay within the bound and finite where the reference is finite",
                 .regimes = {R::Huge, R::FarBelow, R::Fp16Max, R::SubnormalP, R::Subnormal, R::Outliers},
                 .backward = true,
                 .check = law_reference});
  // A max over a handful of elements is noise: like FlashAttention's own tests, judge the FA rule on
  // tensors of thousands of elements (n >= 64, d >= 32).
  out.push_back({.id = "fa_rule",
                 .sentence = "the error is at most twice the same-precision baseline's plus output rounding noise",
                 .regimes = {R::Normal, R::Outliers},
                 .backward = true,
                 .needs_baseline = true,
                 .only_dtypes = {DType::F16, DType::BF16},
                 .min_n = 64,
                 .min_d = 32,
                 .check = law_fa_rule});
  out.push_back({.id = "block_size",
                 .sentence = "block size never changes the answer beyond the bound",
                 .regimes = {R::Normal, R::Outliers, R::Ties, R::FullyMasked},
                 .backward = true,
                 .needs_tiles = true,
                 .check = law_block_size});
  out.push_back({.id = "rows_sum",
                 .sentence = "with V = 1 every output is 1",
                 .regimes = {R::Normal, R::Outliers, R::Huge, R::FarBelow, R::Ties, R::SubnormalP, R::FullyMasked},
                 .check = law_rows_sum});
  out.push_back(
      {.id = "lse_bracket",
       .sentence = "max_j s_ij <= lse_i <= max_j s_ij + log n_k",
       .regimes = {R::Normal, R::Outliers, R::Huge, R::FarBelow, R::Ties, R::AllEqual, R::SubnormalP, R::FullyMasked},
       .check = law_lse_bracket});
  out.push_back(
      {.id = "convex_hull",
       .sentence = "every output lies within its column's range of V",
       .regimes = {R::Normal, R::Outliers, R::Huge, R::FarBelow, R::Fp16Max, R::Ties, R::SubnormalP, R::Subnormal},
       .check = law_convex_hull});
}

}  // namespace fc::props
