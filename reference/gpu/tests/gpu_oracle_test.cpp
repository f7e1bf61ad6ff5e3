// The certified oracle on the GPU against the CPU's and the exact one (label gpu; exit 77 without a
// device). On every case the GPU covers:
//   - the two certificates overlap: |gpu - cpu| <= err_gpu + err_cpu elementwise (non-finite values
//     equal), so neither result leaves the other's certificate;
//   - the GPU bound is no looser than 2x the CPU's, elementwise on every tensor (plus 2^-960
//     absolute: the floors of dropped weights and underflow), and on o and lse the CPU bound is no looser
//     than 2x the GPU's (the gradients' CPU bound is Cauchy–Schwarz, the GPU's elementwise: looser by
//     a factor that depends on the data, printed; so is o's and lse's under softcap, where the CPU caps
//     every score of a row with the row's largest dot-product error and the GPU each with its own);
//   - on the small cases, both lie within the exact MPFR oracle's certificate: |x - exact| <= err_x;
//   - the bounds reach the CPU oracle's 1e-13 targets (not vacuous), and a planted error just past the
//     joint bound is caught (the comparison can fail).
// Cases the GPU does not take (scores past its range) must say so: auto then gives the CPU's
// certificate.
#include "tests/catch.hpp"

#include <boost/multiprecision/mpfr.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <tuple>
#include <string>

#include "reference/certified.hpp"
#include "reference/exact.hpp"
#include "reference/gpu/certified_gpu.hpp"
#include "reference/gpu/oracle_select.hpp"
#include "reference/tests/certified_cases.hpp"
#include "reference/tests/variant_cases.hpp"

namespace fc::ref {
namespace {

constexpr double kFactor = 2.0;       // each bound against the other (see the header)
constexpr double kFloor = 0x1p-960;   // absolute slack of that comparison only
constexpr double kTarget = 1e-13;     // the CPU oracle's targets (reference/README.md)

struct Named {
  std::string name;
  Problem p;
  Tensors64 in;
};

std::vector<Named> cases() {
  std::vector<Named> out;
  for (auto& c : testing::certified_cases()) out.push_back({c.name, c.p, std::move(c.in)});
  for (auto& c : testing::variant_cases()) out.push_back({"variant: " + c.name, c.p, std::move(c.in)});
  return out;
}

bool both_nonfinite_equal(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b;
}

// The first element where |a - b| > ea + eb (or non-finite values differ), or -1.
long overlap_violation(const std::vector<double>& a, const std::vector<double>& ea, const std::vector<double>& b,
                       const std::vector<double>& eb) {
  if (a.size() != b.size() || ea.size() != a.size() || eb.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      if (!both_nonfinite_equal(a[i], b[i])) return long(i);
      continue;
    }
    if (!(std::fabs(a[i] - b[i]) <= ea[i] + eb[i])) return long(i);
  }
  return -1;
}

// The first element where x > factor · y + kFloor, or -1; *worst: max x / y (0/0 counts as 0).
long looser(const std::vector<double>& x, const std::vector<double>& y, double factor, double* worst) {
  long first = -1;
  *worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]) && !std::isfinite(y[i])) continue;
    if (!(x[i] <= factor * y[i] + kFloor) && first < 0) first = long(i);
    if (x[i] > 0) *worst = std::max(*worst, y[i] > 0 ? x[i] / y[i] : INFINITY);
  }
  return first;
}

struct OracleTensors {
  const char* name;
  const std::vector<double>* gv;
  const std::vector<double>* ge;
  const std::vector<double>* cv;
  const std::vector<double>* ce;
};
std::vector<OracleTensors> tensors(const Certified& g, const Certified& c) {
  return {{"o", &g.value.o, &g.err.o, &c.value.o, &c.err.o},
          {"lse", &g.value.lse, &g.err.lse, &c.value.lse, &c.err.lse},
          {"d_q", &g.value.d_q, &g.err.d_q, &c.value.d_q, &c.err.d_q},
          {"d_k", &g.value.d_k, &g.err.d_k, &c.value.d_k, &c.err.d_k},
          {"d_v", &g.value.d_v, &g.err.d_v, &c.value.d_v, &c.err.d_v}};
}

