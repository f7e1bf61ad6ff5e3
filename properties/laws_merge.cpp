// The merge-state laws (docs/laws.md): a merge kernel (KernelKind::Merge) held to the four laws of
// merging partial attention results -- identity, the empty row, associativity and commutativity, and
// equality with attention over the union of the partials' keys -- and split invariance, which holds an
// attention kernel's split-KV configs to their unsplit twins. The merge laws build their problems from
// the seed (Law::check_once): kCases problems per law, drawn by draw_merge (properties/merge_gen.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>

#include "properties/differential.hpp"
#include "properties/evidence.hpp"
#include "properties/laws.hpp"
#include "properties/merge_gen.hpp"
#include "reference/bounds_merge.hpp"
#include "reference/certified.hpp"
#include "verdict/verdict.hpp"

namespace fc::props {
namespace merge_laws {

constexpr int kCases = 100;  // merge problems per law and seed (check's default budget)
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

ref::Merge64 to64(const MergeInputs& in) {
  return {in.p.partials, in.p.rows, in.p.heads, in.p.d_v, in.o.to_f64(), in.lse.to_f64()};
}

double normal(std::mt19937_64& rng) { return std::normal_distribution<double>(0, 1)(rng); }
template <class T>
T pick(std::mt19937_64& rng, std::initializer_list<T> xs) {
  return *(xs.begin() + rng() % xs.size());
}

DType draw_dtype(const Kernel& k, std::mt19937_64& rng) {
  const auto& t = k.info.merge_dtypes;
  if (std::find(t.begin(), t.end(), DType::F32) != t.end() && rng() % 2 == 0) return DType::F32;
  return t[rng() % t.size()];
}

// A strided copy (a padded, axis-permuted view) of t, a quarter of the time.
HostTensor maybe_strided(const HostTensor& t, std::mt19937_64& rng) {
  if (rng() % 4 != 0) return t;
  std::vector<size_t> order(t.shape.size());
  for (size_t a = 0; a < order.size(); ++a) order[a] = a;
  if (order.size() >= 3 && rng() % 2) std::swap(order[1], order[2]);
  std::vector<int64_t> pad(t.shape.size(), 0);
  pad.back() = int64_t(rng() % 3);
  return t.laid_out(order, 1, pad, {}, int64_t(rng() % 2));
}

// A merged output with NaN: never right (the inputs are finite or -inf).
std::string nan_in(const MergeProblem& p, const MergeOutputs& out, const char* what) {
  for (const HostTensor* t : {&out.o, &out.lse})
    for (int64_t x = 0; x < t->numel(); ++x)
      if (std::isnan(t->get(x)))
        return fmt::format("{}: {}[{}] is NaN ({})\n", what, t == &out.o ? "o" : "lse", x, describe(p));
  return "";
}

std::string run_or_error(const Kernel& k, const MergeInputs& in, MergeOutputs& out) {
  try {
    out = run_merge(k, in);
  } catch (const std::exception& e) {
    return fmt::format("the kernel threw: {} ({})\n", e.what(), describe(in.p));
  }
  return "";
}

// The partials listed in `which`, in that order, as a merge problem of their own (compact).
MergeInputs select(const MergeInputs& in, const std::vector<int64_t>& which) {
  MergeInputs out;
  out.p = in.p;
  out.p.partials = int32_t(which.size());
  const MergeProblem& p = in.p;
  out.o = HostTensor(p.dtype, shape_merge_o_partial(out.p));
  out.lse = HostTensor(DType::F32, shape_merge_lse_partial(out.p));
  for (size_t n = 0; n < which.size(); ++n)
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t h = 0; h < p.heads; ++h) {
        out.lse.set(merge_lse_index(out.p, int64_t(n), h, r), in.lse.get(merge_lse_index(p, which[n], h, r)));
        for (int64_t c = 0; c < p.d_v; ++c)
          out.o.set(merge_o_index(out.p, int64_t(n), r, h, c), in.o.get(merge_o_index(p, which[n], r, h, c)));
      }
  return out;
}

// Merged results (o, lse) as the partials of a further merge (compact).
MergeInputs stack(const MergeProblem& like, const std::vector<MergeOutputs>& parts) {
  MergeInputs out;
  out.p = like;
  out.p.partials = int32_t(parts.size());
  const MergeProblem& p = out.p;
  out.o = HostTensor(p.dtype, shape_merge_o_partial(p));
  out.lse = HostTensor(DType::F32, shape_merge_lse_partial(p));
  for (size_t n = 0; n < parts.size(); ++n)
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t h = 0; h < p.heads; ++h) {
        out.lse.set(merge_lse_index(p, int64_t(n), h, r), parts[n].lse.get(h * p.rows + r));
        for (int64_t c = 0; c < p.d_v; ++c)
          out.o.set(merge_o_index(p, int64_t(n), r, h, c), parts[n].o.get((r * p.heads + h) * p.d_v + c));
      }
  return out;
}

