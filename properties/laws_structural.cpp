// Structural laws, all bitwise: what masked keys, repetition and NaNs must never do.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <optional>
#include <random>
#include <tuple>

#include "properties/differential.hpp"
#include "properties/evidence.hpp"
#include "properties/laws.hpp"
#include "verdict/verdict.hpp"

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
      in2.k.set(x, round_to(dtype_kv(p), 1000.0 * std::normal_distribution<double>()(rng)));
      in2.v.set(x, round_to(dtype_kv(p), 1000.0 * std::normal_distribution<double>()(rng)));
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

// A declared deterministic mode runs this many times on each case, every run held to the first's bits:
// a mode that is nondeterministic only at times (one call in 30) shows within the first case.
constexpr int kModeRepeats = 100;

// The first output of two runs that differs: its first differing element, both values and how many
// differ, or "". Gradients are held to `tol` (the reordering tolerance) where it is given.
std::string first_difference(const Problem& p, const Outputs& a, const Outputs& b, const GradientTolerance* tol) {
  const std::vector<double>* tols[] = {nullptr, nullptr, tol ? &tol->d_q : nullptr, tol ? &tol->d_k : nullptr,
                                       tol ? &tol->d_v : nullptr};
  const std::pair<const char*, const HostTensor*> pairs[][2] = {{{"o", &a.o}, {"o", &b.o}},
                                                                {{"lse", &a.lse}, {"lse", &b.lse}},
                                                                {{"d_q", &a.d_q}, {"d_q", &b.d_q}},
                                                                {{"d_k", &a.d_k}, {"d_k", &b.d_k}},
                                                                {{"d_v", &a.d_v}, {"d_v", &b.d_v}}};
  for (size_t t = 0; t < std::size(pairs); ++t) {
    const auto& pr = pairs[t];
    const HostTensor &ta = *pr[0].second, &tb = *pr[1].second;
    if (ta.bytes == tb.bytes) continue;
    if (tols[t]) {
      const std::vector<double> zero(tols[t]->size(), 0.0);
      const std::string msg = agree(p, pr[0].first, ta, tb, *tols[t], zero);
      if (!msg.empty()) return "the atomic reduction's runs differ beyond the reordering tolerance: " + msg;
      continue;
    }
    int64_t first = -1, differ = 0;
    for (int64_t x = 0; x < ta.numel(); ++x)
      if (!same_bits(ta, tb, x)) first = first < 0 ? x : first, ++differ;
    if (differ == 0) continue;  // the same values (a padded or strided tensor's gaps may differ)
    return fmt::format("{}: {:.9g} then {:.9g} on the same inputs ({} of {} elements of {} differ)\n",
                       element_name(p, pr[0].first, first), ta.get(first), tb.get(first), differ, ta.numel(),
                       pr[0].first);
  }
  return "";
}

// A call on another problem, made between two runs of the case: a race whose outcome depends on the
// state the previous call left (which of two orders a reduction's tiles arrive in, a counter, the
// scheduler's queue) repeats its pattern when the same call runs back to back, and shows when one
// call of another row count came in between. The problem: one row of one head (the case's d, dtype,
// mask), else the case's with a query row more or fewer, else with one batch element more (a kernel
// that declares its lengths); none when the kernel claims none of them.
std::optional<Inputs> interlude(const Kernel& k, const Case& c, bool bwd) {
  const Problem& p = c.in.p;
  Problem one = p;
  one.batch = one.heads_q = one.heads_kv = one.n_q = 1;
  Problem more = p, fewer = p, wider = p;
  ++more.n_q, --fewer.n_q, ++wider.batch;
  for (const Problem& q : {one, more, fewer, wider}) {
    if (q.varlen || q.n_q < 1 || !claims(k, q)) continue;
    Inputs in;
    in.p = q;
    in.q = HostTensor(q.dtype, shape_q(q));
    in.k = HostTensor(q.dtype, shape_kv(q));
    in.v = HostTensor(q.dtype, shape_v(q));
    if (bwd) in.d_o = HostTensor(q.dtype, shape_o(q));
    std::mt19937_64 rng(c.aux ^ 0x9e3779b97f4a7c15ull);
    for (HostTensor* t : {&in.q, &in.k, &in.v, &in.d_o})
      for (int64_t x = 0; !t->shape.empty() && x < t->numel(); ++x) t->set(x, double(int64_t(rng() % 5) - 2));
    if (p.alibi) in.alibi_slopes = c.in.alibi_slopes;
    if (validate(in).empty() && claims(k, in)) return in;
  }
  return std::nullopt;
}