// GPU against CPU on one case: overlap and the bounds' factors. Prints the measured ratios.
void against_cpu(const std::string& name, const Problem& p, const Certified& g, const Certified& c) {
  for (const OracleTensors& t : tensors(g, c)) {
    INFO(name << ": " << t.name);
    REQUIRE(t.gv->size() == t.cv->size());
    const long bad = overlap_violation(*t.gv, *t.ge, *t.cv, *t.ce);
    if (bad >= 0)
      FAIL_CHECK("element " << bad << ": gpu " << (*t.gv)[size_t(bad)] << " +- " << (*t.ge)[size_t(bad)] << ", cpu "
                            << (*t.cv)[size_t(bad)] << " +- " << (*t.ce)[size_t(bad)]);
    double g_over_c = 0, c_over_g = 0;
    const long loose_g = looser(*t.ge, *t.ce, kFactor, &g_over_c);
    const long loose_c = looser(*t.ce, *t.ge, kFactor, &c_over_g);
    std::printf("%-58s %-4s max err_gpu/err_cpu %-10.3g max err_cpu/err_gpu %.3g\n", name.c_str(), t.name, g_over_c,
                c_over_g);
    if (loose_g >= 0)
      FAIL_CHECK("gpu bound looser than " << kFactor << "x the cpu's at " << loose_g << ": " << (*t.ge)[size_t(loose_g)]
                                          << " vs " << (*t.ce)[size_t(loose_g)]);
    const bool forward = std::string(t.name) == "o" || std::string(t.name) == "lse";
    if (forward && !(p.softcap > 0) && loose_c >= 0)
      FAIL_CHECK("cpu bound looser than " << kFactor << "x the gpu's at " << loose_c << ": " << (*t.ce)[size_t(loose_c)]
                                          << " vs " << (*t.ge)[size_t(loose_c)]);
  }
}

TEST_CASE("gpu oracle: within the CPU certificate and the exact one, bounds within 2x", "[gpu]") {
  int covered = 0, total = 0;
  for (const Named& c : cases()) {
    ++total;
    std::string why = gpu::not_covered(c.p, true);
    if (why.empty()) why = gpu::not_covered(c.in);
    Certified g;
    try {
      g = gpu::certified(c.p, c.in);
    } catch (const gpu::NotCovered& e) {
      std::printf("%-58s not covered: %s\n", c.name.c_str(), e.what());
      // Auto gives the CPU's certificate there.
      const Certified a = certify(OracleKind::Auto, c.p, c.in), cpu = certified(c.p, c.in);
      CHECK(overlap_violation(a.value.o, a.err.o, cpu.value.o, cpu.err.o) == -1);
      CHECK(a.err.o == cpu.err.o);
      continue;
    }
    INFO(c.name);
    REQUIRE(why.empty());  // not_covered said it would run
    ++covered;
    const Certified cpu = certified(c.p, c.in);
    against_cpu(c.name, c.p, g, cpu);
    const Result64 ex = exact(c.p, c.in, 256);
    CHECK(testing::first_violation(g.value.o, ex.o, g.err.o) == -1);
    CHECK(testing::first_violation(g.value.lse, ex.lse, g.err.lse) == -1);
    CHECK(testing::first_violation(g.value.d_q, ex.d_q, g.err.d_q) == -1);
    CHECK(testing::first_violation(g.value.d_k, ex.d_k, g.err.d_k) == -1);
    CHECK(testing::first_violation(g.value.d_v, ex.d_v, g.err.d_v) == -1);
    CHECK(testing::first_violation(cpu.value.o, ex.o, cpu.err.o) == -1);
    CHECK(testing::first_violation(cpu.value.d_k, ex.d_k, cpu.err.d_k) == -1);
    // o_mag is a scale (sum_j P_ij |v_jk|): both oracles' agree to far better than a percent.
    for (size_t i = 0; i < g.o_mag.size(); ++i)
      CHECK(std::fabs(g.o_mag[i] - cpu.o_mag[i]) <= 1e-12 * std::fabs(cpu.o_mag[i]) + 1e-300);
  }
  std::printf("gpu oracle: %d of %d cases covered\n", covered, total);
  CHECK(covered >= total / 2);
}

// Random q, k, v, d_o on a grid of 1/64 (exact in bf16 and fp16).
Tensors64 random_inputs(const Problem& p, double sigma, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  auto draw = [&](int64_t n, double s) {
    std::vector<double> x(static_cast<size_t>(n), 0.0);
    for (double& e : x) e = std::round(std::clamp(s * nd(rng), -2.0, 2.0) * 64) / 64;
    return x;
  };
  Tensors64 in;
  in.q = draw(numel_q(p), sigma), in.k = draw(numel_kv(p), sigma);
  in.v = draw(numel_v(p), 1.0), in.d_o = draw(numel_o(p), 1.0);
  return in;
}