// One merged output against expected values within a bound (o in the storage dtype, lse in F32). Where
// the bound is infinite (an lse near 1e38 rounded to fp32 moves a partial's weight without limit) the
// criterion makes no claim but that the value is not NaN.
std::string merged_within(const MergeProblem& p, const MergeOutputs& got, const ref::MergeResult64& want,
                          const ref::MergeBounds& bound, const char* what) {
  std::string msg;
  const std::pair<const char*, int> tensors[] = {{"o", 0}, {"lse", 1}};
  for (auto [name, which] : tensors) {
    const HostTensor& t = which == 0 ? got.o : got.lse;
    const ref::Verdict v =
        ref::within_bound(t.to_f64(), which == 0 ? want.o : want.lse, which == 0 ? bound.o : bound.lse,
                          which == 0 ? p.dtype : DType::F32, ref::Infinite::NoClaim);
    if (v.ok) continue;
    if (v.worst < 0) {
      msg += fmt::format("{}: {}: {} ({})\n", what, name, v.why, describe(p));
      continue;
    }
    msg += fmt::format("{}: {}[{}] = {:.9g}, expected {:.17g}, |difference| {:.3g} > bound {:.3g} ({}; {})\n", what,
                       name, v.worst, t.get(v.worst), (which == 0 ? want.o : want.lse)[size_t(v.worst)], v.measured,
                       v.bound, v.why, describe(p));
  }
  return msg;
}

// ---- identity ----

// Empty partials (0, -inf) inserted anywhere change no bit of the merge.
std::string law_merge_identity(const Kernel& k, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  for (int n = 0; n < kCases; ++n) {
    const MergeInputs in = draw_merge(k, rng);
    if (in.p.partials >= 16 || !claims_merge(k, in.p)) continue;
    std::vector<int64_t> which;
    for (int64_t q = 0; q < in.p.partials; ++q) which.push_back(q);
    const int extra = 1 + int(rng() % 3);
    for (int e = 0; e < extra; ++e) which.insert(which.begin() + int64_t(rng() % (which.size() + 1)), -1);
    // -1: an empty partial, built as a copy of partial 0 with lse -inf and o 0.
    MergeInputs more = select(in, std::vector<int64_t>(which.size(), 0));
    for (size_t x = 0; x < which.size(); ++x)
      for (int64_t r = 0; r < in.p.rows; ++r)
        for (int64_t h = 0; h < in.p.heads; ++h) {
          const bool empty = which[x] < 0;
          more.lse.set(merge_lse_index(more.p, int64_t(x), h, r),
                       empty ? kNegInf : in.lse.get(merge_lse_index(in.p, which[x], h, r)));
          for (int64_t c = 0; c < in.p.d_v; ++c)
            more.o.set(merge_o_index(more.p, int64_t(x), r, h, c),
                       empty ? 0.0 : in.o.get(merge_o_index(in.p, which[x], r, h, c)));
        }
    if (!claims_merge(k, more.p)) continue;
    MergeOutputs a, b;
    if (std::string e = run_or_error(k, in, a) + run_or_error(k, more, b); !e.empty()) return e;
    if (a.o.bytes != b.o.bytes || a.lse.bytes != b.lse.bytes) {
      for (const auto& [name, x, y] : {std::tuple{"o", &a.o, &b.o}, std::tuple{"lse", &a.lse, &b.lse}})
        for (int64_t i = 0; i < x->numel(); ++i)
          if (std::memcmp(&x->bytes[size_t(i * dtype_size(x->dtype))], &y->bytes[size_t(i * dtype_size(x->dtype))],
                          size_t(dtype_size(x->dtype))) != 0)
            return fmt::format(
                "{}[{}] = {:.9g} without and {:.9g} with {} empty partial{} inserted (the same bits expected; {})\n",
                name, i, x->get(i), y->get(i), extra, extra == 1 ? "" : "s", describe(in.p));
    }
  }
  return "";
}

