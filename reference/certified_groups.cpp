// Certified oracle, orchestration (certified.hpp): a problem is cut into (sequence, kv head) groups,
// each gathered compact from whatever layout the variant uses (attention.h's q_row / kv_row), run
// through the group forward and backward (certified.cpp, certified_backward.cpp), and scattered
// back. Paged problems may map several logical keys to one physical row (repeated pages): their
// d_k, d_v rows are the sum, added after every group has run, with the additions' roundings charged.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>
#include <vector>

#include "reference/certified.hpp"
#include "reference/certified_internal.hpp"
#include "reference/parallel.hpp"
#include "reference/visibility.hpp"

namespace fc::ref {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Groups whose (m, n_k) matrices hold at most this many elements (32 MiB each) run in parallel.
constexpr double kParallelGroupElems = 1 << 22;
// Problems below this many multiply-adds of S = q kᵀ (n_q·heads·n_k·d) run on one thread.
constexpr double kParallelWork = 1 << 24;

bool certifiable(double x) { return std::isfinite(x) && std::fabs(x) < std::ldexp(1.0, cert::kMaxExp); }

// One group's inputs: rows r = local head · n_q + i of the group's query heads, keys j of its kv head.
cert::GroupIn gather(const Problem& p, const Tensors64& in, int64_t b, int32_t h_kv, bool grads) {
  const Seqs seqs = in.seq.seqs();
  const Index d = p.d, dv = head_dim_v(p), group = p.heads_q / p.heads_kv;
  const Index n_q = seq_n_q(p, seqs, b), n = seq_n_k(p, seqs, b), m = group * n_q;
  cert::GroupIn g;
  g.scale = p.scale;
  g.softcap = p.softcap;
  g.q.resize(m, d);
  g.k.resize(n, d);
  g.v.resize(n, dv);
  if (grads) g.d_o.resize(m, dv);
  g.first.assign(m, 0);
  g.n_vis.assign(m, 0);
  g.bad.assign(m, 0);
  g.bad_d_o.assign(m, 0);
  if (p.alibi) g.slope.assign(m, 0.0), g.aligned.assign(m, 0);
  if (p.sinks) g.sink.assign(m, 0.0);
  const bool masked = per_key_mask(p);
  if (masked) g.bias = Mat::Constant(m, n, -kInf);
  std::vector<char> bad_key(n, 0);  // (n_k)
  for (Index j = 0; j < n; ++j) {
    const int64_t row = kv_row(p, seqs, b, h_kv, j);
    for (Index l = 0; l < d; ++l) {
      const double x = in.k[size_t(row * d + l)];
      bad_key[j] |= !certifiable(x);
      g.k(j, l) = certifiable(x) ? x : 0.0;
    }
    for (Index l = 0; l < dv; ++l) {
      const double x = in.v[size_t(row * dv + l)];
      bad_key[j] |= !certifiable(x);
      g.v(j, l) = certifiable(x) ? x : 0.0;
    }
  }
  for (Index r = 0; r < m; ++r) {
    const int32_t h = int32_t(h_kv * group + r / n_q);
    const int64_t i = r % n_q, row = q_row(p, seqs, b, h, i);
    Index j0 = 0;  // the visible keys [j0, j1): one range (sees, visibility.hpp)
    while (j0 < n && !sees(p, i, j0, n_q, n)) ++j0;
    Index j1 = j0;
    while (j1 < n && sees(p, i, j1, n_q, n)) ++j1;
    if (masked) {  // the mask tensor and block mask hide keys inside the range: it shrinks to the visible
      for (Index j = j0; j < j1; ++j) g.bias(r, j) = in.seq.bias(p, b, h, i, j);
      while (j0 < j1 && cert::hidden_score(g.bias(r, j0))) ++j0;
      while (j1 > j0 && cert::hidden_score(g.bias(r, j1 - 1))) --j1;
    }
    g.first[r] = j0;
    g.n_vis[r] = j1;
    if (p.alibi) g.slope[r] = in.seq.alibi_slopes[size_t(h)], g.aligned[r] = aligned(p.mask, i, n_q, n);
    if (p.sinks) g.sink[r] = in.seq.sinks[size_t(h)];
    for (Index j = j0; j < j1; ++j) g.bad[r] |= bad_key[j] && !(masked && cert::hidden_score(g.bias(r, j)));
    // q reaches the forward and the backward, d_o only the backward; a row that sees no key has
    // o = 0, lse = -inf and d_q = 0 whatever its q and d_o hold (the contract: never NaN there).
    for (Index l = 0; l < d; ++l) {
      const double x = in.q[size_t(row * d + l)];
      g.bad[r] |= !certifiable(x) && j1 > j0;
      g.q(r, l) = certifiable(x) ? x : 0.0;
    }
    for (Index l = 0; grads && l < dv; ++l) {
      const double x = in.d_o[size_t(row * dv + l)];
      g.bad_d_o[r] |= !certifiable(x) && j1 > j0;
      g.d_o(r, l) = certifiable(x) ? x : 0.0;
    }
  }
  return g;
}

// A group's key gradients, kept for the paged sum.
struct KeyGrads {
  cert::GroupBwd bw;
  std::vector<char> poisoned;  // (n_k): keys an uncertified row sees
};

// Values and errors of p's outputs, all zero (gradients when grads), an array a task (zero_each).
Certified zeroed(const Problem& p, bool grads) {
  Certified c;
  std::vector<std::pair<std::vector<double>*, int64_t>> arrays = {{&c.o_mag, numel_o(p)}};
  for (Result64* r : {&c.value, &c.err}) {
    arrays.insert(arrays.end(), {{&r->o, numel_o(p)}, {&r->lse, numel_lse(p)}});
    if (grads) arrays.insert(arrays.end(), {{&r->d_q, numel_q(p)}, {&r->d_k, numel_kv(p)}, {&r->d_v, numel_v(p)}});
  }
  zero_each(arrays);
  return c;
}

// The group's rows into c: o, lse and d_q, NaN with an infinite error where uncertified. A group
// with no key (n == 0): every row is empty (o = 0, lse = -inf, d_q = 0), exactly.
void scatter_rows(const Problem& p, const Seqs& seqs, int64_t b, int32_t h_kv, const cert::GroupIn& g,
                  const cert::GroupFwd& f, const cert::GroupBwd& bw, bool grads, Certified& c) {
  const Index d = p.d, dv = head_dim_v(p), group = p.heads_q / p.heads_kv;
  const Index n_q = seq_n_q(p, seqs, b), n = seq_n_k(p, seqs, b), m = group * n_q;
  for (Index r = 0; r < m; ++r) {
    const int32_t h = int32_t(h_kv * group + r / n_q);
    const int64_t i = r % n_q, row = q_row(p, seqs, b, h, i), ol = lse_index(p, seqs, b, h, i);
    if (n == 0) {  // no key: lse is the sink alone (-inf without one), exactly
      c.value.lse[ol] = g.sink_of(r);
      continue;
    }
    const bool bad = f.bad[r];
    c.value.lse[ol] = bad ? kNaN : f.lse[r];
    c.err.lse[ol] = bad ? kInf : f.lse_err[r];
    for (Index l = 0; l < dv; ++l) {
      const int64_t x = row * dv + l;
      c.value.o[x] = bad ? kNaN : f.o(r, l);
      c.err.o[x] = bad ? kInf : f.o_err(r, l);
      c.o_mag[x] = bad ? kNaN : f.o_mag(r, l);
    }
    const bool bad_grad = bad || g.bad_d_o[r];
    for (Index l = 0; grads && l < d; ++l) {
      c.value.d_q[row * d + l] = bad_grad ? kNaN : bw.d_q(r, l);
      c.err.d_q[row * d + l] = bad_grad ? kInf : bw.d_q_err(r, l);
    }
  }
}

// (n_k): the keys an uncertified row of the group sees (their d_k, d_v are uncertified).
std::vector<char> poisoned_keys(const cert::GroupIn& g, const cert::GroupFwd& f) {
  const Index m = g.q.rows(), n = g.k.rows();
  std::vector<char> poisoned(n, 0);
  for (Index r = 0; r < m; ++r)
    if (f.bad[r] || g.bad_d_o[r])
      for (Index j = g.first[r]; j < g.n_vis[r]; ++j) poisoned[j] = 1;
  return poisoned;
}

// The group's d_k, d_v into c (a dense or varlen layout: each key has its own row).
void scatter_keys(const Problem& p, const Seqs& seqs, int64_t b, int32_t h_kv, const cert::GroupBwd& bw,
                  const std::vector<char>& poisoned, Certified& c) {
  const Index d = p.d, dv = head_dim_v(p);
  for (Index j = 0; j < Index(poisoned.size()); ++j) {
    const int64_t row = kv_row(p, seqs, b, h_kv, j);
    for (Index l = 0; l < d; ++l) {
      c.value.d_k[row * d + l] = poisoned[j] ? kNaN : bw.d_k(j, l);
      c.err.d_k[row * d + l] = poisoned[j] ? kInf : bw.d_k_err(j, l);
    }
    for (Index l = 0; l < dv; ++l) {
      c.value.d_v[row * dv + l] = poisoned[j] ? kNaN : bw.d_v(j, l);
      c.err.d_v[row * dv + l] = poisoned[j] ? kInf : bw.d_v_err(j, l);
    }
  }
}

// Paged: each physical row sums the logical keys mapped to it; a second term onwards costs one
// rounding of the sum (u |sum|), charged as it is added. kept: each group's key gradients.
void add_paged(const Problem& p, const Seqs& seqs, const std::vector<KeyGrads>& kept, Certified& c) {
  const Index d = p.d, dv = head_dim_v(p);
  std::vector<int32_t> uses(size_t(rows_kv(p)), 0);  // (rows_kv): terms added so far
  auto add = [](double& val, double& err, double x, double e, bool first) {
    val += x;
    err += e + (first ? 0.0 : cert::kU * std::fabs(val) * cert::kSlack);
  };
  for (int64_t task = 0; task < int64_t(kept.size()); ++task) {
    const KeyGrads& kg = kept[size_t(task)];
    if (kg.poisoned.empty()) continue;  // a group with no query or no key
    const int64_t b = task / p.heads_kv;
    const int32_t h_kv = int32_t(task % p.heads_kv);
    for (Index j = 0; j < Index(kg.poisoned.size()); ++j) {
      const int64_t row = kv_row(p, seqs, b, h_kv, j);
      const bool first = uses[size_t(row)]++ == 0, bad = kg.poisoned[size_t(j)];
      for (Index l = 0; l < d; ++l)
        add(c.value.d_k[row * d + l], c.err.d_k[row * d + l], bad ? kNaN : kg.bw.d_k(j, l),
            bad ? kInf : kg.bw.d_k_err(j, l), first);
      for (Index l = 0; l < dv; ++l)
        add(c.value.d_v[row * dv + l], c.err.d_v[row * dv + l], bad ? kNaN : kg.bw.d_v(j, l),
            bad ? kInf : kg.bw.d_v_err(j, l), first);
    }
  }
}

}  // namespace

