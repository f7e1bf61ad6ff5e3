// The certified oracle at huge scores, |s| from 1e12 to fp32's limit (~3e38), against the exact
// oracle at 256 bits: every element within its bound, and the o and lse bounds meeting the same
// 1e-13 targets as certified_vs_exact_test (not vacuous). Inputs are built exactly in the storage
// type so rows hold exact ties and O(1) gaps between the top scores (one-hot and split softmax).
#include "tests/catch.hpp"
#include <Eigen/Core>
#include <cmath>
#include <random>
#include <string>

#include "certified_cases.hpp"
#include "reference/certified.hpp"
#include "reference/exact.hpp"

namespace fc::ref {
namespace {

using testing::CertifiedCase;
using testing::first_violation;
using testing::shape;

constexpr double kTarget = 1e-13;

// v, d_o ~ N(0, 1) rounded to fp16 (representable in every storage type).
void fill_v_do(CertifiedCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  auto f = [&](int64_t n) {
    std::vector<double> x(static_cast<size_t>(n), 0.0);
    for (auto& e : x) e = double(float(Eigen::half(float(dist(rng)))));
    return x;
  };
  c.in.v = f(numel_kv(c.p));
  c.in.d_o = f(numel_q(c.p));
}

// One query, keys ±x: q = (a, a), k = (a, a), (-a, -a); s = ±2a² (one-hot).
CertifiedCase plus_minus(double s, DType t) {
  CertifiedCase c{"±x, |s| = " + std::to_string(s), shape(1, 1, 1, 1, 2, 2, t, Mask::None, 1.0), {}};
  double a = double(float(std::sqrt(s / 2)));
  if (t == DType::BF16) a = double(float(Eigen::bfloat16(float(a))));
  if (t == DType::F16) a = double(float(Eigen::half(float(a))));
  c.in.q = {a, a};
  c.in.k = {a, a, -a, -a};
  fill_v_do(c, 7);
  return c;
}

// Two queries; keys (B, g_j, 0, ...) with gaps g = 1, 2, 0, 2, -3 (ties between keys 1 and 3) and
// q = (A, 1, ...), (A, -1, ...): scores A·B·scale + {1, 2, 0, 2, -3}·scale·unit. A, B, unit exact
// in the storage type; every partial sum of q·k stays finite in it.
CertifiedCase gaps(std::string name, double a, double b, double unit, double scale, DType t, int32_t d = 4) {
  CertifiedCase c{std::move(name), shape(1, 1, 1, 2, 5, d, t, Mask::None, scale), {}};
  const double g[5] = {1, 2, 0, 2, -3};
  c.in.q.assign(size_t(2 * d), 0.0);
  c.in.q[0] = a;
  c.in.q[1] = unit;
  c.in.q[size_t(d)] = a;
  c.in.q[size_t(d) + 1] = -unit;
  c.in.k.assign(size_t(5 * d), 0.0);
  for (int j = 0; j < 5; ++j) {
    c.in.k[size_t(j * d)] = b;
    c.in.k[size_t(j * d + 1)] = g[j];
  }
  fill_v_do(c, 11);
  return c;
}

// GQA 4/2, causal (both alignments), fp32: per kv head, keys (B, j mod 3 + h) and queries (A, 1 - i mod 2).
CertifiedCase gqa_causal(double s, Mask m) {
  CertifiedCase c{"gqa causal, |s| = " + std::to_string(s), shape(1, 4, 2, 3, 5, 8, DType::F32, m, 1.0), {}};
  const double a = double(float(std::sqrt(s)));
  const Problem& p = c.p;
  c.in.q.assign(size_t(numel_q(p)), 0.0);
  c.in.k.assign(size_t(numel_kv(p)), 0.0);
  for (int32_t h = 0; h < p.heads_q; ++h)
    for (int64_t i = 0; i < p.n_q; ++i) {
      const int64_t o = offset_q(p, 0, h, i);
      c.in.q[size_t(o)] = (h % 2 ? -a : a);
      c.in.q[size_t(o + 1)] = double(1 - i % 2);
      c.in.q[size_t(o + 2)] = double(h);
    }
  for (int32_t h = 0; h < p.heads_kv; ++h)
    for (int64_t j = 0; j < p.n_k; ++j) {
      const int64_t o = offset_kv(p, 0, h, j);
      c.in.k[size_t(o)] = a;
      c.in.k[size_t(o + 1)] = double(j % 3 + h);
      c.in.k[size_t(o + 2)] = double(j % 2);
    }
  fill_v_do(c, 13);
  return c;
}

std::vector<CertifiedCase> huge_cases() {
  std::vector<CertifiedCase> cs;
  for (double s : {1e12, 1e18, 1e24, 1e30, 1e36, 3e38}) {
    cs.push_back(plus_minus(s, DType::F32));
    const double a = double(float(std::sqrt(s)));
    cs.push_back(gaps("f32 gaps, |s| = " + std::to_string(s), a, a, 1, 1.0, DType::F32));
    cs.push_back(gaps("f32 gaps, scale 1/8, |s| = " + std::to_string(s), a, -a, 8, 0.125, DType::F32));
    // bf16: powers of two (exact), gaps of 1.
    const double e = std::floor(std::log2(s) / 2);
    cs.push_back(gaps("bf16 gaps, |s| = " + std::to_string(s), std::ldexp(1.0, int(e)), std::ldexp(1.0, int(e)), 1, 1.0,
                      DType::BF16));
    cs.push_back(plus_minus(s, DType::BF16));
    cs.push_back(gqa_causal(s, Mask::CausalTopLeft));
    cs.push_back(gqa_causal(s, Mask::CausalBottomRight));
  }
  // fp16: q·k <= 2^30 + gaps of 2^-48 (subnormal unit 2^-24 on both sides); scale 2^48 takes
  // scores to 2^78 ~ 3e23 with gaps of 1. Beyond that fp16 has no representable O(1) gaps.
  cs.push_back(gaps("f16 gaps, scale 2^48", 32768, 32768, 0x1p-24, 0x1p48, DType::F16));
  cs.push_back(plus_minus(2 * 65504.0 * 65504.0, DType::F16));
  return cs;
}

TEST_CASE("certified at huge scores: within its bound, and the o / lse bounds meet the 1e-13 targets", "[cpu]") {
  for (const CertifiedCase& c : huge_cases()) {
    INFO(c.name);
    const Problem& p = c.p;
    const Result64 ex = exact(p, c.in, 256);
    const Certified ce = certified(p, c.in);
    CHECK(first_violation(ce.value.o, ex.o, ce.err.o) == -1);
    CHECK(first_violation(ce.value.lse, ex.lse, ce.err.lse) == -1);
    CHECK(first_violation(ce.value.d_q, ex.d_q, ce.err.d_q) == -1);
    CHECK(first_violation(ce.value.d_k, ex.d_k, ce.err.d_k) == -1);
    CHECK(first_violation(ce.value.d_v, ex.d_v, ce.err.d_v) == -1);
    // o_mag = sum_j P_ij |v_jk| from the exact oracle itself (o with V replaced by |V|): a plain fp64
    // softmax cannot resolve O(1) gaps at these magnitudes.
    Tensors64 abs_in = c.in;
    abs_in.d_o.clear();
    for (auto& x : abs_in.v) x = std::fabs(x);
    const std::vector<double> o_mag = exact(p, abs_in, 256).o;
    double v_max = 0;  // the documented floor for weights below e^-699 (dropped): n_k · 2^-1008 · max|v|
    for (double x : c.in.v) v_max = std::max(v_max, std::fabs(x));
    for (size_t e = 0; e < o_mag.size(); ++e) {
      INFO("o element " << e << ": err " << ce.err.o[e] << ", o_mag " << o_mag[e]);
      CHECK(ce.err.o[e] <= kTarget * o_mag[e] + p.n_k * 0x1p-1008 * v_max);
    }
    for (size_t i = 0; i < ex.lse.size(); ++i) {
      INFO("lse " << i << ": err " << ce.err.lse[i] << ", lse " << ex.lse[i]);
      REQUIRE(std::isfinite(ex.lse[i]));
      CHECK(ce.err.lse[i] <= kTarget * std::max(1.0, std::fabs(ex.lse[i])));
    }
  }
}

}  // namespace
}  // namespace fc::ref
