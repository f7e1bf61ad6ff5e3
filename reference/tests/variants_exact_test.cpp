// The exact oracle on the variants of contract v2, against independent constructions: the
// references' window reading against attention.h's, varlen and paged problems against their
// sequences cut out densely (variant_cases.cpp's own index arithmetic), windows that are masks,
// ALiBi with zero slopes and against a bias folded into an extra dimension, softcap's gradient
// against central finite differences, and d_v != d column by column.
#include "tests/catch.hpp"
#include <cmath>

#include "reference/exact.hpp"
#include "reference/exact_mp.hpp"
#include "reference/visibility.hpp"
#include "variant_cases.hpp"

namespace fc::ref {
namespace {

using namespace testing;
constexpr double kU = 0x1p-53;

TEST_CASE("the references' window reading agrees with attention.h's visible_keys, and is one range", "[cpu]") {
  for (Mask m : {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight})
    for (int32_t wl : {-1, 0, 1, 2, 5})
      for (int32_t wr : {-1, 0, 1, 3, 7})
        for (int64_t n_q = 1; n_q <= 6; ++n_q)
          for (int64_t n_k = 0; n_k <= 6; ++n_k) {
            Problem p;
            p.mask = m, p.window_left = wl, p.window_right = wr;
            for (int64_t i = 0; i < n_q; ++i) {
              const KeyRange r = visible_keys(p, i, n_q, n_k);
              REQUIRE(r.begin <= r.end);
              for (int64_t j = -1; j <= n_k; ++j) {
                INFO(mask_name(m) << " window (" << wl << ", " << wr << ") n_q " << n_q << " n_k " << n_k << " i " << i
                                  << " j " << j);
                REQUIRE(sees(p, i, j, n_q, n_k) == (r.begin <= j && j < r.end));
                REQUIRE(sees(p, i, j, n_q, n_k) == visible(p, i, j, n_q, n_k));
              }
            }
          }
}

TEST_CASE("window (n_k, 0) is the causal mask of the same alignment, (n_k, n_k) no mask, in the exact oracle",
          "[cpu]") {
  const Problem base = dense_sequence(variant_cases().at(3).p, variant_cases().at(3).in, 0).p;  // 7 x 9, d 4
  for (Mask m : {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight}) {
    Problem p = base;
    p.mask = m, p.window_left = -1, p.window_right = -1;
    const Tensors64 in = fill(p, {}, 1, 40 + int(m));
    Problem causal = p;  // no mask aligns the window bottom-right
    causal.mask = m == Mask::CausalTopLeft ? Mask::CausalTopLeft : Mask::CausalBottomRight;
    Problem win = p;
    win.window_left = p.n_k, win.window_right = 0;
    const Result64 a = exact(win, in), b = exact(causal, in);
    CHECK(a.o == b.o);
    CHECK(a.lse == b.lse);
    CHECK(a.d_q == b.d_q);
    CHECK(a.d_k == b.d_k);
    win.window_right = p.n_k;
    Problem none = p;
    none.mask = Mask::None;
    if (m == Mask::None) {
      CHECK(exact(win, in).o == exact(none, in).o);
      CHECK(exact(win, in).d_k == exact(none, in).d_k);
    }
  }
}

// Every output of sequence b of a varlen / paged case equals the dense run of that sequence: bitwise
// for o, lse, d_q and (without repeated pages) d_k, d_v. Repeated pages sum their logical keys.
TEST_CASE("exact: a varlen or paged batch equals its sequences run one by one", "[cpu]") {
  for (const VariantCase& vc : variant_cases()) {
    const Problem& p = vc.p;
    if (!p.varlen) continue;
    INFO(vc.name);
    const Result64 r = exact(p, vc.in);
    const int64_t d = p.d, dv = head_dim_v(p);
    std::vector<double> dk(r.d_k.size(), 0.0), dv_sum(r.d_v.size(), 0.0), mag_k = dk, mag_v = dv_sum;
    std::vector<int> uses(r.d_k.size(), 0);
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t n_q = n_q_of(p, vc.in.seq, b), n_k = n_k_of(p, vc.in.seq, b);
      if (n_q == 0) continue;  // nothing produced; its keys are seen by no query
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < n_q && n_k == 0; ++i) {  // no key: o = 0, lse = -inf (the sink), d_q = 0
          CHECK(r.lse[size_t(lse_at(p, vc.in.seq, b, h, i))] == (p.sinks ? vc.in.seq.sinks[size_t(h)] : -INFINITY));
          for (int64_t c = 0; c < dv; ++c) CHECK(r.o[size_t(q_index(p, vc.in.seq, b, h, i, c, dv))] == 0.0);
          for (int64_t c = 0; c < d; ++c) CHECK(r.d_q[size_t(q_index(p, vc.in.seq, b, h, i, c, d))] == 0.0);
        }
      if (n_k == 0) continue;
      const Dense ds = dense_sequence(p, vc.in, b);
      const Result64 e = exact(ds.p, ds.in);
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < n_q; ++i) {
          CHECK(r.lse[size_t(lse_at(p, vc.in.seq, b, h, i))] == e.lse[size_t(h * n_q + i)]);
          for (int64_t c = 0; c < dv; ++c)
            CHECK(r.o[size_t(q_index(p, vc.in.seq, b, h, i, c, dv))] == e.o[size_t((h * n_q + i) * dv + c)]);
          for (int64_t c = 0; c < d; ++c)
            CHECK(r.d_q[size_t(q_index(p, vc.in.seq, b, h, i, c, d))] == e.d_q[size_t((h * n_q + i) * d + c)]);
        }
      for (int64_t h = 0; h < p.heads_kv; ++h)
        for (int64_t j = 0; j < n_k; ++j) {
          for (int64_t c = 0; c < d; ++c) {
            const int64_t x = kv_index(p, vc.in.seq, b, h, j, c, d);
            dk[size_t(x)] += e.d_k[size_t((h * n_k + j) * d + c)];
            mag_k[size_t(x)] += std::fabs(e.d_k[size_t((h * n_k + j) * d + c)]);
            uses[size_t(x)] += 1;
          }
          for (int64_t c = 0; c < dv; ++c) {
            const int64_t x = kv_index(p, vc.in.seq, b, h, j, c, dv);
            dv_sum[size_t(x)] += e.d_v[size_t((h * n_k + j) * dv + c)];
            mag_v[size_t(x)] += std::fabs(e.d_v[size_t((h * n_k + j) * dv + c)]);
          }
        }
    }
    // A single term is the dense run's value itself; a sum of t terms, each rounded once by exact,
    // summed here with t - 1 more roundings, is within 2 t u of its magnitude.
    for (size_t x = 0; x < dk.size(); ++x) {
      INFO("d_k element " << x << " summed over " << uses[x] << " keys");
      if (uses[x] <= 1)
        CHECK(r.d_k[x] == dk[x]);
      else
        CHECK(std::fabs(r.d_k[x] - dk[x]) <= 2 * uses[x] * kU * mag_k[x]);
    }
    for (size_t x = 0; x < dv_sum.size(); ++x) {
      const int t = uses[x / size_t(dv) * size_t(d)];  // the same key rows as d_k
      if (t <= 1)
        CHECK(r.d_v[x] == dv_sum[x]);
      else
        CHECK(std::fabs(r.d_v[x] - dv_sum[x]) <= 2 * t * kU * mag_v[x]);
    }
  }
}