using testing::shape;

TEST_CASE("gpu oracle: long rows (several chunks and tiles), GQA, d_v != d, against the CPU", "[gpu]") {
  const std::vector<std::pair<std::string, Problem>> shapes = {
      {"bf16 GQA 4/2 causal_top_left n 700 d 64", shape(2, 4, 2, 700, 700, 64, 64, DType::BF16, Mask::CausalTopLeft)},
      {"f16 no mask n_q 129 n_k 1100 d 128", shape(1, 2, 1, 129, 1100, 128, 128, DType::F16, Mask::None)},
      {"bf16 causal_bottom_right n_q 300 n_k 520 d 96 d_v 40",
       shape(1, 3, 3, 300, 520, 96, 40, DType::BF16, Mask::CausalBottomRight)},
      {"f16 d 256 n 300", shape(1, 1, 1, 300, 300, 256, 256, DType::F16, Mask::CausalTopLeft)},
  };
  uint64_t seed = 7;
  for (const auto& [name, p] : shapes) {
    INFO(name);
    const Tensors64 in = random_inputs(p, 1.0, seed++);
    const Certified g = gpu::certified(p, in), c = certified(p, in);
    against_cpu(name, p, g, c);
    // Not vacuous: o within 1e-13 o_mag (the dropped-weight floor aside).
    for (size_t i = 0; i < g.err.o.size(); ++i) CHECK(g.err.o[i] <= kTarget * g.o_mag[i] + 1e-290);
  }
}

TEST_CASE("gpu oracle: long paged K/V (a page two sequences share) and padded varlen, against the CPU", "[gpu]") {
  {  // keys 3000 and 1800 over pages of 256 (12 and 8 pages, the last partly read), GQA 4/2,
     // causal_bottom_right; sequence 1's third page is sequence 0's seventh: its d_k, d_v sum both.
    Problem p = shape(1, 4, 2, 1, 1, 64, 64, DType::BF16, Mask::CausalBottomRight);
    SeqData s;
    testing::set_varlen(p, s, {40, 7}, {3000, 1800});
    p.page_size = 256, p.num_pages = 24, p.pages_per_seq = 12;
    for (int32_t i = 0; i < 12; ++i) s.page_table.push_back(23 - i);  // pages 23 .. 12
    for (int32_t page : {0, 1, 17, 3, 4, 5, 6, 7, 8, 9, 10, 11}) s.page_table.push_back(page);
    Tensors64 in = random_inputs(p, 1.0, 41);
    in.seq = s;
    const Certified g = gpu::certified(p, in), c = certified(p, in);
    against_cpu("paged bf16 keys 3000 + 1800, pages of 256, one shared", p, g, c);
    // Not vacuous: the shared page is read (its row 10 is key 1546 of sequence 0 and key 522 of
    // sequence 1, both visible), and o is within 1e-13 o_mag. (The gradients' bounds scale with the
    // magnitudes of their terms, not of their sums: against |d_k| they are as loose as the
    // cancellation is deep.)
    CHECK(g.value.d_k[size_t((17 * 256 + 10) * p.heads_kv * p.d)] != 0);
    for (size_t i = 0; i < g.err.o.size(); ++i) CHECK(g.err.o[i] <= kTarget * g.o_mag[i] + 1e-290);
  }
  {  // padded offsets: leading padding, gaps between sequences, an empty sequence, multi-tile rows
    Problem p = shape(1, 2, 1, 1, 1, 96, 40, DType::F16, Mask::CausalTopLeft);
    SeqData s;
    testing::set_varlen(p, s, {300, 0, 129}, {700, 5, 1100});
    testing::set_padded(p, s, {3, 310, 320, 460}, {0, 705, 720, 1830});
    Tensors64 in = random_inputs(p, 1.0, 42);
    in.seq = s;
    const Certified g = gpu::certified(p, in), c = certified(p, in);
    against_cpu("padded f16 q 300, 0, 129; k 700, 5, 1100, d 96 d_v 40", p, g, c);
    for (size_t i = 0; i < g.err.o.size(); ++i) CHECK(g.err.o[i] <= kTarget * g.o_mag[i] + 1e-290);
  }
}

