// Structural laws, all bitwise: what masked keys, repetition and NaNs must never do.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <tuple>

#include "properties/differential.hpp"
#include "properties/evidence.hpp"
#include "properties/execute.hpp"
#include "properties/laws.hpp"

namespace fc::props {
namespace {

bool same_bits(const HostTensor& a, const HostTensor& b, int64_t i) {
  const int sz = dtype_size(a.dtype);
  return std::memcmp(a.bytes.data() + i * sz, b.bytes.data() + i * sz, size_t(sz)) == 0;
}

// Rows (b, h, i) whose outputs must be bitwise those of the reference run; rows outside are free.
// dq_tol (when given): d_q is a sum over keys whose order the kernel does not fix (atomics), so a
// protected row's d_q is held to the reordering tolerance of its unchanged terms instead.
std::string rows_identical(const Problem& p, const Outputs& a, const Outputs& b, bool lse, bool d_q,
                           const std::function<bool(int64_t, int64_t, int64_t)>& protected_row,
                           const std::vector<double>* dq_tol = nullptr) {
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
          const bool dq_differs = d_q && (dq_tol ? !(std::fabs(a.d_q.get(at) - b.d_q.get(at)) <= (*dq_tol)[size_t(at)])
                                                 : !same_bits(a.d_q, b.d_q, at));
          if (dq_differs)
            return fmt::format(
                "{}: {} became {}{}\n", element_name(p, "d_q", at), a.d_q.get(at), b.d_q.get(at),
                dq_tol ? fmt::format(" (beyond the reordering tolerance {:.3g})", (*dq_tol)[size_t(at)]) : "");
        }
      }
  return "";
}

// d_q's reordering tolerance for a kernel whose d_q rows are not exact (empty: compare bits).
std::vector<double> reorder_tolerance(const Kernel& k, const Case& c, const Outputs& a, const Outputs& b, bool bwd) {
  if (!bwd || k.info.exact.d_q_rows) return {};
  return gradient_order_difference(k, c.in, c.cfg, a, b).d_q;
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
  note_problem("problem with replaced keys", in2);
  note_transform(fmt::format("keys j >= {} (and their values) replaced", cut));
  const bool bwd = has_backward(k, c);
  const Run a = execute(k, c.in, c.cfg, bwd), b = execute(k, in2, c.cfg, bwd);
  if (!a.error.empty() || !b.error.empty()) return a.error + b.error;
  const std::vector<double> dq_tol = reorder_tolerance(k, c, a.out, b.out, bwd);
  const std::string msg = rows_identical(
      p, a.out, b.out, k.info.writes_lse, bwd,
      [&](int64_t, int64_t, int64_t i) { return n_visible(p.mask, i, p.n_q, p.n_k) <= cut; },
      dq_tol.empty() ? nullptr : &dq_tol);
  return msg.empty() ? "" : fmt::format("keys j >= {} replaced; a row that cannot see them changed: {}", cut, msg);
}

// Whether the kernel declares a deterministic configuration with cfg's tiles and splits (a mode the
// determinism law asks for by Config::deterministic).
bool deterministic_mode(const Kernel& k, const Config& cfg) {
  return std::any_of(k.info.configs.begin(), k.info.configs.end(), [&](const Config& x) {
    return x.deterministic && x.block_m == cfg.block_m && x.block_n == cfg.block_n && x.splits == cfg.splits;
  });
}

std::string law_determinism(const Kernel& k, const Case& c) {
  Config cfg = c.cfg;
  cfg.deterministic = true;  // kernels with a bitwise-repeatable backward variant use it
  const bool bwd = has_backward(k, c);
  const Run a = execute(k, c.in, cfg, bwd), b = execute(k, c.in, cfg, bwd);
  if (!a.error.empty() || !b.error.empty()) return a.error + b.error;
  // A backward that declares atomic reductions (and offers no deterministic mode for this config) sums
  // the same gradient terms in another order on each run: its gradients are held to the reordering
  // tolerance (docs/error-model.md, "Atomic reductions"), o and lse still to their bits.
  GradientTolerance tol;
  const bool reorders = bwd && k.info.atomic_backward && !deterministic_mode(k, c.cfg);
  if (reorders) tol = gradient_order_difference(k, c.in, cfg, a.out, b.out);
  const std::vector<double>* tols[] = {nullptr, nullptr, &tol.d_q, &tol.d_k, &tol.d_v};
  const std::pair<const char*, const HostTensor*> pairs[][2] = {{{"o", &a.out.o}, {"o", &b.out.o}},
                                                                {{"lse", &a.out.lse}, {"lse", &b.out.lse}},
                                                                {{"d_q", &a.out.d_q}, {"d_q", &b.out.d_q}},
                                                                {{"d_k", &a.out.d_k}, {"d_k", &b.out.d_k}},
                                                                {{"d_v", &a.out.d_v}, {"d_v", &b.out.d_v}}};
  // The first output that differs: its first differing element, both values, and how many differ.
  for (size_t t = 0; t < std::size(pairs); ++t) {
    const auto& pr = pairs[t];
    const HostTensor &ta = *pr[0].second, &tb = *pr[1].second;
    if (ta.bytes == tb.bytes) continue;
    if (reorders && tols[t]) {
      const std::vector<double> zero(tols[t]->size(), 0.0);
      const std::string msg = agree(c.in.p, pr[0].first, ta, tb, *tols[t], zero);
      if (!msg.empty()) return "the atomic reduction's runs differ beyond the reordering tolerance: " + msg;
      continue;
    }
    int64_t first = -1, differ = 0;
    for (int64_t x = 0; x < ta.numel(); ++x)
      if (!same_bits(ta, tb, x)) first = first < 0 ? x : first, ++differ;
    if (differ == 0) continue;  // the same values (a padded or strided tensor's gaps may differ)
    return fmt::format("{}: {:.9g} then {:.9g} on the same inputs ({} of {} elements of {} differ){}\n",
                       element_name(c.in.p, pr[0].first, first), ta.get(first), tb.get(first), differ, ta.numel(),
                       pr[0].first, deterministic_mode(k, c.cfg) ? " in the declared deterministic mode" : "");
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
  const std::vector<double> dq_tol = reorder_tolerance(k, c, a.out, b.out, bwd);
  std::string msg = rows_identical(
      p, a.out, b.out, k.info.writes_lse, bwd, [&](int64_t bb, int64_t h, int64_t i) { return !in_radius(bb, h, i); },
      dq_tol.empty() ? nullptr : &dq_tol);
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
