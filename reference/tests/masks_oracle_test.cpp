// The oracles on mask tensors and block masks (contract v3, docs/SEMANTICS.md "Mask tensors"): a
// boolean mask equal to a built-in mask is that mask (bit for bit in the exact oracle, which sums the
// same terms in the same order), an additive mask of 0 and -inf is the boolean one, a block mask is
// the dense mask of its blocks, a row every key of which is hidden is an empty row, and the certified
// oracle's values lie within their claimed errors of the exact ones.
#include "tests/catch.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "reference/certified.hpp"
#include "reference/exact.hpp"
#include "reference/tests/certified_cases.hpp"
#include "reference/tests/variant_cases.hpp"

using namespace fc;
using namespace fc::ref;
using fc::ref::testing::fill;
using fc::ref::testing::first_violation;

namespace {

Problem dense(int32_t b, int32_t hq, int32_t hk, int32_t nq, int32_t nk, int32_t d) {
  Problem p;
  p.batch = b, p.heads_q = hq, p.heads_kv = hk, p.n_q = nq, p.n_k = nk, p.d = d;
  p.scale = 0.5;
  return p;
}

// in with a (bm, hm, n_q, n_k) mask of p's kind, element (b, h, i, j) = f(b, h, i, j).
template <class F>
void set_mask(Problem& p, Tensors64& in, MaskKind kind, int32_t bm, int32_t hm, F f) {
  p.mask_kind = kind, p.mask_b = bm, p.mask_h = hm;
  in.seq.mask_shape = {bm, hm, p.n_q, p.n_k};
  in.seq.mask.clear();
  for (int64_t b = 0; b < bm; ++b)
    for (int64_t h = 0; h < hm; ++h)
      for (int64_t i = 0; i < p.n_q; ++i)
        for (int64_t j = 0; j < p.n_k; ++j) in.seq.mask.push_back(f(b, h, i, j));
}

void same(const Result64& a, const Result64& b) {
  CHECK(a.o == b.o);
  CHECK(a.lse == b.lse);
  CHECK(a.d_q == b.d_q);
  CHECK(a.d_k == b.d_k);
  CHECK(a.d_v == b.d_v);
}

}  // namespace

TEST_CASE("exact: a boolean mask tensor equal to a built-in mask or window gives its bits", "[cpu]") {
  for (Mask m : {Mask::CausalTopLeft, Mask::CausalBottomRight})
    for (int window : {-1, 2}) {
      Problem p = dense(2, 4, 2, 7, 5, 3);
      const Tensors64 in = fill(p, {}, 1.0, 11);
      Problem builtin = p;
      builtin.mask = m, builtin.window_left = window;
      Problem masked = p;
      Tensors64 min = in;
      set_mask(masked, min, MaskKind::Bool, 1, 1, [&](int64_t, int64_t, int64_t i, int64_t j) {
        const int64_t a = m == Mask::CausalTopLeft ? i : i + p.n_k - p.n_q;
        return j <= a && (window < 0 || a - j <= window) ? 1.0 : 0.0;
      });
      INFO(mask_name(m) << " window " << window);
      const Result64 a = exact(builtin, in), b = exact(masked, min);
      same(a, b);
      CHECK(a.o != exact(p, in).o);  // the mask changes the answer: the comparison is not vacuous
    }
}

TEST_CASE("exact: an additive mask of 0 and -inf is the boolean mask; a constant shifts lse alone", "[cpu]") {
  Problem p = dense(1, 2, 1, 6, 9, 4);
  const Tensors64 in = fill(p, {}, 1.0, 5);
  auto bit = [](int64_t, int64_t h, int64_t i, int64_t j) { return (i * 7 + j * 3 + h) % 4 != 0; };
  Problem pb = p, pa = p, pc = p;
  Tensors64 ib = in, ia = in, ic = in;
  set_mask(pb, ib, MaskKind::Bool, 1, 2,
           [&](int64_t b, int64_t h, int64_t i, int64_t j) { return bit(b, h, i, j) ? 1.0 : 0.0; });
  set_mask(pa, ia, MaskKind::Additive, 1, 2,
           [&](int64_t b, int64_t h, int64_t i, int64_t j) { return bit(b, h, i, j) ? 0.0 : -INFINITY; });
  same(exact(pb, ib), exact(pa, ia));
  // The same visible keys, each row shifted by -3.5: o and the gradients as without it (rounded once
  // from exact values), lse by -3.5.
  set_mask(pc, ic, MaskKind::Additive, 1, 2,
           [&](int64_t b, int64_t h, int64_t i, int64_t j) { return bit(b, h, i, j) ? -3.5 : -INFINITY; });
  const Result64 x = exact(pa, ia), y = exact(pc, ic);
  auto close = [](double u, double v) { return std::fabs(u - v) <= 0x1p-51 * std::fabs(v); };
  for (size_t e = 0; e < x.o.size(); ++e) CHECK(close(y.o[e], x.o[e]));
  for (size_t e = 0; e < x.lse.size(); ++e) CHECK(close(y.lse[e], x.lse[e] - 3.5));
  for (size_t e = 0; e < x.d_q.size(); ++e)
    CHECK(std::fabs(y.d_q[e] - x.d_q[e]) <= 0x1p-50 * (std::fabs(x.d_q[e]) + 1e-300));
  CHECK(x.o != exact(p, in).o);
}