// Mask tensors, block masks, ALiBi and sinks (contract v3) on random dense problems: GQA, both causal
// alignments and none, windows, broadcast mask axes, boolean and additive masks (-inf, -1e4, rows
// hidden outright), block masks of odd sizes, sinks finite and -inf, softcap on a quarter. Every fourth
// problem has rows of several tiles (n_q up to 200, n_k up to 600, d 64); the small ones are held to
// the exact oracle too.
TEST_CASE("gpu oracle: mask tensors, block masks, ALiBi and sinks, against the CPU and the exact oracle", "[gpu]") {
  std::mt19937_64 rng(20261203);
  int hidden_rows = 0, masked_keys = 0, capped = 0;
  for (int trial = 0; trial < 48; ++trial) {
    const bool big = trial % 4 == 3;
    const int32_t hk = 1 + int32_t(rng() % 2), hq = hk * int32_t(1 + rng() % 3);
    const int32_t nq = big ? 100 + int32_t(rng() % 101) : 1 + int32_t(rng() % 9);
    const int32_t nk = big ? 300 + int32_t(rng() % 301) : 1 + int32_t(rng() % 11);
    const int32_t d = big ? 64 : 1 + int32_t(rng() % 6);
    Problem p = shape(1 + int32_t(rng() % 2), hq, hk, nq, nk, d, d, DType::BF16, Mask(rng() % 3));
    if (rng() % 4 == 0) p.window_left = int32_t(rng() % (nk / 2 + 2)), p.window_right = int32_t(rng() % 4);
    if (rng() % 4 == 0) p.softcap = 2.0 + double(rng() % 20), ++capped;
    SeqData seq;
    if (rng() % 2) {
      p.alibi = true;
      for (int32_t h = 0; h < hq; ++h) seq.alibi_slopes.push_back(std::exp2(-double(h + 1)) * (rng() % 4 ? 1 : 16));
    }
    if (rng() % 2) {
      p.sinks = true;
      for (int32_t h = 0; h < hq; ++h) seq.sinks.push_back(h % 2 ? -INFINITY : double(int(rng() % 9)) - 4.0);
    }
    Tensors64 in = testing::fill(p, seq, 1.5, rng());
    const int32_t bm = rng() % 2 ? 1 : p.batch, hm = rng() % 2 ? 1 : p.heads_q;
    const bool additive = rng() % 2;
    const uint64_t salt = rng();
    p.mask_kind = additive ? MaskKind::Additive : MaskKind::Bool, p.mask_b = bm, p.mask_h = hm;
    in.seq.mask_shape = {bm, hm, p.n_q, p.n_k};
    for (int64_t b = 0; b < bm; ++b)
      for (int64_t h = 0; h < hm; ++h)
        for (int64_t i = 0; i < p.n_q; ++i)
          for (int64_t j = 0; j < p.n_k; ++j) {
            const uint64_t x = (salt ^ uint64_t(b * 1000003 + h * 10007 + i * 101 + j)) * 0x9E3779B97F4A7C15ull >> 40;
            double v = 0;
            if (i == 1 && salt % 3 == 0)
              v = additive ? -INFINITY : 0.0;  // row 1 hidden outright
            else if (!additive)
              v = x % 3 ? 1.0 : 0.0;
            else
              v = x % 5 == 0 ? -INFINITY : x % 7 == 0 ? -1e4 : double(int64_t(x % 64) - 32) / 8;
            in.seq.mask.push_back(v);
            masked_keys += additive ? v == -INFINITY : v == 0;
          }
    if (rng() % 2) {
      p.block_q = 1 + int32_t(rng() % (big ? 64 : 4)), p.block_k = 1 + int32_t(rng() % (big ? 64 : 4));
      p.block_b = rng() % 2 ? 1 : p.batch, p.block_h = rng() % 2 ? 1 : p.heads_q;
      const int64_t rows = (p.n_q + p.block_q - 1) / p.block_q, cols = (p.n_k + p.block_k - 1) / p.block_k;
      in.seq.block_mask_shape = {p.block_b, p.block_h, rows, cols};
      for (int64_t x = 0; x < p.block_b * p.block_h * rows * cols; ++x) in.seq.block_mask.push_back(rng() % 4 ? 1 : 0);
    }
    const std::string name = "masked trial " + std::to_string(trial) + (big ? " (rows of several tiles)" : "");
    INFO(name);
    REQUIRE(gpu::not_covered(p, true).empty());
    const Certified g = gpu::certified(p, in), c = certified(p, in);
    against_cpu(name, p, g, c);
    for (size_t i = 0; i < g.value.lse.size(); ++i) hidden_rows += g.value.lse[i] == -INFINITY && p.n_k > 0;
    if (big) {
      for (size_t i = 0; i < g.err.o.size(); ++i) CHECK(g.err.o[i] <= kTarget * g.o_mag[i] + 1e-290);
      continue;
    }
    const Result64 ex = exact(p, in, 256);
    CHECK(testing::first_violation(g.value.o, ex.o, g.err.o) == -1);
    CHECK(testing::first_violation(g.value.lse, ex.lse, g.err.lse) == -1);
    CHECK(testing::first_violation(g.value.d_q, ex.d_q, g.err.d_q) == -1);
    CHECK(testing::first_violation(g.value.d_k, ex.d_k, g.err.d_k) == -1);
    CHECK(testing::first_violation(g.value.d_v, ex.d_v, g.err.d_v) == -1);
  }
  // Not vacuous: keys are hidden, and whole rows with them (an empty row: lse -inf without a sink).
  CHECK(masked_keys > 0);
  CHECK(hidden_rows > 0);
  CHECK(capped > 0);
}