TEST_CASE("exact: ALiBi with zero slopes is no ALiBi; with slopes it is a bias folded into an extra dimension",
          "[cpu]") {
  Problem p = dense_sequence(variant_cases().at(5).p, variant_cases().at(5).in, 0).p;  // causal_top_left 6 x 8
  p.window_left = p.window_right = -1;
  p.scale = 0.5;  // slope·j / scale stays exact below
  Tensors64 in = fill(p, {}, 1, 50);
  Problem alibi = p;
  alibi.alibi = true;
  Tensors64 zero = in;
  zero.seq.alibi_slopes = {0.0, 0.0};
  const Result64 plain = exact(p, in), zeroed = exact(alibi, zero);
  CHECK(plain.o == zeroed.o);
  CHECK(plain.lse == zeroed.lse);
  CHECK(plain.d_q == zeroed.d_q);
  CHECK(plain.d_k == zeroed.d_k);
  // Causal top-left: |i' - j| = i - j, so the bias is slope·j (a score term q'·k' with q' = 1,
  // k' = slope·j / scale) minus slope·i (a row constant: o unchanged, lse shifted by it).
  const std::vector<double> slopes = {0.25, 0.75};
  Tensors64 with = in;
  with.seq.alibi_slopes = slopes;
  Problem wide = p;
  wide.d = p.d + 1, wide.d_v = p.d;  // v, o keep d columns
  Tensors64 aug;
  aug.v = in.v, aug.d_o = in.d_o;
  const int64_t d = p.d;
  for (int64_t h = 0; h < p.heads_q; ++h)
    for (int64_t i = 0; i < p.n_q; ++i) {
      for (int64_t c = 0; c < d; ++c) aug.q.push_back(in.q[size_t((h * p.n_q + i) * d + c)]);
      aug.q.push_back(1.0);
    }
  for (int64_t h = 0; h < p.heads_kv; ++h)
    for (int64_t j = 0; j < p.n_k; ++j) {
      for (int64_t c = 0; c < d; ++c) aug.k.push_back(in.k[size_t((h * p.n_k + j) * d + c)]);
      aug.k.push_back(slopes[size_t(h)] * double(j) / p.scale);  // heads_q = heads_kv here
    }
  REQUIRE(p.heads_q == p.heads_kv);
  const Result64 a = exact(alibi, with), b = exact(wide, aug);
  // Both are exact results rounded once to double (u each); the lse shift adds one more rounding.
  for (size_t x = 0; x < a.o.size(); ++x) CHECK(std::fabs(a.o[x] - b.o[x]) <= 2 * kU * std::fabs(b.o[x]));
  for (int64_t h = 0; h < p.heads_q; ++h)
    for (int64_t i = 0; i < p.n_q; ++i) {
      const size_t x = size_t(h * p.n_q + i);
      const double shifted = b.lse[x] - slopes[size_t(h)] * double(i);
      CHECK(std::fabs(a.lse[x] - shifted) <= 3 * kU * (std::fabs(b.lse[x]) + std::fabs(shifted)));
    }
  CHECK(a.o != plain.o);  // the bias changes the answer: the comparison is not vacuous
}

