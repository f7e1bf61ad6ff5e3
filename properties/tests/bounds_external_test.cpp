// The undeclared-arithmetic charge (docs/error-model.md, "What an external kernel is charged")
// against two external kernels' arithmetic, replayed on the CPU on their regression cases
// (results/h200/external/regressions/): XLA's autodiff backward, which rounds scale·dS to F16 before
// its GEMMs, and a GQA backward that stores each query head's d_k, d_v in F16 before the group sum
// (cuDNN through JAX). Each reproduces the H200's bits, lies within the bound, and a kernel whose
// rounding errors are twice as large fails it.
#include "tests/catch.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "io/attention_io.hpp"
#include "contract/arithmetic.h"
#include "reference/bounds.hpp"
#include "reference/certified.hpp"
#include "reference/inputs64.hpp"

namespace {

using namespace fc;

float f32(double x) { return float(x); }

struct Grads {
  std::vector<double> d_q, d_k, d_v;
};

// An attention backward in fp32 with every GEMM's output, P and dS rounded to storage (jax.nn's
// XLA path): scores scaled after the dot, softmax in fp32, dP = d_o v^T stored, D = sum_j P dP (the
// softmax vjp), dS = P (dP - D) times scale, rounded; each query head's d_k, d_v rounded to storage,
// then the group summed in storage. `worse` multiplies the errors of the roundings of P, dS and the
// per-head gradients (1: the arithmetic above).
Grads backward(const Inputs& in, double worse) {
  const Problem& p = in.p;
  const DType st = p.dtype;
  const std::vector<double> q = in.q.to_f64(), k = in.k.to_f64(), v = in.v.to_f64(), d_o = in.d_o.to_f64();
  const int64_t d = p.d, nq = p.n_q, nk = p.n_k, G = p.heads_q / p.heads_kv;
  Grads g{std::vector<double>(q.size()), std::vector<double>(k.size()), std::vector<double>(v.size())};
  const auto round_worse = [st](double x, double w) {
    const double r = round_to(st, x);
    return r + (w - 1) * (r - x);
  };
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = h / G;
      const double* Q = &q[size_t(((b * p.heads_q + h) * nq) * d)];  // (n_q, d)
      const double* dO = &d_o[size_t(((b * p.heads_q + h) * nq) * d)];
      const double* K = &k[size_t(((b * p.heads_kv + hk) * nk) * d)];  // (n_k, d)
      const double* V = &v[size_t(((b * p.heads_kv + hk) * nk) * d)];
      std::vector<double> ds16(size_t(nq * nk)), p16(size_t(nq * nk));  // (n_q, n_k)
      for (int64_t i = 0; i < nq; ++i) {
        std::vector<float> s(static_cast<size_t>(nk)), P(s), dP(s);  // (n_k)
        float m = -INFINITY, l = 0, D = 0;
        for (int64_t j = 0; j < nk; ++j) {
          float acc = 0, acc_dp = 0;
          for (int64_t c = 0; c < d; ++c)
            acc += f32(Q[i * d + c] * K[j * d + c]), acc_dp += f32(dO[i * d + c] * V[j * d + c]);
          s[size_t(j)] = acc * f32(p.scale), m = std::max(m, s[size_t(j)]);
          dP[size_t(j)] = f32(round_to(st, acc_dp));
        }
        for (int64_t j = 0; j < nk; ++j) P[size_t(j)] = std::exp(s[size_t(j)] - m), l += P[size_t(j)];
        for (int64_t j = 0; j < nk; ++j) P[size_t(j)] /= l, D += P[size_t(j)] * dP[size_t(j)];
        for (int64_t j = 0; j < nk; ++j) {
          const float ds = P[size_t(j)] * (dP[size_t(j)] - D) * f32(p.scale);
          ds16[size_t(i * nk + j)] = round_worse(ds, worse), p16[size_t(i * nk + j)] = round_worse(P[size_t(j)], worse);
        }
      }
      for (int64_t j = 0; j < nk; ++j)
        for (int64_t c = 0; c < d; ++c) {
          float dk = 0, dv = 0;
          for (int64_t i = 0; i < nq; ++i)
            dk += f32(ds16[size_t(i * nk + j)] * Q[i * d + c]), dv += f32(p16[size_t(i * nk + j)] * dO[i * d + c]);
          const size_t x = size_t(((b * p.heads_kv + hk) * nk + j) * d + c);
          // The group's sum in storage, head after head (each head's gradient rounded first).
          g.d_k[x] = round_to(st, g.d_k[x] + round_worse(dk, worse));
          g.d_v[x] = round_to(st, g.d_v[x] + round_worse(dv, worse));
        }
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t c = 0; c < d; ++c) {
          float dq = 0;
          for (int64_t j = 0; j < nk; ++j) dq += f32(ds16[size_t(i * nk + j)] * K[j * d + c]);
          g.d_q[size_t(((b * p.heads_q + h) * nq + i) * d + c)] = round_to(st, dq);
        }
    }
  return g;
}