Certified certified(const Problem& p, const Tensors64& in) {
  // A batch without queries has an empty d_o whether or not gradients were asked: give them (zeros).
  const bool grads = !in.d_o.empty() || numel_o(p) == 0, paged = is_paged(p);
  const Seqs seqs = in.seq.seqs();
  const Index d = p.d, group = p.heads_q / p.heads_kv;
  Certified c = zeroed(p, grads);
  double work = 0, largest = 0;  // multiply-adds of S, and the largest group's (m, n_k)
  for (int64_t b = 0; b < p.batch; ++b) {
    const double mn = double(group * seq_n_q(p, seqs, b)) * double(seq_n_k(p, seqs, b));
    work += mn * double(p.heads_kv) * double(d);
    largest = std::max(largest, mn);
  }
  // Below ~2^24 multiply-adds the whole oracle takes milliseconds: no threads.
  const SerialScope small(work < kParallelWork);
  const int64_t groups = p.batch * p.heads_kv;
  std::vector<KeyGrads> kept(paged && grads ? size_t(groups) : 0);
  // One task per (sequence, kv head) group, each writing its own rows of c (paged keys: into kept).
  auto one_group = [&](int64_t task) {
    const int64_t b = task / p.heads_kv;
    const int32_t h_kv = int32_t(task % p.heads_kv);
    const Index n = seq_n_k(p, seqs, b), m = group * seq_n_q(p, seqs, b);
    if (m == 0) return;  // no query: nothing produced, its keys' gradients stay 0
    const cert::GroupIn g = gather(p, in, b, h_kv, grads);
    cert::GroupFwd f;
    cert::GroupBwd bw;
    if (n > 0) {
      f = cert::forward(g);
      if (grads) bw = cert::backward(g, f);
    }
    scatter_rows(p, seqs, b, h_kv, g, f, bw, grads, c);
    if (!grads || n == 0) return;
    std::vector<char> poisoned = poisoned_keys(g, f);
    if (paged)
      kept[size_t(task)] = {std::move(bw), std::move(poisoned)};
    else
      scatter_keys(p, seqs, b, h_kv, bw, poisoned, c);
  };
  // Small groups run side by side; large ones one after another, each parallel inside (their
  // (m, n_k) matrices would not fit in memory many at a time).
  if (largest <= kParallelGroupElems)
    parallel_for(groups, one_group);
  else
    for (int64_t t = 0; t < groups; ++t) one_group(t);
  if (!kept.empty()) add_paged(p, seqs, kept, c);
  return c;
}

}  // namespace fc::ref