// ---- empty rows ----

// A row whose partials are all empty merges to o = 0, lse = -inf; no output is NaN.
std::string law_merge_empty(const Kernel& k, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 2);
  for (int n = 0; n < kCases; ++n) {
    MergeInputs in = draw_merge(k, rng, false);
    if (!claims_merge(k, in.p)) continue;
    in.o = in.o.contiguous(), in.lse = in.lse.contiguous();
    std::vector<bool> empty_row(size_t(in.p.rows * in.p.heads));
    for (int64_t r = 0; r < in.p.rows; ++r)
      for (int64_t h = 0; h < in.p.heads; ++h) {
        const bool empty = n % 4 == 0 || rng() % 2 == 0;  // every row empty in a quarter of the problems
        empty_row[size_t(r * in.p.heads + h)] = empty;
        if (!empty) continue;
        for (int64_t q = 0; q < in.p.partials; ++q) {
          in.lse.set(merge_lse_index(in.p, q, h, r), kNegInf);
          for (int64_t c = 0; c < in.p.d_v; ++c) in.o.set(merge_o_index(in.p, q, r, h, c), 0.0);
        }
      }
    MergeOutputs out;
    if (std::string e = run_or_error(k, in, out); !e.empty()) return e;
    for (int64_t r = 0; r < in.p.rows; ++r)
      for (int64_t h = 0; h < in.p.heads; ++h) {
        if (!empty_row[size_t(r * in.p.heads + h)]) continue;
        const double l = out.lse.get(h * in.p.rows + r);
        if (l != kNegInf)
          return fmt::format("lse[h={},r={}] = {:.9g} for a row whose partials are all empty (-inf expected; {})\n", h,
                             r, l, describe(in.p));
        for (int64_t c = 0; c < in.p.d_v; ++c)
          if (const double o = out.o.get((r * in.p.heads + h) * in.p.d_v + c); o != 0)
            return fmt::format("o[r={},h={},c={}] = {:.9g} for a row whose partials are all empty (0 expected; {})\n",
                               r, h, c, o, describe(in.p));
      }
    if (std::string e = nan_in(in.p, out, "the merge"); !e.empty()) return e;
  }
  return "";
}

// ---- associativity and commutativity ----

