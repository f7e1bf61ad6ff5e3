// Structural laws: what masks, empty rows, gradient identities, repetition and NaNs must do, most of
// them bitwise.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>

#include "properties/execute.hpp"
#include "properties/laws.hpp"

namespace fc::props {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool same_bits(const HostTensor& a, const HostTensor& b, int64_t i) {
  const int sz = dtype_size(a.dtype);
  return std::memcmp(a.bytes.data() + i * sz, b.bytes.data() + i * sz, size_t(sz)) == 0;
}

// Rows (b, h, i) whose outputs must be bitwise those of the reference run; rows outside are free.
std::string rows_identical(const Problem& p, const Outputs& a, const Outputs& b, bool lse, bool d_q,
                           const std::function<bool(int64_t, int64_t, int64_t)>& protected_row) {
  for (int64_t bb = 0; bb < p.batch; ++bb)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        if (!protected_row(bb, h, i)) continue;
        const int64_t row = offset_lse(p, bb, h, i);
        if (lse && !same_bits(a.lse, b.lse, row))
          return fmt::format("{}: {} became {}\n", element_name(p, "lse", row), a.lse.get(row), b.lse.get(row));
        for (int64_t x = 0; x < p.d; ++x) {
          const int64_t at = offset_q(p, bb, h, i) + x;
          if (!same_bits(a.o, b.o, at))
            return fmt::format("{}: {} became {}\n", element_name(p, "o", at), a.o.get(at), b.o.get(at));
          if (d_q && !same_bits(a.d_q, b.d_q, at))
            return fmt::format("{}: {} became {}\n", element_name(p, "d_q", at), a.d_q.get(at), b.d_q.get(at));
        }
      }
  return "";
}

std::string law_invisible_keys(const Kernel& k, const Case& c) {
  const Problem& p = c.in.p;
  std::mt19937_64 rng(c.aux);
  const int64_t cut = int64_t(rng() % uint64_t(p.n_k));  // keys j >= cut are replaced
  Inputs in2 = c.in;
  for (int64_t x = 0; x < in2.k.numel(); ++x)
    if (x / p.d % p.n_k >= cut) {  // large, fresh values: any leak shows
      in2.k.set(x, round_to(p.dtype, 1000.0 * std::normal_distribution<double>()(rng)));
      in2.v.set(x, round_to(p.dtype, 1000.0 * std::normal_distribution<double>()(rng)));
    }
  const bool bwd = has_backward(k, c);
  const Run a = execute(k, c.in, c.cfg, bwd), b = execute(k, in2, c.cfg, bwd);
  if (!a.error.empty() || !b.error.empty()) return a.error + b.error;
  const std::string msg = rows_identical(p, a.out, b.out, k.info.writes_lse, bwd, [&](int64_t, int64_t, int64_t i) {
    return n_visible(p.mask, i, p.n_q, p.n_k) <= cut;
  });
  return msg.empty() ? "" : fmt::format("keys j >= {} replaced; a row that cannot see them changed: {}", cut, msg);
}

std::string law_fully_masked(const Kernel& k, const Case& c) {
  const Problem& p = c.in.p;
  const bool bwd = has_backward(k, c);
  if (n_visible(p.mask, 0, p.n_q, p.n_k) > 0) throw NotApplicable("no row of this problem is fully masked");
  const Run r = execute(k, c.in, c.cfg, bwd);
  if (!r.error.empty()) return r.error;
  for (int64_t row = 0; row < numel_lse(p); ++row) {
    if (n_visible(p.mask, row % p.n_q, p.n_q, p.n_k) > 0) continue;
    if (k.info.writes_lse && r.out.lse.get(row) != -kInf)
      return fmt::format("{} = {} on a row with no visible key (expected -inf)\n", element_name(p, "lse", row),
                         r.out.lse.get(row));
    for (int64_t x = row * p.d; x < (row + 1) * p.d; ++x) {
      if (r.out.o.get(x) != 0.0)
        return fmt::format("{} = {} on a row with no visible key (expected 0)\n", element_name(p, "o", x),
                           r.out.o.get(x));
      if (bwd && r.out.d_q.get(x) != 0.0)
        return fmt::format("{} = {} on a row with no visible key (expected 0)\n", element_name(p, "d_q", x),
                           r.out.d_q.get(x));
    }
  }
  return "";
}