TEST_CASE("exact: sinks at -inf are no sinks; a sink is a key of value 0 whose score is the sink", "[cpu]") {
  Problem p = dense_sequence(variant_cases().at(5).p, variant_cases().at(5).in, 0).p;  // 2 heads, 6 x 8
  p.mask = Mask::None, p.window_left = p.window_right = -1;
  p.scale = 0.5;  // sink / scale stays exact below
  REQUIRE(p.heads_q == p.heads_kv);
  const Tensors64 in = fill(p, {}, 1, 51);
  Problem sunk = p;
  sunk.sinks = true;
  Tensors64 none = in;
  none.seq.sinks = {-INFINITY, -INFINITY};
  const Result64 plain = exact(p, in), at_neg_inf = exact(sunk, none);
  CHECK(plain.o == at_neg_inf.o);
  CHECK(plain.lse == at_neg_inf.lse);
  CHECK(plain.d_q == at_neg_inf.d_q);
  CHECK(plain.d_k == at_neg_inf.d_k);
  CHECK(plain.d_v == at_neg_inf.d_v);
  // The sink as key n_k of a problem one dimension wider: q' = [q, 1], k'_j = [k_j, 0], the sink's
  // key [0, sink / scale] with value 0, so that its score is the sink and it adds nothing to o.
  const std::vector<double> sinks = {1.5, -2.25};
  Tensors64 with = in;
  with.seq.sinks = sinks;
  Problem wide = p;
  wide.d = p.d + 1, wide.d_v = p.d, wide.n_k = p.n_k + 1;
  Tensors64 aug;
  aug.d_o = in.d_o;
  const int64_t d = p.d;
  for (int64_t h = 0; h < p.heads_q; ++h)
    for (int64_t i = 0; i < p.n_q; ++i) {
      for (int64_t c = 0; c < d; ++c) aug.q.push_back(in.q[size_t((h * p.n_q + i) * d + c)]);
      aug.q.push_back(1.0);
    }
  for (int64_t h = 0; h < p.heads_kv; ++h) {
    for (int64_t j = 0; j < p.n_k; ++j) {
      for (int64_t c = 0; c < d; ++c) {
        aug.k.push_back(in.k[size_t((h * p.n_k + j) * d + c)]);
        aug.v.push_back(in.v[size_t((h * p.n_k + j) * d + c)]);
      }
      aug.k.push_back(0.0);
    }
    for (int64_t c = 0; c < d; ++c) aug.k.push_back(0.0), aug.v.push_back(0.0);
    aug.k.push_back(sinks[size_t(h)] / p.scale);
  }
  const Result64 a = exact(sunk, with), b = exact(wide, aug);
  // Both are exact results rounded once to double.
  auto close = [](double x, double y) { return std::fabs(x - y) <= 2 * kU * std::fabs(y); };
  for (size_t x = 0; x < a.o.size(); ++x) CHECK(close(a.o[x], b.o[x]));
  for (size_t x = 0; x < a.lse.size(); ++x) CHECK(close(a.lse[x], b.lse[x]));
  for (int64_t r = 0; r < p.heads_q * p.n_q; ++r)
    for (int64_t c = 0; c < d; ++c) CHECK(close(a.d_q[size_t(r * d + c)], b.d_q[size_t(r * (d + 1) + c)]));
  for (int64_t h = 0; h < p.heads_kv; ++h)
    for (int64_t j = 0; j < p.n_k; ++j)
      for (int64_t c = 0; c < d; ++c) {
        CHECK(close(a.d_k[size_t((h * p.n_k + j) * d + c)], b.d_k[size_t((h * (p.n_k + 1) + j) * (d + 1) + c)]));
        CHECK(close(a.d_v[size_t((h * p.n_k + j) * d + c)], b.d_v[size_t((h * (p.n_k + 1) + j) * d + c)]));
      }
  CHECK(a.o != plain.o);  // the sink changes the answer: the comparison is not vacuous
  CHECK(a.lse != plain.lse);
}

