// The certified oracle on the variants of contract v2 against the exact one at 256 bits: every
// element within certified's own bound, the bounds meeting their targets against independently
// computed scales (1e-13 as for dense attention, plus the fp64 tanh's 2^-46 c under softcap), and
// the exact zeros the contract fixes (keys no query sees, pages no sequence reads).
#include "tests/catch.hpp"
#include <cmath>

#include "certified_cases.hpp"
#include "reference/certified.hpp"
#include "reference/exact.hpp"
#include "reference/visibility.hpp"
#include "variant_cases.hpp"

namespace fc::ref {
namespace {

using namespace testing;

constexpr double kTarget = 1e-13;

// Plain fp64 o_mag = sum_j P_ij |v_jk| of a dense sequence, from the variant's definition (softcap,
// ALiBi, the window): a scale, so its own rounding does not matter.
std::vector<double> o_mag_of(const Problem& p, const Tensors64& in) {
  const int64_t d = p.d, dv = head_dim_v(p);
  std::vector<double> mag(size_t(p.heads_q * p.n_q * dv), 0.0);  // (heads_q, n_q, d_v)
  for (int64_t h = 0; h < p.heads_q; ++h) {
    const int64_t hk = h / (p.heads_q / p.heads_kv);
    for (int64_t i = 0; i < p.n_q; ++i) {
      std::vector<double> s(size_t(p.n_k), -INFINITY);
      double mx = -INFINITY;
      for (int64_t j = 0; j < p.n_k; ++j) {
        if (!sees(p, i, j, p.n_q, p.n_k)) continue;
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += in.q[size_t((h * p.n_q + i) * d + c)] * in.k[size_t((hk * p.n_k + j) * d + c)];
        double x = p.scale * dot;
        if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
        if (p.alibi) x -= in.seq.alibi_slopes[size_t(h)] * double(std::abs(aligned(p.mask, i, p.n_q, p.n_k) - j));
        s[size_t(j)] = x, mx = std::max(mx, x);
      }
      const double sink = p.sinks ? in.seq.sinks[size_t(h)] : -INFINITY;  // one more logit, no value
      if (mx == -INFINITY) continue;
      mx = std::max(mx, sink);
      double l = std::exp(sink - mx);
      for (double& e : s) l += (e = std::exp(e - mx));
      for (int64_t j = 0; j < p.n_k; ++j)
        for (int64_t c = 0; c < dv; ++c)
          mag[size_t((h * p.n_q + i) * dv + c)] +=
              s[size_t(j)] / l * std::fabs(in.v[size_t((hk * p.n_k + j) * dv + c)]);
    }
  }
  return mag;
}

struct VariantRun {
  const VariantCase* vc;
  Result64 ex;
  Certified ce;
};

const std::vector<VariantRun>& runs() {
  static const std::vector<VariantCase> cases = variant_cases();
  static const std::vector<VariantRun> r = [] {
    std::vector<VariantRun> out;
    for (const VariantCase& vc : cases) out.push_back({&vc, exact(vc.p, vc.in, 256), certified(vc.p, vc.in)});
    return out;
  }();
  return r;
}

// first_violation against exact values rounded once to double: err bounds the distance to the exact
// value, which lies within u|x| of its rounding x (a sink of 8 puts lse where that matters).
std::vector<double> plus_rounding(const std::vector<double>& err, const std::vector<double>& exact) {
  std::vector<double> out = err;
  for (size_t x = 0; x < out.size(); ++x)
    if (std::isfinite(exact[x])) out[x] += 0x1p-53 * std::fabs(exact[x]);
  return out;
}

TEST_CASE("certified on the variants: |certified - exact| <= err for o, lse, d_q, d_k, d_v", "[cpu]") {
  for (const VariantRun& r : runs()) {
    INFO(r.vc->name);
    CHECK(first_violation(r.ce.value.o, r.ex.o, r.ce.err.o) == -1);
    CHECK(first_violation(r.ce.value.lse, r.ex.lse, plus_rounding(r.ce.err.lse, r.ex.lse)) == -1);
    CHECK(first_violation(r.ce.value.d_q, r.ex.d_q, r.ce.err.d_q) == -1);
    CHECK(first_violation(r.ce.value.d_k, r.ex.d_k, r.ce.err.d_k) == -1);
    CHECK(first_violation(r.ce.value.d_v, r.ex.d_v, r.ce.err.d_v) == -1);
  }
}

TEST_CASE("certified on the variants: o and lse bounds meet 1e-13 (+ 2^-46 c under softcap)", "[cpu]") {
  for (const VariantRun& r : runs()) {
    const Problem& p = r.vc->p;
    INFO(r.vc->name);
    const double target = kTarget + 0x1p-46 * p.softcap;
    const int64_t dv = head_dim_v(p);
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t n_q = n_q_of(p, r.vc->in.seq, b), n_k = n_k_of(p, r.vc->in.seq, b);
      if (n_q == 0 || n_k == 0) continue;
      const Dense ds = dense_sequence(p, r.vc->in, b);
      const std::vector<double> mag = o_mag_of(ds.p, ds.in);
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < n_q; ++i) {
          const double lse = r.ex.lse[size_t(lse_at(p, r.vc->in.seq, b, h, i))];
          if (std::isfinite(lse))
            CHECK(r.ce.err.lse[size_t(lse_at(p, r.vc->in.seq, b, h, i))] <= target * std::max(1.0, std::fabs(lse)));
          // Weights below e^-699 (every key's, under a sink far above the scores) are dropped and
          // charged absolutely: 2^-1008 per key and column of v (certified.cpp).
          for (int64_t c = 0; c < dv; ++c)
            CHECK(r.ce.err.o[size_t(q_index(p, r.vc->in.seq, b, h, i, c, dv))] <=
                  target * mag[size_t((h * n_q + i) * dv + c)] + 0x1p-1000);
        }
    }
  }
}