TEST_CASE("gpu oracle: gradient bounds meet the 1e-13 normwise targets", "[gpu]") {
  for (const auto& c : testing::certified_cases()) {
    if (!gpu::not_covered(c.p, true).empty() || !gpu::not_covered(c.in).empty()) continue;
    Certified g;
    try {
      g = gpu::certified(c.p, c.in);
    } catch (const gpu::NotCovered&) {
      continue;
    }
    INFO(c.name);
    const testing::Scales sc = testing::natural_scales(c.p, c.in);
    auto frob = [&](const std::vector<double>& e, int64_t b, int64_t h_kv, bool q_side, int width) {
      // Frobenius norm of e over the (b, kv head) group (dense layouts only: certified_cases are dense).
      double s = 0;
      const int g_size = c.p.heads_q / c.p.heads_kv;
      const int64_t n = q_side ? c.p.n_q : c.p.n_k;
      for (int h = 0; h < (q_side ? g_size : 1); ++h) {
        const int64_t head = q_side ? h_kv * g_size + h : h_kv;
        const int64_t heads = q_side ? c.p.heads_q : c.p.heads_kv;
        for (int64_t i = 0; i < n; ++i)
          for (int l = 0; l < width; ++l) {
            const double x = e[size_t(((b * heads + head) * n + i) * width + l)];
            s += x * x;
          }
      }
      return std::sqrt(s);
    };
    const int dv = head_dim_v(c.p);
    for (int64_t b = 0; b < c.p.batch; ++b)
      for (int64_t h = 0; h < c.p.heads_kv; ++h) {
        const size_t grp = size_t(b * c.p.heads_kv + h);
        CHECK(frob(g.err.d_q, b, h, true, c.p.d) <= kTarget * sc.dq[grp] + 1e-290);
        CHECK(frob(g.err.d_k, b, h, false, c.p.d) <= kTarget * sc.dk[grp] + 1e-290);
        CHECK(frob(g.err.d_v, b, h, false, dv) <= kTarget * sc.dv[grp] + 1e-290);
      }
  }
}

TEST_CASE("gpu oracle: the comparison catches a value just past the joint bound", "[gpu]") {
  const Problem p = shape(1, 2, 1, 40, 50, 32, 32, DType::BF16, Mask::CausalTopLeft);
  const Tensors64 in = random_inputs(p, 1.0, 3);
  const Certified g = gpu::certified(p, in), c = certified(p, in);
  REQUIRE(overlap_violation(g.value.o, g.err.o, c.value.o, c.err.o) == -1);
  REQUIRE(overlap_violation(g.value.d_k, g.err.d_k, c.value.d_k, c.err.d_k) == -1);
  for (auto [v, e, cv, ce] : {std::tuple{g.value.o, g.err.o, c.value.o, c.err.o},
                              std::tuple{g.value.d_k, g.err.d_k, c.value.d_k, c.err.d_k}}) {
    const size_t i = v.size() / 3;
    v[i] = cv[i] + 1.01 * (e[i] + ce[i]) + 1e-300;
    CHECK(overlap_violation(v, e, cv, ce) == long(i));
  }
}