struct ExternalCase {
  Inputs in;
  ref::Certified ref;
  ref::Bounds bound;
};

ExternalCase load(const std::string& rel) {
  Inputs in = io::read_inputs(std::string(FC_REPO_DIR) + "/results/h200/external/regressions/" + rel);
  REQUIRE(in.p.mask == Mask::None);
  const ref::Tensors64 t = ref::tensors64(in);
  ref::Certified ref = ref::certified(in.p, t);
  ref::Bounds bound = ref::error_bounds(in.p, t, ref, ref::Precision{in.p.dtype, undeclared_arithmetic(in.p.dtype)});
  return {std::move(in), std::move(ref), std::move(bound)};
}

bool holds(const std::vector<double>& got, const std::vector<double>& ref, const std::vector<double>& bound, DType t) {
  return ref::within_bound(got, ref, bound, t).ok;
}

}  // namespace

TEST_CASE("XLA's scaled dS rounded to F16 on a subnormal_p case lies within the undeclared charge", "[cpu]") {
  const ExternalCase c = load("jax_xla/extreme-2f4a37d0fc47aba9.safetensors");  // F16, n 4 x 7, d = 8
  const Grads g = backward(c.in, 1);
  // The H200's d_k[j = 3, c = 1]: two F16 subnormal units where the reference is -1.4e-11.
  CHECK(g.d_k[3 * 8 + 1] == -0x1p-23);
  CHECK(holds(g.d_q, c.ref.value.d_q, c.bound.d_q, DType::F16));
  CHECK(holds(g.d_k, c.ref.value.d_k, c.bound.d_k, DType::F16));
  CHECK(holds(g.d_v, c.ref.value.d_v, c.bound.d_v, DType::F16));
  // The roundings' errors twice as large: d_k leaves the bound.
  const Grads bad = backward(c.in, 2);
  CHECK_FALSE(holds(bad.d_k, c.ref.value.d_k, c.bound.d_k, DType::F16));
}

TEST_CASE("a GQA d_v summed from per-head F16 gradients lies within the undeclared charge", "[cpu]") {
  const ExternalCase c = load("jax_cudnn/reference-ed15621d529db446.safetensors");  // F16, GQA 2:1, n 1 x 255, d = 8
  const Grads g = backward(c.in, 1);
  // The H200's d_v[j = 95, c = 5].
  CHECK(g.d_v[95 * 8 + 5] == -0.0084228515625);
  CHECK(holds(g.d_q, c.ref.value.d_q, c.bound.d_q, DType::F16));
  CHECK(holds(g.d_k, c.ref.value.d_k, c.bound.d_k, DType::F16));
  CHECK(holds(g.d_v, c.ref.value.d_v, c.bound.d_v, DType::F16));
  // The roundings' errors twice as large: d_v leaves the bound.
  const Grads bad = backward(c.in, 2);
  CHECK_FALSE(holds(bad.d_v, c.ref.value.d_v, c.bound.d_v, DType::F16));
}
