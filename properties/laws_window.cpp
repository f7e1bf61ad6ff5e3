// The window and softcap laws of the variants (laws_variants.cpp lists them): bitwise equalities of
// windows with masks, NaN keys outside a window, and the softcap's bracket on lse.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "properties/differential.hpp"
#include "properties/evidence.hpp"
#include "properties/generators.hpp"
#include "properties/variant_compare.hpp"
#include "properties/variant_gen.hpp"

namespace fc::props {

// n = max(n_q, n_k) (and more): (n, 0) is the causal mask of the problem's alignment (no mask
// aligns bottom-right) and (n, n) no restriction at all.
std::string law_window_mask(const Kernel& k, const Case& c_in) {
  require_dense(c_in);
  const Case c = with_d_v_source(k, c_in);
  Rng rng(c.aux);
  const Problem& p = c.in.p;
  const int32_t n = std::max(p.n_q, p.n_k);
  const int32_t left = n + int32_t(rng() % 3), right = n + int32_t(rng() % 3);
  const bool g = grads(k, c);
  Inputs win = c.in, causal = c.in, wide = c.in;
  win.p.window_left = left, win.p.window_right = 0;
  if (p.mask == Mask::None) causal.p.mask = Mask::CausalBottomRight;
  wide.p.window_left = left, wide.p.window_right = right;
  if (!claims(k, causal.p)) throw NotApplicable("the kernel does not claim the causal mask");
  note_problem("windowed problem", win);
  note_transform(fmt::format("window ({}, 0) against the {} mask; window ({}, {}) against no window", left,
                             mask_name(causal.p.mask), left, right));
  const Run a = execute(k, win, c.cfg, g), b = execute(k, causal, c.cfg, g);
  if (std::string e = both_ran(a, b); !e.empty()) return e;
  std::string m = same_outputs(p, a.out, b.out, g);
  if (!m.empty()) return fmt::format("window ({}, 0) against the {} mask: {}", left, mask_name(causal.p.mask), m);
  const Run w = execute(k, wide, c.cfg, g), none = execute(k, c.in, c.cfg, g);
  if (std::string e = both_ran(w, none); !e.empty()) return e;
  m = same_outputs(p, w.out, none.out, g);
  return m.empty() ? "" : fmt::format("window ({}, {}) against no window: {}", left, right, m);
}

std::string law_window_invisible(const Kernel& k, const Case& c_in) {
  require_dense(c_in);
  const Case c = with_d_v_source(k, c_in);
  Rng rng(c.aux);
  Inputs win = c.in;
  Problem& p = win.p;
  const int32_t block_n = c.cfg.block_n > 0 ? c.cfg.block_n : 64;
  draw_window(rng, std::max(p.n_q, p.n_k), block_n, &p.window_left, &p.window_right);
  std::string how = fmt::format("window ({}, {})", p.window_left, p.window_right);
  if (k.info.variants.softcap && rng() % 3 == 0) {
    p.softcap = 1 + double(rng() % 8);
    how += fmt::format(", softcap {}", p.softcap);
  }
  if (k.info.variants.alibi && rng() % 3 == 0) {
    p.alibi = true;
    win.alibi_slopes = HostTensor(DType::F32, {p.heads_q});
    for (int64_t h = 0; h < p.heads_q; ++h) win.alibi_slopes.set(h, std::ldexp(1.0, -int(rng() % 9)));
    how += ", ALiBi";
  }
  // One to three keys (of every batch element and kv head) poisoned: NaN in k and v.
  std::vector<char> poisoned(size_t(p.n_k), 0);
  for (int x = 0, count = 1 + int(rng() % 3); x < count; ++x) poisoned[rng() % uint64_t(p.n_k)] = 1;
  Inputs bad = win;
  const int64_t dv = head_dim_v(p);
  for (int64_t row = 0; row < bad.k.numel() / p.d; ++row)
    if (poisoned[size_t(row % p.n_k)]) {
      for (int64_t x = 0; x < p.d; ++x) bad.k.set(row * p.d + x, NAN);
      for (int64_t x = 0; x < dv; ++x) bad.v.set(row * dv + x, NAN);
    }
  note_problem("windowed problem", win);
  note_problem("windowed problem with NaN keys", bad);
  std::vector<int64_t> nan_keys;
  for (size_t j = 0; j < poisoned.size(); ++j)
    if (poisoned[j]) nan_keys.push_back(int64_t(j));
  note_transform(how + "; NaN keys " + list_values(nan_keys));
  const bool g = grads(k, c);
  const Run a = execute(k, win, c.cfg, g), b = execute(k, bad, c.cfg, g);
  if (std::string e = both_ran(a, b); !e.empty()) return e;
  for (int64_t i = 0; i < p.n_q; ++i) {
    const KeyRange r = visible_keys(p, i, p.n_q, p.n_k);
    bool sees = false;
    for (int64_t j = r.begin; j < r.end; ++j) sees |= poisoned[size_t(j)] != 0;
    if (sees) continue;
    for (int64_t bb = 0; bb < p.batch; ++bb)
      for (int64_t h = 0; h < p.heads_q; ++h) {
        const int64_t row = offset_lse(p, bb, h, i);
        bool same = bits_equal(a.out.lse, row, b.out.lse, row);
        for (int64_t x = 0; x < dv; ++x) same &= bits_equal(a.out.o, row * dv + x, b.out.o, row * dv + x);
        for (int64_t x = 0; g && x < p.d; ++x) same &= bits_equal(a.out.d_q, row * p.d + x, b.out.d_q, row * p.d + x);
        if (!same)
          return fmt::format(
              "{}; NaN keys outside row {}'s window [{}, {}) changed the row (b={}, h={}): lse {:.9g} -> {:.9g}, o[0] "
              "{:.9g} -> {:.9g}\n",
              how, i, r.begin, r.end, bb, h, a.out.lse.get(row), b.out.lse.get(row), a.out.o.get(row * dv),
              b.out.o.get(row * dv));
      }
  }
  return "";
}

namespace {

// The law's second half: c -> infinity recovers the plain kernel. With c = 2^e >= 2^40 max|s|
// (|s/c| <= 2^-40, where tanh y = y within |y|^3/3 < 2^-80 |y|), the division by c and the product
// with it are exact unless s/c falls below the normal range, so each capped score is the plain
// one within the tanh's own error (tanh_ulps ulp: 2 tanh_ulps u_s |s|), c times the underflow floor
// of the division and of the tanh, and, where S is stored, one more rounding of storage: delta.
// The two runs then differ as two runs on shared scores (forward_unshared, Shared::Scores: each
// run's share, the capped run's magnitudes within 1 + 2^-20 of the plain run's) plus the effect of
// delta on the exact answer: lse moves by at most delta, o by e^delta expm1(delta) sum_j P_j |v_j - o|
// <= expm1(2 delta) R with R = 2 max_j |v_j| over the column.
std::string softcap_to_infinity(const Kernel& k, const Case& c) {
  const Inputs& plain = c.in;
  const Problem& p = plain.p;
  const double max_abs = score_stats(plain).max_abs;
  // At least 2^-100: tiny scores would take c below fp32's normal range, where kernels keep it.
  const double cap = std::ldexp(1.0, std::max(-100, 40 + (max_abs > 0 ? std::ilogb(max_abs) + 1 : 0)));
  if (cap > 0x1p100) return "";  // huge scores: c would leave fp32's range
  Inputs capped = plain;
  capped.p.softcap = cap;
  note_problem("capped problem", capped);
  note_transform(fmt::format("softcap c = {:.9g} against no softcap", cap));
  const Run a = execute(k, plain, c.cfg, false), b = execute(k, capped, c.cfg, false);
  if (std::string e = both_ran(a, b); !e.empty()) return e;
  const ref::Precision prec = precision_of(k, c.cfg, p);
  const double u_s = ref::unit_roundoff(prec.ar.soft), floor_s = ref::underflow_floor(prec.ar.soft);
  const double rel = 2 * prec.ar.tanh_ulps * u_s + (prec.ar.stores_s ? 2 * ref::unit_roundoff(p.dtype) : 0.0);
  const double abs = cap * floor_s * (2 + 2 * prec.ar.tanh_ulps);
  const ref::Certified ref = certify(plain);
  const ForwardTolerance one_run = forward_unshared(k, plain, ref, c.cfg, Shared::Scores);
  ForwardTolerance t = one_run + one_run;  // two runs of one config: the same tolerance each, t + t exact
  const int64_t d = p.d, dv = head_dim_v(p), group = p.heads_q / p.heads_kv;
  const HostTensor q = plain.q.contiguous(), kk = plain.k.contiguous(), v = plain.v.contiguous();
  for (int64_t bb = 0; bb < p.batch; ++bb)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t g = h / group;
      std::vector<double> R(size_t(dv), 0.0);  // (d_v) 2 max_j |v_j| per column
      for (int64_t j = 0; j < p.n_k; ++j)
        for (int64_t x = 0; x < dv; ++x)
          R[size_t(x)] = std::max(R[size_t(x)], 2 * std::fabs(v.get(((bb * p.heads_kv + g) * p.n_k + j) * dv + x)));
      for (int64_t i = 0; i < p.n_q; ++i) {
        double s_max = 0;  // |s| <= |scale| sum |q||k|, with room for its rounding
        for (int64_t j = 0; j < p.n_k; ++j) {
          double a_ij = 0;
          for (int64_t x = 0; x < d; ++x)
            a_ij += std::fabs(q.get(((bb * p.heads_q + h) * p.n_q + i) * d + x) *
                              kk.get(((bb * p.heads_kv + g) * p.n_k + j) * d + x));
          s_max = std::max(s_max, std::fabs(p.scale) * a_ij * (1 + 0x1p-10));
        }
        const double delta = rel * s_max + abs;
        const int64_t row = (bb * p.heads_q + h) * p.n_q + i;
        t.lse[size_t(row)] = t.lse[size_t(row)] * (1 + 0x1p-20) + delta;
        for (int64_t x = 0; x < dv; ++x)
          t.o[size_t(row * dv + x)] = t.o[size_t(row * dv + x)] * (1 + 0x1p-20) +
                                      (R[size_t(x)] > 0 ? std::expm1(2 * delta) * R[size_t(x)] : 0.0);
      }
    }
  std::string m = within(p, "o", b.out.o.to_f64(), a.out.o.to_f64(), t.o, dtype_o(p));
  if (k.info.writes_lse) m += within(p, "lse", b.out.lse.to_f64(), a.out.lse.to_f64(), t.lse, DType::F32);
  return m.empty() ? "" : fmt::format("softcap c = {:.9g} (above every score by 2^40) against no softcap: {}", cap, m);
}

}  // namespace