// The merge of intermediates (o_g, lse_g), each within (e_o, e_lse) of the exact merge of its group,
// against the exact merge of all: the outer merge's own bound on its inputs plus what the
// intermediates' errors move (docs/error-model.md, "Merge states": perturbed partials).
ref::MergeBounds outer_bound(const MergeInputs& outer, const std::vector<ref::MergeBounds>& inner) {
  const ref::Merge64 o64 = to64(outer);
  const ref::CertifiedMerge c = ref::certified_merge(o64);
  ref::MergeBounds b = ref::merge_bounds(o64, c, outer.p.dtype);
  const MergeProblem& p = outer.p;
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t h = 0; h < p.heads; ++h) {
      const size_t at_l = size_t(h * p.rows + r);
      if (c.value.lse[at_l] == kNegInf) continue;
      double f = 0;
      for (const ref::MergeBounds& g : inner) f = std::max(f, g.lse[at_l]);
      b.lse[at_l] += f;
      const double grow = std::exp(2 * f);
      for (int64_t col = 0; col < p.d_v; ++col) {
        const size_t at = size_t((r * p.heads + h) * p.d_v + col);
        double e = 0;
        for (size_t g = 0; g < inner.size(); ++g) {
          const double l = o64.lse[size_t((int64_t(g) * p.heads + h) * p.rows + r)];
          if (l == kNegInf) continue;
          const double a = std::exp(l - c.value.lse[at_l]) * (1 + 1e-9);
          const double o = std::fabs(o64.o[size_t(((int64_t(g) * p.rows + r) * p.heads + h) * p.d_v + col)]);
          // A zero magnitude contributes nothing, also where its factor overflowed.
          e += a * ((inner[g].o[at] == 0 ? 0.0 : grow * inner[g].o[at]) + (o == 0 ? 0.0 : std::expm1(2 * f) * o));
        }
        b.o[at] += e * (1 + 1e-9);
      }
    }
  return b;
}

// Merging in groups (two or three, each in an order of its own, the groups in another) agrees with
// merging all at once within both sides' bounds.
std::string law_merge_associativity(const Kernel& k, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 3);
  for (int n = 0; n < kCases; ++n) {
    const MergeInputs in = draw_merge(k, rng);
    if (in.p.partials < 2 || !claims_merge(k, in.p)) continue;
    std::vector<int64_t> perm;
    for (int64_t q = 0; q < in.p.partials; ++q) perm.push_back(q);
    for (int64_t q = in.p.partials - 1; q > 0; --q) std::swap(perm[size_t(q)], perm[size_t(rng() % uint64_t(q + 1))]);
    const int groups = in.p.partials >= 3 && rng() % 2 ? 3 : 2;
    std::vector<size_t> cut{0};
    for (int g = 1; g < groups; ++g) cut.push_back(cut.back() + 1 + rng() % (perm.size() - cut.back() - (groups - g)));
    cut.push_back(perm.size());
    MergeOutputs all;
    if (std::string e = run_or_error(k, in, all); !e.empty()) return e;
    std::vector<MergeOutputs> parts;
    std::vector<ref::MergeBounds> inner;
    for (int g = 0; g < groups; ++g) {
      const MergeInputs part = select(
          in, std::vector<int64_t>(perm.begin() + int64_t(cut[size_t(g)]), perm.begin() + int64_t(cut[size_t(g) + 1])));
      MergeOutputs out;
      if (std::string e = run_or_error(k, part, out); !e.empty()) return e;
      const ref::Merge64 p64 = to64(part);
      inner.push_back(ref::merge_bounds(p64, ref::certified_merge(p64), in.p.dtype));
      parts.push_back(std::move(out));
    }
    const MergeInputs outer = stack(in.p, parts);
    MergeOutputs grouped;
    if (std::string e = run_or_error(k, outer, grouped); !e.empty()) return e;
    if (std::string e = nan_in(in.p, all, "merged at once") + nan_in(in.p, grouped, "merged in groups"); !e.empty())
      return e;
    // |all - grouped| <= bound(all) + bound(grouped): both against the exact merge of every partial.
    const ref::Merge64 i64 = to64(in);
    const ref::CertifiedMerge c = ref::certified_merge(i64);
    ref::MergeBounds b = ref::merge_bounds(i64, c, in.p.dtype);
    const ref::MergeBounds bg = outer_bound(outer, inner);
    for (size_t x = 0; x < b.o.size(); ++x) b.o[x] += bg.o[x];
    for (size_t x = 0; x < b.lse.size(); ++x) b.lse[x] += bg.lse[x];
    const ref::MergeResult64 want{all.o.to_f64(), all.lse.to_f64()};
    if (std::string e = merged_within(in.p, grouped, want, b, "merged in groups against merged at once"); !e.empty())
      return fmt::format("{} groups of the partials in the order {}: {}", groups, fmt::join(perm, ","), e);
  }
  return "";
}