TEST_CASE("gpu oracle: scores past its range are refused, and auto gives the CPU's certificate", "[gpu]") {
  // q, k ~ 3e4 in fp16, scale 0.3: scores ~ 1e9 whose low parts (scale times an exact dot product,
  // TwoProd's error ~ u |s|) pass 2^-30: the CPU takes MPFR there. (With scale 1 the same inputs stay
  // in range: fp16 dot products of d 4 are exact, the low parts are 0, and the GPU certifies them,
  // within the exact oracle's certificate: the first test.)
  for (const auto& base : testing::certified_cases()) {
    if (base.name != "fp16 near 65504, scores ~ 1e9") continue;
    Problem p = base.p;
    p.scale = 0.3;
    CHECK_THROWS_AS(gpu::certified(p, base.in), gpu::NotCovered);
    const Certified a = certify(OracleKind::Auto, p, base.in), cpu = certified(p, base.in);
    CHECK(a.value.o == cpu.value.o);
    CHECK(a.err.d_q == cpu.err.d_q);
    CHECK_THROWS_AS(certify(OracleKind::Gpu, p, base.in), OracleUnavailable);
    return;
  }
  FAIL("the case is gone from certified_cases()");
}

TEST_CASE("gpu oracle: the same inputs give the same bits on every run", "[gpu]") {
  const Problem p = shape(2, 4, 2, 333, 517, 64, 48, DType::BF16, Mask::CausalBottomRight);
  const Tensors64 in = random_inputs(p, 1.0, 21);
  const Certified a = gpu::certified(p, in), b = gpu::certified(p, in);
  for (const OracleTensors& t : tensors(a, b)) {
    INFO(t.name);
    CHECK(*t.gv == *t.cv);
    CHECK(*t.ge == *t.ce);
  }
  CHECK(a.o_mag == b.o_mag);
}

// Whether two vectors hold the same bits (NaN payloads and the signs of zeros included).
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

TEST_CASE("gpu oracle: the tensor cores' dot products give the CUDA cores' bits", "[gpu]") {
  // Every case of the suites above (variants: masks, softcap, ALiBi, sinks, paged and varlen), and
  // shapes whose tiles the 8 x 8 blocks cut unevenly: d 1, 3 and 100, d_v != d, d 256 (4 keys a
  // block in dkv_keys), GQA, several tiles and chunks; and float inputs whose products leave
  // dot_float's exact range (fine quanta: every pair falls back to Dot2) or half of whose rows do.
  std::vector<Named> all = cases();
  const std::vector<std::pair<std::string, Problem>> shapes = {
      {"bf16 d 1 n 77", shape(1, 2, 2, 77, 77, 1, 1, DType::BF16, Mask::None)},
      {"f16 d 3 d_v 5 n_q 40 n_k 300", shape(2, 3, 1, 40, 300, 3, 5, DType::F16, Mask::CausalBottomRight)},
      {"bf16 GQA 4/2 d 100 d_v 36 n 530", shape(1, 4, 2, 530, 530, 100, 36, DType::BF16, Mask::CausalTopLeft)},
      {"f16 d 256 n 270", shape(1, 2, 1, 270, 270, 256, 256, DType::F16, Mask::None)},
      {"bf16 d 128 n 1100", shape(1, 1, 1, 1100, 1100, 128, 128, DType::BF16, Mask::None)},
  };
  uint64_t seed = 61;
  for (const auto& [name, p] : shapes) all.push_back({name, p, random_inputs(p, 1.0, seed++)});
  for (const int coarse_rows : {0, 2}) {  // 0: no row on the 1/64 grid; 2: every other row
    Problem p = shape(1, 2, 2, 260, 300, 64, 64, DType::F32, Mask::None);
    Tensors64 in = random_inputs(p, 1.0, seed++);
    std::mt19937_64 rng(seed++);
    std::uniform_real_distribution<double> u(-2.0, 2.0);
    for (std::vector<double>* t : {&in.q, &in.k, &in.v, &in.d_o})
      for (size_t x = 0; x < t->size(); ++x)
        if (coarse_rows == 0 || x / 64 % coarse_rows == 0) (*t)[x] = double(float(u(rng)));  // 24-bit significands
    all.push_back({coarse_rows == 0 ? "f32, fine quanta" : "f32, every other row fine", p, std::move(in)});
  }
  int compared = 0;
  for (const Named& c : all) {
    INFO(c.name);
    if (!gpu::not_covered(c.p, !c.in.d_o.empty()).empty() || !gpu::not_covered(c.in).empty()) continue;
    Certified a, b;
    try {
      a = gpu::certified(c.p, c.in, gpu::Schedule{true});
    } catch (const gpu::NotCovered&) {
      CHECK_THROWS_AS(gpu::certified(c.p, c.in, gpu::Schedule{false}), gpu::NotCovered);  // the same rows refused
      continue;
    }
    b = gpu::certified(c.p, c.in, gpu::Schedule{false});
    for (const OracleTensors& t : tensors(a, b)) {
      INFO(t.name);
      CHECK(same_bits(*t.gv, *t.cv));
      CHECK(same_bits(*t.ge, *t.ce));
    }
    CHECK(same_bits(a.o_mag, b.o_mag));
    ++compared;
  }
  CHECK(compared >= int(all.size()) / 2);
}