std::string law_grad_sums(const Kernel& k, const Case& c) {
  const Problem& p = c.in.p;
  const Run r = execute(k, c.in, c.cfg, true);
  if (!r.error.empty()) return r.error;
  const ref::Bounds B = bounds_for(k, c.in, c.cfg, certify(c.in));
  const int64_t group = p.heads_q / p.heads_kv;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.heads_kv; ++g)
      for (int64_t x = 0; x < p.d; ++x) {
        // Sums in fp64 of at most a few thousand storage values: each partial sum rounds once
        // (n_k + n_q fp64 roundings, added to the tolerance below).
        double sum_dk = 0, sum_dv = 0, tol_dk = 0, tol_dv = 0, sum_do = 0, abs_sum = 0;
        for (int64_t j = 0; j < p.n_k; ++j) {
          const int64_t at = offset_kv(p, b, g, j) + x;
          sum_dk += r.out.d_k.get(at), sum_dv += r.out.d_v.get(at);
          tol_dk += B.d_k[size_t(at)], tol_dv += B.d_v[size_t(at)];
          abs_sum += std::fabs(r.out.d_k.get(at)) + std::fabs(r.out.d_v.get(at));
        }
        for (int64_t h = g * group; h < (g + 1) * group; ++h)
          for (int64_t i = 0; i < p.n_q; ++i)  // rows that see no key send nothing to d_v
            if (n_visible(p.mask, i, p.n_q, p.n_k) > 0) {
              const double t = c.in.d_o.get(offset_q(p, b, h, i) + x);
              sum_do += t, abs_sum += std::fabs(t);
            }
        const double fp64 = double(p.n_k + group * p.n_q) * 0x1p-53 * abs_sum;
        if (!(std::fabs(sum_dk) <= tol_dk + fp64))
          return fmt::format("sum_j d_k[b={},h={},j,c={}] = {:.9g}, not 0 within {:.3g}\n", b, g, x, sum_dk,
                             tol_dk + fp64);
        if (!(std::fabs(sum_dv - sum_do) <= tol_dv + fp64))
          return fmt::format("sum_j d_v[b={},h={},j,c={}] = {:.9g} but sum_i d_o = {:.9g} (bound {:.3g})\n", b, g, x,
                             sum_dv, sum_do, tol_dv + fp64);
      }
  return "";
}

std::string law_determinism(const Kernel& k, const Case& c) {
  Config cfg = c.cfg;
  cfg.deterministic = true;  // kernels with a bitwise-repeatable backward variant use it
  const bool bwd = has_backward(k, c);
  const Run a = execute(k, c.in, cfg, bwd), b = execute(k, c.in, cfg, bwd);
  if (!a.error.empty() || !b.error.empty()) return a.error + b.error;
  const std::pair<const char*, const HostTensor*> pairs[][2] = {{{"o", &a.out.o}, {"o", &b.out.o}},
                                                                {{"lse", &a.out.lse}, {"lse", &b.out.lse}},
                                                                {{"d_q", &a.out.d_q}, {"d_q", &b.out.d_q}},
                                                                {{"d_k", &a.out.d_k}, {"d_k", &b.out.d_k}},
                                                                {{"d_v", &a.out.d_v}, {"d_v", &b.out.d_v}}};
  for (const auto& pr : pairs)
    if (pr[0].second->bytes != pr[1].second->bytes) {
      for (int64_t x = 0; x < pr[0].second->numel(); ++x)
        if (!same_bits(*pr[0].second, *pr[1].second, x))
          return fmt::format("{}: {} then {} on the same inputs\n", element_name(c.in.p, pr[0].first, x),
                             pr[0].second->get(x), pr[1].second->get(x));
    }
  return "";
}