TEST_CASE("exact: a block mask is the dense boolean mask of its blocks", "[cpu]") {
  for (const auto& sizes : {std::pair{2, 3}, std::pair{1, 1}, std::pair{4, 16}}) {
    const int bq = sizes.first, bk = sizes.second;  // plain locals: clang 14 cannot capture a structured binding
    Problem p = dense(2, 2, 2, 7, 8, 2);
    const Tensors64 in = fill(p, {}, 1.0, 21);
    Problem pk = p, pd = p;
    Tensors64 ik = in, id = in;
    pk.block_q = bq, pk.block_k = bk, pk.block_b = 2, pk.block_h = 1;
    const int64_t rows = (p.n_q + bq - 1) / bq, cols = (p.n_k + bk - 1) / bk;
    ik.seq.block_mask_shape = {2, 1, rows, cols};
    for (int64_t x = 0; x < 2 * rows * cols; ++x) ik.seq.block_mask.push_back((x * 5 + 1) % 3 != 0 ? 1.0 : 0.0);
    set_mask(pd, id, MaskKind::Bool, 2, 1, [&](int64_t b, int64_t, int64_t i, int64_t j) {
      return ik.seq.block_mask[size_t((b * rows + i / bq) * cols + j / bk)];
    });
    INFO(bq << " x " << bk);
    same(exact(pk, ik), exact(pd, id));
  }
}

TEST_CASE("exact and certified: a row every key of which is hidden is an empty row", "[cpu]") {
  Problem p = dense(1, 2, 2, 4, 5, 3);
  Tensors64 in = fill(p, {}, 1.0, 3);
  set_mask(p, in, MaskKind::Additive, 1, 1, [](int64_t, int64_t, int64_t i, int64_t j) {
    return i == 2 ? -INFINITY : double(j) - 2.0;  // row 2 hidden; the others get -2 .. 2
  });
  for (const Result64& r : {exact(p, in), certified(p, in).value}) {
    for (int64_t h = 0; h < 2; ++h) {
      CHECK(r.lse[size_t(h * 4 + 2)] == -INFINITY);
      CHECK(std::isfinite(r.lse[size_t(h * 4 + 1)]));
      for (int64_t c = 0; c < 3; ++c) {
        CHECK(r.o[size_t((h * 4 + 2) * 3 + c)] == 0.0);
        CHECK(r.d_q[size_t((h * 4 + 2) * 3 + c)] == 0.0);
      }
    }
  }
  Problem s = p;  // with sinks: lse is the sink
  s.sinks = true;
  in.seq.sinks = {1.25, -INFINITY};
  const Result64 r = exact(s, in);
  CHECK(r.lse[2] == 1.25);
  CHECK(r.lse[6] == -INFINITY);
}

namespace {

// Largest |x| over the finite entries, for error scales.
double largest(const std::vector<double>& x) {
  double m = 0;
  for (double e : x)
    if (std::isfinite(e)) m = std::max(m, std::fabs(e));
  return m;
}

// The certified float64 walk against the exact MPFR oracle: within its claimed errors, and those
// errors far below any kernel's: 2^-40 of each output's natural magnitude from the inputs (o: |v|;
// d_v: the rows' |d_o|; d_q, d_k: the scores' gradients |scale| |d_o| |v| times |k| or |q|, summed
// over the keys or rows), where a kernel's bound is 2^-24 of it at the least (fp32's unit roundoff).
void certified_within_exact(const Problem& p, const Tensors64& in) {
  const Certified c = certified(p, in);
  const Result64 e = exact(p, in, 400);
  CHECK(first_violation(c.value.o, e.o, c.err.o) == -1);
  CHECK(first_violation(c.value.lse, e.lse, c.err.lse) == -1);
  CHECK(first_violation(c.value.d_q, e.d_q, c.err.d_q) == -1);
  CHECK(first_violation(c.value.d_k, e.d_k, c.err.d_k) == -1);
  CHECK(first_violation(c.value.d_v, e.d_v, c.err.d_v) == -1);
  const double Q = largest(in.q), K = largest(in.k), V = largest(in.v), G = largest(in.d_o);
  const double rows = double(p.n_q) * p.heads_q / p.heads_kv, keys = p.n_k, ds = std::fabs(p.scale) * G * 2 * V;
  const std::pair<const std::vector<double>*, double> scales[] = {
      {&c.err.o, V}, {&c.err.d_v, rows * G}, {&c.err.d_q, keys * ds * K}, {&c.err.d_k, rows * ds * Q}};
  for (const auto& [err, scale] : scales) {
    INFO("largest error " << largest(*err) << ", natural magnitude " << scale);
    CHECK(largest(*err) <= 0x1p-40 * scale);
  }
}

}  // namespace