TEST_CASE("gpu oracle: the device's exp and log are within the 2 ulp the bound charges, tanh within 4", "[gpu]") {
  using mp = boost::multiprecision::number<boost::multiprecision::mpfr_float_backend<200>>;
  std::mt19937_64 rng(11);
  std::vector<double> xe, xl, xt;
  std::uniform_real_distribution<double> ue(-700.0, 0.0), ul(-1.0, 40.0), ut(-40.0, 40.0), uw(-60.0, 0.0);
  for (int i = 0; i < 20000; ++i) xe.push_back(ue(rng)), xl.push_back(std::exp2(ul(rng)));
  // tanh on y = s/c: uniform on [-40, 40] (saturated past 19), and small |y| down to 2^-60.
  for (int i = 0; i < 20000; ++i) xt.push_back(i % 2 ? ut(rng) : std::copysign(std::exp2(uw(rng)), ut(rng)));
  for (double x : {0.0, -1e-300, -0x1p-60, -700.0, -699.9999, -1.0, -0.5}) xe.push_back(x);
  for (double x : {1.0, 1.0 + 0x1p-52, 0.5, 2.0, 0x1p40, 3.0}) xl.push_back(x);
  for (double x : {0.0, 0x1p-30, 0.5, 0.55, 1.0, -1.0, 19.0, 345.0}) xt.push_back(x);
  std::vector<double> e1, l1, t1, e2, l2, t2, e3, l3, t3;
  gpu::device_libm(xe, e1, l1, t1);
  gpu::device_libm(xl, e2, l2, t2);
  gpu::device_libm(xt, e3, l3, t3);
  double worst_e = 0, worst_l = 0;
  for (size_t i = 0; i < xe.size(); ++i) {
    const mp t = exp(mp(xe[i]));
    worst_e = std::max(worst_e, double(abs(mp(e1[i]) - t) / t));
  }
  for (size_t i = 0; i < xl.size(); ++i) {
    const mp t = log(mp(xl[i]));
    if (t == 0) {
      CHECK(l2[i] == 0);
      continue;
    }
    worst_l = std::max(worst_l, double(abs(mp(l2[i]) - t) / abs(t)));
  }
  double worst_t = 0;
  for (size_t i = 0; i < xt.size(); ++i) {
    const mp t = tanh(mp(xt[i]));
    if (t == 0) {
      CHECK(t3[i] == 0);
      continue;
    }
    worst_t = std::max(worst_t, double(abs(mp(t3[i]) - t) / abs(t)));
  }
  std::printf("device exp: worst relative error %.3g (charged 2^-51 = %.3g); log: %.3g; tanh: %.3g (charged 2^-50)\n",
              worst_e, 0x1p-51, worst_l, worst_t);
  CHECK(worst_e <= 0x1p-51);
  CHECK(worst_l <= 0x1p-51);
  CHECK(worst_t <= 0x1p-50);
}