TEST_CASE("exact: softcap on one row matches the formula c tanh(s / c) evaluated in double", "[cpu]") {
  // q = [1], k_j = x_j, scale 1, V = identity: o is the softmax of the capped scores.
  for (double c : {0.5, 2.0, 30.0})
    for (std::vector<double> x : {std::vector<double>{3.0, -1.0, 0.5}, std::vector<double>{100.0, 99.0, -250.0}}) {
      Problem p;
      p.n_q = 1, p.n_k = 3, p.d = 1, p.dtype = DType::F64, p.scale = 1.0, p.softcap = c, p.d_v = 3;
      Tensors64 in{{1.0}, x, {1, 0, 0, 0, 1, 0, 0, 0, 1}, {}};
      const Result64 r = exact(p, in);
      double l = 0;
      std::vector<double> e(3);
      for (int j = 0; j < 3; ++j) l += (e[size_t(j)] = std::exp(c * std::tanh(x[size_t(j)] / c) - c));
      INFO("c " << c << " x0 " << x[0]);
      // The double evaluation carries a few ulps of libm and roundings: the oracles' 1e-13 target.
      for (int j = 0; j < 3; ++j) CHECK(std::fabs(r.o[size_t(j)] - e[size_t(j)] / l) <= 1e-13);
      CHECK(std::fabs(r.lse[0] - (c + std::log(l))) <= 1e-13 * std::max(1.0, std::fabs(r.lse[0])));
    }
}