// ---- equality with attention over the union ----

// The certified attention of rows (1, heads, n_q) of `in` over keys [j0, j1) alone.
ref::Certified certified_keys(const Problem& p, const ref::Tensors64& t, int64_t j0, int64_t j1) {
  Problem s = p;
  s.n_k = int32_t(j1 - j0);
  ref::Tensors64 u;
  u.q = t.q;
  for (int64_t g = 0; g < p.heads_kv; ++g)
    for (int64_t j = j0; j < j1; ++j) {
      u.k.insert(u.k.end(), t.k.begin() + (g * p.n_k + j) * p.d, t.k.begin() + (g * p.n_k + j + 1) * p.d);
      u.v.insert(u.v.end(), t.v.begin() + (g * p.n_k + j) * p.d, t.v.begin() + (g * p.n_k + j + 1) * p.d);
    }
  return ref::certified(s, u);
}

// Keys split into P ranges (some empty), each range's attention from the certified oracle rounded to
// storage as a partial; the kernel's merge of them against the certified attention over every key,
// within the merge's bound on the rounded partials plus what their distance to the exact partials moves.
std::string law_merge_union(const Kernel& k, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 4);
  for (int n = 0; n < kCases; ++n) {
    Problem p;
    p.dtype = draw_dtype(k, rng);
    p.heads_kv = 1 + int32_t(rng() % 2);
    p.heads_q = p.heads_kv * pick(rng, {1, 2, 4});
    p.n_q = 1 + int32_t(rng() % 4);
    p.n_k = 1 + int32_t(rng() % 96);
    p.d = pick(rng, {4, 8, 16});
    p.scale = default_scale(p.d) * pick(rng, {1.0, 1.0, 30.0, 300.0});
    const int32_t P = 1 + int32_t(rng() % 8);
    MergeProblem mp{P, p.n_q, p.heads_q, p.d, p.dtype};
    if (!claims_merge(k, mp)) continue;
    ref::Tensors64 t;
    for (auto* v : {&t.q, &t.k, &t.v}) {
      const int64_t rows = v == &t.q ? int64_t(p.heads_q) * p.n_q : int64_t(p.heads_kv) * p.n_k;
      for (int64_t x = 0; x < rows * p.d; ++x) v->push_back(round_to(p.dtype, normal(rng)));
    }
    std::vector<int64_t> cuts{0};
    for (int32_t q = 1; q < P; ++q) cuts.push_back(int64_t(rng() % uint64_t(p.n_k + 1)));
    cuts.push_back(p.n_k);
    std::sort(cuts.begin(), cuts.end());
    MergeInputs in;
    in.p = mp;
    in.o = HostTensor(p.dtype, shape_merge_o_partial(mp));
    in.lse = HostTensor(DType::F32, shape_merge_lse_partial(mp));
    std::vector<ref::MergeBounds> moved;  // each partial's distance to its exact value
    for (int32_t q = 0; q < P; ++q) {
      ref::MergeBounds e{std::vector<double>(size_t(p.n_q * p.heads_q * p.d), 0.0),
                         std::vector<double>(size_t(p.heads_q * p.n_q), 0.0)};
      const bool empty = cuts[size_t(q)] == cuts[size_t(q) + 1];
      const ref::Certified c = empty ? ref::Certified{} : certified_keys(p, t, cuts[size_t(q)], cuts[size_t(q) + 1]);
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < p.n_q; ++i) {
          const size_t li = size_t(h * p.n_q + i);  // attention's lse (1, heads, n_q) is the merge's (heads, rows)
          const double l = empty ? kNegInf : round_to(DType::F32, c.value.lse[li]);
          in.lse.set(merge_lse_index(mp, q, h, i), l);
          if (!empty) e.lse[li] = c.err.lse[li] + std::fabs(l - c.value.lse[li]);
          for (int64_t col = 0; col < p.d; ++col) {
            const size_t oi = size_t((h * p.n_q + i) * p.d + col);
            const double o = empty ? 0.0 : round_to(p.dtype, c.value.o[oi]);
            in.o.set(merge_o_index(mp, q, i, h, col), o);
            if (!empty) e.o[size_t((i * p.heads_q + h) * p.d + col)] = c.err.o[oi] + std::fabs(o - c.value.o[oi]);
          }
        }
      moved.push_back(std::move(e));
    }
    MergeOutputs out;
    if (std::string e = run_or_error(k, in, out); !e.empty()) return e;
    if (std::string e = nan_in(mp, out, "the merge"); !e.empty()) return e;
    const ref::Certified all = ref::certified(p, t);
    ref::MergeResult64 want{std::vector<double>(size_t(p.n_q * p.heads_q * p.d)), all.value.lse};
    ref::MergeBounds b = outer_bound(in, moved);
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        b.lse[size_t(h * p.n_q + i)] += all.err.lse[size_t(h * p.n_q + i)];
        for (int64_t col = 0; col < p.d; ++col) {
          const size_t oi = size_t((h * p.n_q + i) * p.d + col), mi = size_t((i * p.heads_q + h) * p.d + col);
          want.o[mi] = all.value.o[oi];
          b.o[mi] += all.err.o[oi];
        }
      }
    const std::string msg =
        merged_within(mp, out, want, b, "the merge of the partials against attention over all keys");
    if (!msg.empty())
      return fmt::format("{} keys split at {} (n_q={}, heads_q={}, heads_kv={}, d={}, scale={:.6g}): {}", p.n_k,
                         fmt::join(cuts, ","), p.n_q, p.heads_q, p.heads_kv, p.d, p.scale, msg);
  }
  return "";
}