std::string law_nan_blast(const Kernel& k, const Case& c) {
  const Problem& p = c.in.p;
  Inputs in2 = c.in;
  HostTensor* t = c.poison_tensor == 0 ? &in2.q : c.poison_tensor == 1 ? &in2.k : &in2.v;
  t->set(c.poison_index, c.poison_value);
  const bool bwd = has_backward(k, c);
  const Run a = execute(k, c.in, c.cfg, bwd), b = execute(k, in2, c.cfg, bwd);
  if (!a.error.empty() || !b.error.empty()) return a.error + b.error;
  // Radius R: row i for a poisoned q_i; for a poisoned k_j or v_j, the rows of its kv head that see j.
  const int64_t row = c.poison_index / p.d;
  const int64_t n = c.poison_tensor == 0 ? p.n_q : p.n_k, heads = c.poison_tensor == 0 ? p.heads_q : p.heads_kv;
  const int64_t r_i = row % n, r_h = row / n % heads, r_b = row / n / heads;
  auto in_radius = [&](int64_t bb, int64_t h, int64_t i) {
    if (bb != r_b) return false;
    if (c.poison_tensor == 0) return h == r_h && i == r_i;
    return kv_head(p, int32_t(h)) == r_h && r_i < n_visible(p.mask, i, p.n_q, p.n_k);
  };
  const char* what = c.poison_tensor == 0 ? "q" : c.poison_tensor == 1 ? "k" : "v";
  // o, lse and d_q: rows outside R.
  std::string msg = rows_identical(p, a.out, b.out, k.info.writes_lse, bwd,
                                   [&](int64_t bb, int64_t h, int64_t i) { return !in_radius(bb, h, i); });
  if (!msg.empty())
    return fmt::format("{} at {}: a row outside its blast radius changed: {}", c.poison_value,
                       element_name(p, what, c.poison_index), msg);
  if (!bwd) return "";
  // d_k and d_v: rows of the keys no row of R sees (a row sees a prefix of keys, so R sees [0, seen) of
  // the poisoned row's kv head).
  const int64_t kv = c.poison_tensor == 0 ? kv_head(p, int32_t(r_h)) : r_h;
  int64_t seen = 0;
  for (int64_t h = 0; h < p.heads_q; ++h)
    for (int64_t i = 0; i < p.n_q; ++i)
      if (in_radius(r_b, h, i)) seen = std::max(seen, n_visible(p.mask, i, p.n_q, p.n_k));
  for (int64_t bb = 0; bb < p.batch; ++bb)
    for (int64_t hk = 0; hk < p.heads_kv; ++hk)
      for (int64_t j = 0; j < p.n_k; ++j) {
        if (bb == r_b && hk == kv && j < seen) continue;
        for (int64_t x = offset_kv(p, bb, hk, j); x < offset_kv(p, bb, hk, j) + p.d; ++x)
          for (const auto& [name, ta, tb] :
               {std::tuple{"d_k", &a.out.d_k, &b.out.d_k}, std::tuple{"d_v", &a.out.d_v, &b.out.d_v}})
            if (!same_bits(*ta, *tb, x))
              return fmt::format("{} at {}: a key no poisoned row sees changed: {}: {} became {}\n", c.poison_value,
                                 element_name(p, what, c.poison_index), element_name(p, name, x), ta->get(x),
                                 tb->get(x));
      }
  return "";
}

}  // namespace

void add_structural_laws(std::vector<Law>& out) {
  using R = Regime;
  out.push_back({.id = "invisible_keys",
                 .sentence = "keys a row cannot see never influence it (bitwise)",
                 .regimes = {R::Normal, R::Outliers, R::FullyMasked},
                 .backward = true,
                 .needs_causal = true,
                 .check = law_invisible_keys});
  out.push_back({.id = "fully_masked",
                 .sentence = "fully masked rows give o = 0, lse = -inf and d_q = 0",
                 .regimes = {R::FullyMasked},
                 .backward = true,
                 .check = law_fully_masked});
  out.push_back({.id = "grad_sums",
                 .sentence = "sum_j d_k_j = 0 and sum_j d_v_j = sum_i d_o_i",
                 .regimes = {R::Normal, R::Outliers, R::Ties, R::Grid, R::FullyMasked},
                 .backward = true,
                 .needs_backward = true,
                 .check = law_grad_sums});
  out.push_back({.id = "determinism",
                 .sentence = "the same inputs give the same bits",
                 .regimes = {R::Normal, R::Outliers},
                 .backward = true,
                 .check = law_determinism});
  out.push_back({.id = "nan_blast",
                 .sentence = "a NaN or inf poisons only the rows that read it",
                 .regimes = {R::Poison},
                 .backward = true,
                 .check = law_nan_blast});
}

}  // namespace fc::props