TEST_CASE("certified on mask tensors and block masks: |certified - exact| <= err, and err is small", "[cpu]") {
  Problem p = dense(2, 2, 1, 6, 7, 4);
  Tensors64 in = fill(p, {}, 2.0, 17);
  set_mask(p, in, MaskKind::Additive, 2, 1, [](int64_t b, int64_t, int64_t i, int64_t j) {
    const int64_t x = (b * 31 + i * 7 + j * 5) % 6;
    return x == 0 ? -INFINITY : x == 1 ? -1e4 : 0.5 * double(x) - 1.0;
  });
  p.block_q = 2, p.block_k = 3, p.block_b = 1, p.block_h = 2;
  in.seq.block_mask_shape = {1, 2, 3, 3};
  in.seq.block_mask = {1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1};
  certified_within_exact(p, in);
}

// Random masked problems across the variants a mask combines with: GQA, both causal alignments,
// windows, ALiBi, softcap, sinks, broadcast axes, boolean and additive masks (finite values up to
// 1e4 in magnitude, -inf, whole rows hidden) and block masks of odd sizes; large score ranges
// (qk_sigma 8) reach the MPFR rows of the float64 walk. A NaN in a hidden key's k or v reaches nothing.
TEST_CASE("certified float64 walk on random masked problems lies within the exact oracle's values", "[cpu]") {
  std::mt19937_64 rng(20261202);
  for (int trial = 0; trial < 60; ++trial) {
    CAPTURE(trial);
    const int32_t hk = 1 + int32_t(rng() % 2), hq = hk * int32_t(1 + rng() % 3);
    Problem p = dense(1 + int32_t(rng() % 2), hq, hk, 1 + int32_t(rng() % 9), 1 + int32_t(rng() % 11),
                      1 + int32_t(rng() % 6));
    p.mask = Mask(rng() % 3);
    if (rng() % 4 == 0) p.window_left = int32_t(rng() % 4), p.window_right = int32_t(rng() % 4);
    if (rng() % 4 == 0) p.softcap = 2.0 + double(rng() % 20);
    SeqData seq;
    if (rng() % 4 == 0) {
      p.alibi = true;
      for (int32_t h = 0; h < hq; ++h) seq.alibi_slopes.push_back(0.125 * double(1 + h));
    }
    if (rng() % 4 == 0) {
      p.sinks = true;
      for (int32_t h = 0; h < hq; ++h) seq.sinks.push_back(h % 2 ? -INFINITY : double(int(rng() % 9)) - 4.0);
    }
    Tensors64 in = fill(p, seq, rng() % 3 == 0 ? 8.0 : 1.5, rng());
    const int32_t bm = rng() % 2 ? 1 : p.batch, hm = rng() % 2 ? 1 : p.heads_q;
    const bool additive = rng() % 2;
    const uint64_t salt = rng();
    set_mask(p, in, additive ? MaskKind::Additive : MaskKind::Bool, bm, hm,
             [&](int64_t b, int64_t h, int64_t i, int64_t j) {
               const uint64_t x = (salt ^ uint64_t(b * 1000003 + h * 10007 + i * 101 + j)) * 0x9E3779B97F4A7C15ull >> 40;
               if (i == 1 && x % 3 == 0) return additive ? -INFINITY : 0.0;  // row 1 often hidden outright
               if (!additive) return x % 3 ? 1.0 : 0.0;
               return x % 5 == 0 ? -INFINITY : x % 7 == 0 ? -1e4 : double(int64_t(x % 64) - 32) / 8;
             });
    if (rng() % 2) {
      p.block_q = 1 + int32_t(rng() % 4), p.block_k = 1 + int32_t(rng() % 4);
      p.block_b = rng() % 2 ? 1 : p.batch, p.block_h = rng() % 2 ? 1 : p.heads_q;
      const int64_t rows = (p.n_q + p.block_q - 1) / p.block_q, cols = (p.n_k + p.block_k - 1) / p.block_k;
      in.seq.block_mask_shape = {p.block_b, p.block_h, rows, cols};
      in.seq.block_mask.clear();
      for (int64_t x = 0; x < p.block_b * p.block_h * rows * cols; ++x) in.seq.block_mask.push_back(rng() % 4 ? 1 : 0);
    }
    // A NaN in k and v of a key every row hides (the mask tensor's column 0 false everywhere).
    if (!additive && rng() % 3 == 0) {
      for (double& x : in.seq.mask)
        if (&x - in.seq.mask.data() == 0 || (&x - in.seq.mask.data()) % p.n_k == 0) x = 0.0;
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t h = 0; h < p.heads_kv; ++h) {
          in.k[size_t(((b * p.heads_kv + h) * p.n_k) * p.d)] = NAN;
          in.v[size_t(((b * p.heads_kv + h) * p.n_k) * p.d)] = NAN;
        }
    }
    certified_within_exact(p, in);
  }
}