TEST_CASE("certified on the variants: rows with no key, keys no query sees and unread pages are exact zeros", "[cpu]") {
  for (const VariantRun& r : runs()) {
    const Problem& p = r.vc->p;
    if (!p.varlen) continue;
    INFO(r.vc->name);
    std::vector<char> read(r.ce.value.d_k.size(), 0);  // (k elements): seen by some query
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t n_q = n_q_of(p, r.vc->in.seq, b), n_k = n_k_of(p, r.vc->in.seq, b);
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < n_q && n_k == 0; ++i) {
          CHECK(r.ce.value.lse[size_t(lse_at(p, r.vc->in.seq, b, h, i))] ==
                (p.sinks ? r.vc->in.seq.sinks[size_t(h)] : -INFINITY));
          CHECK(r.ce.err.lse[size_t(lse_at(p, r.vc->in.seq, b, h, i))] == 0.0);
        }
      if (n_q == 0) continue;
      for (int64_t h = 0; h < p.heads_kv; ++h)
        for (int64_t j = 0; j < n_k; ++j)
          for (int64_t c = 0; c < p.d; ++c) read[size_t(kv_index(p, r.vc->in.seq, b, h, j, c, p.d))] = 1;
    }
    int64_t unread = 0;
    for (size_t x = 0; x < read.size(); ++x)
      if (!read[x]) {
        ++unread;
        CHECK(r.ce.value.d_k[x] == 0.0);
        CHECK(r.ce.err.d_k[x] == 0.0);
        CHECK(r.ex.d_k[x] == 0.0);
      }
    CHECK(unread > 0);  // every varlen case has keys no query sees (or pages no sequence reads)
  }
}

