// See certified_cases.hpp.
#include "certified_cases.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <random>

#include "reference/visibility.hpp"

namespace fc::ref::testing {
namespace {

double round_to(DType t, double x) {
  if (t == DType::F16) x = std::clamp(x, -65504.0, 65504.0);  // stay finite: fp16's largest value
  if (t == DType::F16) return double(float(Eigen::half(float(x))));
  if (t == DType::BF16) return double(float(Eigen::bfloat16(float(x))));
  if (t == DType::F32) return double(float(x));
  return x;
}

// q, k ~ qk_sigma · N(0,1), v, d_o ~ N(0,1), rounded to the storage type.
CertifiedCase make(std::string name, Problem p, double qk_sigma, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  auto fill = [&](int64_t n, double s) {
    std::vector<double> x(size_t(n), 0.0);
    for (auto& e : x) e = round_to(p.dtype, s * dist(rng));
    return x;
  };
  CertifiedCase c{std::move(name), p, {}};
  c.in.q = fill(numel_q(p), qk_sigma);
  c.in.k = fill(numel_kv(p), qk_sigma);
  c.in.v = fill(numel_kv(p), 1.0);
  c.in.d_o = fill(numel_q(p), 1.0);
  return c;
}

}  // namespace

Problem shape(int32_t batch, int32_t hq, int32_t hkv, int32_t n_q, int32_t n_k, int32_t d, DType t, Mask m,
              double scale) {
  return Problem{.batch = batch,
                 .heads_q = hq,
                 .heads_kv = hkv,
                 .n_q = n_q,
                 .n_k = n_k,
                 .d = d,
                 .dtype = t,
                 .mask = m,
                 .scale = scale};
}

Problem shape(int32_t batch, int32_t hq, int32_t hkv, int32_t n_q, int32_t n_k, int32_t d, int32_t d_v, DType t,
              Mask m) {
  Problem p = shape(batch, hq, hkv, n_q, n_k, d, t, m, 1 / std::sqrt(double(d)));
  p.d_v = d_v;
  return p;
}

std::vector<CertifiedCase> certified_cases() {
  using M = Mask;
  std::vector<CertifiedCase> cs;
  const double s8 = 1 / std::sqrt(8.0), s16 = 0.25;
  cs.push_back(make("f64 random, no mask", shape(1, 1, 1, 12, 12, 8, DType::F64, M::None, s8), 1, 1));
  cs.push_back(make("f16 GQA 4/2, batch 2, causal_top_left, n_q < n_k",
                    shape(2, 4, 2, 7, 11, 16, DType::F16, M::CausalTopLeft, s16), 1, 2));
  cs.push_back(make("bf16 causal_bottom_right, n_q > n_k (fully masked rows)",
                    shape(1, 2, 1, 11, 7, 8, DType::BF16, M::CausalBottomRight, s8), 2, 3));
  cs.push_back(
      make("f32 MQA 3/1, causal_top_left, n_q > n_k", shape(1, 3, 1, 9, 5, 8, DType::F32, M::CausalTopLeft, s8), 2, 4));
  cs.push_back(make("f16 causal_bottom_right, n_q < n_k",
                    shape(1, 2, 2, 5, 13, 16, DType::F16, M::CausalBottomRight, s16), 3, 5));
  // Extreme score ranges: q, k ~ 100 N(0,1), scale 1, d 4: scores ~ 1e4, spreads far beyond 700.
  cs.push_back(make("scores ~ +-1e4 (f32)", shape(1, 2, 1, 8, 10, 4, DType::F32, M::None, 1.0), 100, 6));
  cs.push_back(make("scores ~ +-1e6 (f64)", shape(1, 1, 1, 6, 9, 4, DType::F64, M::CausalBottomRight, 1.0), 1000, 7));
  cs.push_back(make("fp16 near 65504, scores ~ 1e9", shape(1, 1, 1, 5, 6, 4, DType::F16, M::None, 1.0), 3e4, 8));
  cs.push_back(
      make("scores ~ 1e2: a few keys share the weight", shape(1, 1, 1, 8, 8, 8, DType::F64, M::None, 1.0), 4, 9));
  cs.push_back(make("negative scale", shape(1, 1, 1, 6, 7, 8, DType::F16, M::None, -0.7), 1, 10));
  cs.push_back(make("scale 0: uniform weights", shape(1, 1, 1, 4, 6, 4, DType::F64, M::CausalTopLeft, 0.0), 1, 11));
  cs.push_back(make("tiny inputs: scores underflow", shape(1, 1, 1, 4, 5, 4, DType::F64, M::None, 1.0), 1e-160, 12));
  {  // exponents spread over 2^-40 .. 2^40 within each row: several Ozaki slices and a remainder
    CertifiedCase c = make("f64 exponent spread 2^+-40", shape(1, 2, 1, 6, 8, 8, DType::F64, M::None, 0.01), 1, 13);
    std::mt19937_64 rng(99);
    std::uniform_int_distribution<int> ex(-40, 40);
    for (auto* x : {&c.in.q, &c.in.k})
      for (auto& e : *x) e = std::ldexp(e, ex(rng) / 4);
    cs.push_back(std::move(c));
  }
  {  // scores ~ 1e4 with O(1) gaps between keys: every weight matters, and an exponent argument
     // rounded to double (error ~ 1e4 u) would show
    CertifiedCase c =
        make("scores ~ 1e4 with O(1) gaps (f64)", shape(1, 1, 1, 5, 9, 4, DType::F64, M::None, 1.0), 100, 15);
    std::mt19937_64 rng(15);
    std::normal_distribution<double> dist;
    const std::vector<double> base = {dist(rng), dist(rng), dist(rng), dist(rng)};  // (d)
    for (int64_t j = 0; j < c.p.n_k; ++j)
      for (int64_t l = 0; l < 4; ++l) c.in.k[size_t(j * 4 + l)] = 100 * base[size_t(l)] + 0.01 * dist(rng);
    cs.push_back(std::move(c));
  }
  {  // nearly constant V: dP - D cancels, dS is tiny next to its parts
    CertifiedCase c =
        make("f64 nearly constant V (dP - D cancels)", shape(1, 1, 1, 6, 8, 4, DType::F64, M::None, 0.5), 1, 14);
    for (auto& e : c.in.v) e = 1.0 + 1e-9 * e;
    cs.push_back(std::move(c));
  }
  return cs;
}

Scales natural_scales(const Problem& p, const Tensors64& in) {
  Scales sc;
  sc.o_mag.assign(size_t(numel_q(p)), 0.0);
  const int32_t group = p.heads_q / p.heads_kv;
  const int64_t d = p.d;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int32_t hk = 0; hk < p.heads_kv; ++hk) {
      double m2 = 0, p2 = 0, q2 = 0, do2 = 0, k2 = 0;
      for (int64_t j = 0; j < p.n_k; ++j)
        for (int64_t c = 0; c < d; ++c) k2 += std::pow(in.k[offset_kv(p, b, hk, j) + c], 2);
      for (int32_t h = hk * group; h < (hk + 1) * group; ++h)
        for (int64_t i = 0; i < p.n_q; ++i) {
          const int64_t oq = offset_q(p, b, h, i);
          for (int64_t c = 0; c < d; ++c) {
            q2 += in.q[oq + c] * in.q[oq + c];
            do2 += in.d_o[oq + c] * in.d_o[oq + c];
          }
          std::vector<double> s(size_t(p.n_k), -INFINITY);  // (n_k)
          double mx = -INFINITY;
          for (int64_t j = 0; j < p.n_k; ++j) {
            if (!sees(p.mask, i, j, p.n_q, p.n_k)) continue;
            double dot = 0;
            for (int64_t c = 0; c < d; ++c) dot += in.q[oq + c] * in.k[offset_kv(p, b, hk, j) + c];
            s[j] = p.scale * dot;
            mx = std::max(mx, s[j]);
          }
          if (mx == -INFINITY) continue;  // empty row: no weights
          double l = 0;
          for (auto& e : s) l += (e = std::exp(e - mx));
          for (int64_t j = 0; j < p.n_k; ++j) {
            const double pj = s[j] / l;
            p2 += pj * pj;
            for (int64_t c = 0; c < d; ++c) sc.o_mag[oq + c] += pj * std::fabs(in.v[offset_kv(p, b, hk, j) + c]);
          }
          for (int64_t j = 0; j < p.n_k; ++j) {
            double mij = 0;
            for (int64_t c = 0; c < d; ++c)
              mij += std::fabs(in.d_o[oq + c]) * (std::fabs(in.v[offset_kv(p, b, hk, j) + c]) + sc.o_mag[oq + c]);
            m2 += std::pow(s[j] / l * mij, 2);
          }
        }
      sc.dq.push_back(std::fabs(p.scale) * std::sqrt(m2 * k2));
      sc.dk.push_back(std::fabs(p.scale) * std::sqrt(m2 * q2));
      sc.dv.push_back(std::sqrt(p2 * do2));
    }
  return sc;
}

namespace {

// The exact oracle's value is its MPFR result rounded to nearest double: within half an ulp of the
// exact real, which err bounds the distance to.
double half_ulp(double x) {
  const double a = std::fabs(x);
  return 0.5 * (std::nextafter(a, INFINITY) - a);
}

}  // namespace

long first_violation(const std::vector<double>& value, const std::vector<double>& exact,
                     const std::vector<double>& err) {
  if (value.size() != exact.size() || err.size() != exact.size()) return 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    if (std::isnan(err[i])) return long(i);
    if (std::isnan(exact[i])) {
      if (!std::isnan(value[i])) return long(i);
    } else if (std::isinf(exact[i])) {
      if (value[i] != exact[i]) return long(i);
    } else if (!(std::fabs(value[i] - exact[i]) <= err[i] + half_ulp(exact[i]))) {  // also catches a NaN value
      return long(i);
    }
  }
  return -1;
}

}  // namespace fc::ref::testing