// Not a test of correctness: an FNV-1a digest of every value and bound the GPU oracle writes, one line per
// problem of a fixed set (run by hand with "[.digest]"). Two builds whose kernels are meant to compute
// the same bits (a change of the kernels' schedule, not of their arithmetic) print the same lines.
TEST_CASE("gpu oracle: digest of its bits on fixed problems", "[.digest]") {
  std::vector<Named> all = cases();
  const std::vector<std::pair<std::string, Problem>> shapes = {
      {"bf16 GQA 4/2 causal_top_left n 700 d 64", shape(2, 4, 2, 700, 700, 64, 64, DType::BF16, Mask::CausalTopLeft)},
      {"f16 no mask n_q 129 n_k 1100 d 128", shape(1, 2, 1, 129, 1100, 128, 128, DType::F16, Mask::None)},
      {"bf16 bottom_right n_q 300 n_k 520 d 96 d_v 40", shape(1, 3, 3, 300, 520, 96, 40, DType::BF16, Mask::CausalBottomRight)},
      {"f16 d 256 n 300", shape(1, 1, 1, 300, 300, 256, 256, DType::F16, Mask::CausalTopLeft)},
      {"bf16 MQA 8/1 n_q 1 n_k 2049 d 128", shape(3, 8, 1, 1, 2049, 128, 128, DType::BF16, Mask::None)},
      {"f32 GQA 6/3 n_q 77 n_k 33 d 40 d_v 72", shape(2, 6, 3, 77, 33, 40, 72, DType::F32, Mask::CausalBottomRight)},
      {"bf16 n 1030 d 128", shape(1, 2, 2, 1030, 1030, 128, 128, DType::BF16, Mask::None)},
  };
  uint64_t seed = 100;
  for (const auto& [name, p] : shapes) all.push_back({name, p, random_inputs(p, 1.0, seed++)});
  all.push_back({"bf16 window 37/5 n 600 d 64", shape(1, 2, 1, 600, 600, 64, 64, DType::BF16, Mask::None), {}});
  all.back().p.window_left = 37, all.back().p.window_right = 5;
  all.back().in = random_inputs(all.back().p, 1.5, seed++);
  for (const Named& c : all) {
    Certified g;
    try {
      g = gpu::certified(c.p, c.in);
    } catch (const gpu::NotCovered&) {
      continue;
    }
    uint64_t h = 1469598103934665603ull;
    for (const std::vector<double>* t : {&g.value.o, &g.err.o, &g.o_mag, &g.value.lse, &g.err.lse, &g.value.d_q,
                                         &g.err.d_q, &g.value.d_k, &g.err.d_k, &g.value.d_v, &g.err.d_v})
      for (double x : *t) {
        uint64_t bits;
        std::memcpy(&bits, &x, sizeof bits);
        for (int i = 0; i < 8; ++i) h = (h ^ ((bits >> (8 * i)) & 0xff)) * 1099511628211ull;
      }
    std::printf("digest %016llx %s\n", static_cast<unsigned long long>(h), c.name.c_str());
  }
}

// Not a test of correctness: the time of the GPU oracle on one larger shape, printed (run by hand with
// "[.time]"; FC_GPU_TIME_SHAPE="batch,heads,n,d" picks another, default 1,4,4096,128), bf16, no mask.
TEST_CASE("gpu oracle: time of one bf16 forward+backward", "[.time]") {
  int b = 1, h = 4, n = 4096, d = 128;
  if (const char* s = std::getenv("FC_GPU_TIME_SHAPE")) REQUIRE(std::sscanf(s, "%d,%d,%d,%d", &b, &h, &n, &d) == 4);
  const Problem p = shape(b, h, h, n, n, d, d, DType::BF16, Mask::None);
  const Tensors64 in = random_inputs(p, 1.0, 5);
  // The dot products on the tensor cores, on the CUDA cores, then on the tensor cores again (the
  // first run also starts the device).
  Certified first;
  for (const bool tc : {true, false, true}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Certified g = gpu::certified(p, in, gpu::Schedule{tc});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double worst = 0;
    for (size_t i = 0; i < g.err.o.size(); ++i) worst = std::max(worst, g.err.o[i] / g.o_mag[i]);
    std::printf(
        "gpu oracle b%d h%d N%d d%d bf16 fwd+bwd, dot products on the %s cores: %.3f s, copies included "
        "(max err_o/o_mag %.3g)\n",
        b, h, n, d, tc ? "tensor" : "CUDA", s, worst);
    CHECK(worst <= kTarget);
    if (first.value.o.empty()) {
      first = g;
      continue;
    }
    for (const OracleTensors& t : tensors(first, g)) {
      INFO(t.name);
      CHECK(same_bits(*t.gv, *t.cv));
      CHECK(same_bits(*t.ge, *t.ce));
    }
  }
}

}  // namespace
}  // namespace fc::ref