// Padded varlen (contract v3): the padded case against the same sequences packed end to end (the
// tests' own arithmetic moves every element): each sequence's outputs and bounds are the compact
// run's, bit for bit, in both oracles; every output element on a padding token is an exact 0.
TEST_CASE("padded varlen: the oracles give the compact layout's bits on each sequence and 0 on padding", "[cpu]") {
  int padded_cases = 0;
  for (const VariantRun& r : runs()) {
    const Problem& p = r.vc->p;
    if (!p.padded) continue;
    ++padded_cases;
    INFO(r.vc->name);
    const SeqData& s = r.vc->in.seq;
    Problem cp = p;
    cp.padded = false, cp.total_q = s.cu_seqlens_q.back(), cp.total_k = s.cu_seqlens_k.back();
    Tensors64 ci;
    ci.seq = s, ci.seq.cu_seqlens_q_padded.clear(), ci.seq.cu_seqlens_k_padded.clear();
    const int64_t d = p.d, dv = head_dim_v(p);
    ci.q.resize(size_t(numel_q(cp))), ci.d_o.resize(size_t(numel_o(cp)));
    ci.k.resize(size_t(numel_kv(cp))), ci.v.resize(size_t(numel_v(cp)));
    std::vector<char> live_q(size_t(p.total_q), 0), live_k(size_t(p.total_k), 0);
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t i = 0; i < n_q_of(p, s, b); ++i) {
        live_q[size_t(s.cu_seqlens_q_padded[size_t(b)] + i)] = 1;
        for (int64_t h = 0; h < p.heads_q; ++h) {
          for (int64_t c = 0; c < d; ++c)
            ci.q[size_t(q_index(cp, ci.seq, b, h, i, c, d))] = r.vc->in.q[size_t(q_index(p, s, b, h, i, c, d))];
          for (int64_t c = 0; c < dv; ++c)
            ci.d_o[size_t(q_index(cp, ci.seq, b, h, i, c, dv))] = r.vc->in.d_o[size_t(q_index(p, s, b, h, i, c, dv))];
        }
      }
      for (int64_t j = 0; j < n_k_of(p, s, b); ++j) {
        live_k[size_t(s.cu_seqlens_k_padded[size_t(b)] + j)] = 1;
        for (int64_t h = 0; h < p.heads_kv; ++h) {
          for (int64_t c = 0; c < d; ++c)
            ci.k[size_t(kv_index(cp, ci.seq, b, h, j, c, d))] = r.vc->in.k[size_t(kv_index(p, s, b, h, j, c, d))];
          for (int64_t c = 0; c < dv; ++c)
            ci.v[size_t(kv_index(cp, ci.seq, b, h, j, c, dv))] = r.vc->in.v[size_t(kv_index(p, s, b, h, j, c, dv))];
        }
      }
    }
    const Result64 ex = exact(cp, ci, 256);
    const Certified ce = certified(cp, ci);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < n_q_of(p, s, b); ++i) {
          const size_t a = size_t(lse_at(p, s, b, h, i)), c0 = size_t(lse_at(cp, ci.seq, b, h, i));
          CHECK(r.ex.lse[a] == ex.lse[c0]);
          CHECK(r.ce.value.lse[a] == ce.value.lse[c0]);
          CHECK(r.ce.err.lse[a] == ce.err.lse[c0]);
          for (int64_t c = 0; c < dv; ++c) {
            const size_t x = size_t(q_index(p, s, b, h, i, c, dv)), y = size_t(q_index(cp, ci.seq, b, h, i, c, dv));
            CHECK(r.ex.o[x] == ex.o[y]);
            CHECK(r.ce.value.o[x] == ce.value.o[y]);
            CHECK(r.ce.err.o[x] == ce.err.o[y]);
          }
          for (int64_t c = 0; c < d; ++c) {
            const size_t x = size_t(q_index(p, s, b, h, i, c, d)), y = size_t(q_index(cp, ci.seq, b, h, i, c, d));
            CHECK(r.ex.d_q[x] == ex.d_q[y]);
            CHECK(r.ce.value.d_q[x] == ce.value.d_q[y]);
          }
        }
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads_kv; ++h)
        for (int64_t j = 0; j < n_k_of(p, s, b); ++j)
          for (int64_t c = 0; c < d; ++c) {
            const size_t x = size_t(kv_index(p, s, b, h, j, c, d)), y = size_t(kv_index(cp, ci.seq, b, h, j, c, d));
            CHECK(r.ex.d_k[x] == ex.d_k[y]);
            CHECK(r.ce.value.d_k[x] == ce.value.d_k[y]);
            CHECK(r.ce.err.d_k[x] == ce.err.d_k[y]);
          }
    // Padding tokens: every output element and its bound 0.
    int64_t padding = 0;
    for (int64_t t = 0; t < p.total_q; ++t) {
      if (live_q[size_t(t)]) continue;
      ++padding;
      for (int64_t h = 0; h < p.heads_q; ++h) {
        CHECK(r.ex.lse[size_t(h * p.total_q + t)] == 0.0);
        CHECK(r.ce.value.lse[size_t(h * p.total_q + t)] == 0.0);
        for (int64_t c = 0; c < dv; ++c) CHECK(r.ce.value.o[size_t((t * p.heads_q + h) * dv + c)] == 0.0);
        for (int64_t c = 0; c < d; ++c) CHECK(r.ce.value.d_q[size_t((t * p.heads_q + h) * d + c)] == 0.0);
      }
    }
    for (int64_t t = 0; t < p.total_k; ++t) {
      if (live_k[size_t(t)]) continue;
      ++padding;
      for (int64_t c = 0; c < p.heads_kv * d; ++c) CHECK(r.ce.value.d_k[size_t(t * p.heads_kv * d + c)] == 0.0);
      for (int64_t c = 0; c < p.heads_kv * dv; ++c) CHECK(r.ex.d_v[size_t(t * p.heads_kv * dv + c)] == 0.0);
    }
    CHECK(padding > 0);
  }
  CHECK(padded_cases > 0);
}

}  // namespace
}  // namespace fc::ref