// ---- split invariance ----

std::string law_split_invariance(const Kernel& k, const Case& c) {
  const auto pairs = split_pairs(k.info);
  const auto& [split, whole] = pairs[c.aux % pairs.size()];
  note_transform(fmt::format("split-KV: splits={} block_m={} block_n={} against splits=0", split.splits, split.block_m,
                             split.block_n));
  if (!claims(k, c.in)) throw NotApplicable("the kernel does not claim the case");
  const Run a = execute(k, c.in, whole, false), b = execute(k, c.in, split, false);
  if (const std::string e = run_errors(a, b); !e.empty()) return e;
  const Problem& p = c.in.p;
  const ref::Certified ref = certify(c.in);
  const ForwardTolerance t =
      forward_unshared(k, c.in, ref, whole, Shared::Scores) + forward_unshared(k, c.in, ref, split, Shared::Scores);
  std::string msg = within(p, "o", b.out.o.to_f64(), a.out.o.to_f64(), t.o, dtype_o(p));
  if (k.info.writes_lse) msg += within(p, "lse", b.out.lse.to_f64(), a.out.lse.to_f64(), t.lse, DType::F32);
  return msg;
}

std::string needs_shared_scores(const KernelInfo& i) {
  return i.exact.shared_scores ? "" : "needs shared scores (the split and unsplit runs compute the same s_ij)";
}

}  // namespace merge_laws