// Judged by what the kernel declares: a declared deterministic mode for the case's tiles and splits
// runs kModeRepeats times, bitwise; a backward that declares atomic reductions sums the same gradient
// terms in another order on each run, so its gradients are held to the reordering tolerance
// (docs/error-model.md, "Atomic reductions") and o, lse to their bits; any other kernel gives the same
// bits twice (with Config::deterministic set: kernels with a bitwise-repeatable backward variant use it).
std::string law_determinism(const Kernel& k, const Case& c) {
  const bool bwd = has_backward(k, c);
  const bool mode = deterministic_mode(k, c.cfg);
  if (mode) {
    Config det = c.cfg;
    det.deterministic = true;
    const Run first = execute(k, c.in, det, bwd);
    if (!first.error.empty()) return first.error;
    for (int r = 2; r <= kModeRepeats; ++r) {
      const Run again = execute(k, c.in, det, bwd);
      if (!again.error.empty()) return again.error;
      const std::string msg = first_difference(c.in.p, first.out, again.out, nullptr);
      if (!msg.empty())
        return fmt::format("run {} of {} in the declared deterministic mode differs from the first: {}", r,
                           kModeRepeats, msg);
    }
    if (!bwd || !k.info.atomic_backward) return "";
  }
  Config cfg = c.cfg;
  cfg.deterministic = !k.info.atomic_backward;  // an atomic backward is judged in its atomic configuration
  const bool reorders = bwd && k.info.atomic_backward;
  auto differ = [&](const Run& a, const Run& b) {
    if (!reorders) return first_difference(c.in.p, a.out, b.out, nullptr);
    const GradientTolerance tol = gradient_order_difference(k, c.in, cfg, a.out, b.out);
    return first_difference(c.in.p, a.out, b.out, &tol);
  };
  // Three runs: the second right after the first, the third after a call on another problem
  // (interlude); each held to the first.
  const Run a = execute(k, c.in, cfg, bwd), b = execute(k, c.in, cfg, bwd);
  if (!a.error.empty() || !b.error.empty()) return a.error + b.error;
  if (std::string msg = differ(a, b); !msg.empty()) return msg;
  const std::optional<Inputs> other = interlude(k, c, bwd);
  if (!other) return "";
  if (const Run x = execute(k, *other, cfg, bwd); !x.error.empty()) return x.error;
  const Run r = execute(k, c.in, cfg, bwd);
  if (!r.error.empty()) return r.error;
  const std::string msg = differ(a, r);
  return msg.empty() ? ""
                     : fmt::format("after a call on another problem (batch={} heads_q={} n_q={}): {}", other->p.batch,
                                   other->p.heads_q, other->p.n_q, msg);
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

std::string repeat_difference(const Kernel& k, const Case& c, const Config& cfg, const Run& a, const Run& b, bool bwd) {
  // A backward that declares atomic reductions (and offers no deterministic mode for this config) sums
  // the same gradient terms in another order on each run: its gradients are held to the reordering
  // tolerance (docs/error-model.md, "Atomic reductions"), o and lse still to their bits.
  if (!(bwd && k.info.atomic_backward && !deterministic_mode(k, c.cfg)))
    return first_difference(c.in.p, a.out, b.out, nullptr);
  const GradientTolerance tol = gradient_order_difference(k, c.in, cfg, a.out, b.out);
  return first_difference(c.in.p, a.out, b.out, &tol);
}

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