// f(q, k, v) = sum(d_o ∘ o): central differences at 256 bits (exact_gradient_test's argument: h =
// 2^-64, tolerance 2^-100), now through softcap, ALiBi, a window, varlen, paged K/V and d_v != d.
detail::mp objective(const Problem& p, const detail::TensorsMP& in) {
  detail::TensorsMP fwd{in.q, in.k, in.v, {}, in.seq};
  const detail::ResultMP r = detail::exact_mp(p, fwd);
  detail::mp f = 0;
  for (size_t i = 0; i < r.o.size(); ++i) f += in.d_o[i] * r.o[i];
  return f;
}

detail::mp worst_gap(const Problem& p, detail::TensorsMP in, std::vector<detail::mp> detail::TensorsMP::*x,
                     const std::vector<detail::mp>& grad, const detail::mp& h) {
  detail::mp worst = 0;
  for (size_t i = 0; i < (in.*x).size(); ++i) {
    const detail::mp x0 = (in.*x)[i];
    (in.*x)[i] = x0 + h;
    const detail::mp up = objective(p, in);
    (in.*x)[i] = x0 - h;
    const detail::mp down = objective(p, in);
    (in.*x)[i] = x0;
    const detail::mp gap = abs((up - down) / (2 * h) - grad[i]);
    if (gap > worst) worst = gap;
  }
  return worst;
}

TEST_CASE("exact backward equals central finite differences through softcap, ALiBi, window, paged varlen, d_v",
          "[cpu]") {
  const std::vector<VariantCase> cases = variant_cases();
  // softcap 50; ALiBi+softcap+window; everything; sinks with rows of no key; sinks+varlen+ALiBi+window
  for (size_t which : {size_t(7), size_t(9), size_t(11), size_t(12), size_t(13)}) {
    const VariantCase& vc = cases.at(which);
    INFO(vc.name);
    detail::PrecisionGuard guard(256);
    const detail::TensorsMP in{detail::to_mp(vc.in.q), detail::to_mp(vc.in.k), detail::to_mp(vc.in.v),
                               detail::to_mp(vc.in.d_o), vc.in.seq};
    const detail::ResultMP r = detail::exact_mp(vc.p, in);
    const detail::mp h = std::ldexp(1.0, -64), tol = std::ldexp(1.0, -100);
    CHECK(worst_gap(vc.p, in, &detail::TensorsMP::q, r.d_q, h) <= tol);
    CHECK(worst_gap(vc.p, in, &detail::TensorsMP::k, r.d_k, h) <= tol);
    CHECK(worst_gap(vc.p, in, &detail::TensorsMP::v, r.d_v, h) <= tol);
    std::vector<detail::mp> wrong = r.d_q;  // negative control: one element off by 2^-80
    wrong[wrong.size() / 2] += std::ldexp(1.0, -80);
    CHECK(worst_gap(vc.p, in, &detail::TensorsMP::q, wrong, h) > tol);
  }
}

TEST_CASE("exact: d_v != d gives every column of o as its own one-column run", "[cpu]") {
  const std::vector<VariantCase> cases = variant_cases();
  const VariantCase& vc = cases.at(10);  // d_v = 3, d = 5
  const Result64 all = exact(vc.p, vc.in);
  const int64_t dv = head_dim_v(vc.p), rows_v = int64_t(vc.in.v.size()) / dv, rows_o = int64_t(all.o.size()) / dv;
  for (int64_t c = 0; c < dv; ++c) {
    Problem p = vc.p;
    p.d_v = 1;
    Tensors64 in = vc.in;
    in.v.clear(), in.d_o.clear();
    for (int64_t r = 0; r < rows_v; ++r) in.v.push_back(vc.in.v[size_t(r * dv + c)]);
    const Result64 one = exact(p, in);
    for (int64_t r = 0; r < rows_o; ++r) CHECK(one.o[size_t(r)] == all.o[size_t(r * dv + c)]);
    CHECK(one.lse == all.lse);
  }
}

}  // namespace
}  // namespace fc::ref