MergeInputs draw_merge(const Kernel& k, std::mt19937_64& rng, bool allow_empty_rows) {
  using namespace merge_laws;
  MergeInputs in;
  MergeProblem& p = in.p;
  p.dtype = draw_dtype(k, rng);
  if (rng() % 3 == 0) {
    p.partials = 2 + int32_t(rng() % 7), p.rows = pick(rng, {2, 4, 8}), p.heads = 2 + int32_t(rng() % 3);
    p.d_v = pick(rng, {8, 16, 32});
  } else {
    p.partials = 1 + int32_t(rng() % 16), p.rows = 1 + int32_t(rng() % 4), p.heads = 1 + int32_t(rng() % 4);
    p.d_v = 1 + int32_t(rng() % 16);
  }
  const double empty_rate = pick(rng, {0.0, 0.2, 0.5});
  const double o_scale = rng() % 4 == 0 ? 100.0 : 1.0;
  HostTensor o(p.dtype, shape_merge_o_partial(p)), lse(DType::F32, shape_merge_lse_partial(p));
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t h = 0; h < p.heads; ++h) {
      const double base = pick(rng, {1.0, -1.0}) * pick(rng, {0.0, 10.0, 1e3, 1e5, 1e30, 3e38});
      const double spread = pick(rng, {0.5, 4.0, 40.0, 400.0});
      const bool all_empty = allow_empty_rows && rng() % 7 == 0;
      for (int64_t q = 0; q < p.partials; ++q) {
        const bool empty = all_empty || std::uniform_real_distribution<double>(0, 1)(rng) < empty_rate;
        double x = empty ? kNegInf : round_to(DType::F32, base + spread * normal(rng));
        if (std::isinf(x) && x > 0) x = 0x1.fffffep127;
        if (!empty && std::isinf(x)) x = -0x1.fffffep127;
        lse.set(merge_lse_index(p, q, h, r), x);
        for (int64_t c = 0; c < p.d_v; ++c) o.set(merge_o_index(p, q, r, h, c), empty ? 0.0 : o_scale * normal(rng));
      }
    }
  in.o = maybe_strided(o, rng);
  in.lse = maybe_strided(lse, rng);
  return in;
}

std::vector<std::pair<Config, Config>> split_pairs(const KernelInfo& i) {
  using namespace merge_laws;
  std::vector<std::pair<Config, Config>> out;
  std::vector<Config> splits = i.split_configs;
  for (const Config& c : i.configs)
    if (c.splits >= 2) splits.push_back(c);
  for (const Config& s : splits) {
    Config twin = s;
    twin.splits = 0;
    bool offered = i.any_tile;
    for (const Config& c : i.configs)
      offered = offered || (c.block_m == s.block_m && c.block_n == s.block_n && c.order == s.order &&
                            c.accum == s.accum && c.deterministic == s.deterministic && c.splits <= 1);
    if (offered) out.emplace_back(s, twin);
  }
  return out;
}

void add_merge_laws(std::vector<Law>& out) {
  using namespace merge_laws;
  using R = Regime;
  out.push_back({.id = "merge_identity",
                 .sentence = "merging with empty partials (0, -inf), anywhere among the partials, changes no bit",
                 .regimes = {R::Normal},
                 .check_once = law_merge_identity,
                 .merge = true,
                 .once_cases = kCases});
  out.push_back({.id = "merge_empty",
                 .sentence = "a row whose partials are all empty merges to o = 0, lse = -inf, never NaN",
                 .regimes = {R::Normal},
                 .check_once = law_merge_empty,
                 .merge = true,
                 .once_cases = kCases});
  out.push_back({.id = "merge_associativity",
                 .sentence = "merging in groups and in any order agrees with merging at once within the merge bound",
                 .regimes = {R::Normal},
                 .check_once = law_merge_associativity,
                 .merge = true,
                 .once_cases = kCases});
  out.push_back({.id = "merge_union",
                 .sentence = "merging the partials of disjoint key ranges gives attention over their union",
                 .regimes = {R::Normal},
                 .check_once = law_merge_union,
                 .merge = true,
                 .once_cases = kCases});
  out.push_back({.id = "split_invariance",
                 .sentence = "the split count of split-KV never changes the answer beyond the bound",
                 .regimes = {R::Normal, R::Outliers, R::Ties, R::FullyMasked, R::FarBelow},
                 .needs_exact = needs_shared_scores,
                 .check = law_split_invariance,
                 .needs_splits = true});
}

}  // namespace fc::props