// With softcap c every score lies in (-c, c), so lse_i = log Σ_j e^{s_ij} lies in
// [log n_i - c, log n_i + c] for the n_i visible keys (-inf when none): up to the roundings of the
// capped score (one of tanh, one of the product, one more where S is stored), of each weight and
// the sum (n_i + 2 in the softmax type) and of the log.
std::string law_softcap(const Kernel& k, const Case& c_in) {
  require_dense(c_in);
  const Case c = with_d_v_source(k, c_in);
  Rng rng(c.aux);
  Inputs in = c.in;
  Problem& p = in.p;
  p.softcap = draw_softcap(rng, score_stats(c.in).max_abs);
  if (c.aux % 2) return softcap_to_infinity(k, c_in);  // the differential tolerance is of width d
  note_problem("capped problem", in);
  note_transform(fmt::format("softcap c = {:.9g}", p.softcap));
  const Run r = execute(k, in, c.cfg, false);
  if (!r.error.empty()) return "the kernel threw: " + r.error;
  const double u_soft = p.dtype == DType::F64 ? 0x1p-53 : 0x1p-24;
  const double u_score = k.info.stores_s_p ? std::max(u_soft, ref::unit_roundoff(p.dtype)) : u_soft;
  for (int64_t bb = 0; bb < p.batch; ++bb)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        const KeyRange vis = visible_keys(p, i, p.n_q, p.n_k);
        const double n_vis = double(vis.end - vis.begin), lse = r.out.lse.get(offset_lse(p, bb, h, i));
        const double log_n = n_vis > 0 ? std::log(n_vis) : -kInf;
        const double slack = p.softcap * (3 * u_score) + (n_vis + 4) * u_soft * (p.softcap + std::fabs(log_n) + 1);
        const bool ok =
            n_vis == 0 ? lse == -kInf : (lse <= log_n + p.softcap + slack && lse >= log_n - p.softcap - slack);
        if (!ok)
          return fmt::format(
              "softcap c = {:.9g}: lse[b={}, h={}, i={}] = {:.9g} outside [log {} - c, log {} + c] = [{:.9g}, {:.9g}] "
              "(rounding allowance {:.3g})\n",
              p.softcap, bb, h, i, lse, n_vis, n_vis, log_n - p.softcap, log_n + p.softcap, slack);
      }
  return "";
}

}  // namespace fc::props
