// Helpers for the CPU-kernel tests: building inputs, running a registered kernel with an F64 lse,
// and the two comparators (elementwise scaled error, normwise error). The comparators have their
// own tests (comparator_test.cpp), including ones that must fail.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/registry.hpp"
#include "contract/tensor.hpp"

namespace fc::test {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Inputs from float64 values, each rounded once to p.dtype. d_o may be empty (forward only).
inline Inputs make_inputs(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                          const std::vector<double>& v, const std::vector<double>& d_o = {}) {
  Inputs in;
  in.p = p;
  in.q = HostTensor::from_f64(p.dtype, shape_q(p), q);                        // (batch, heads_q, n_q, d)
  in.k = HostTensor::from_f64(p.dtype, shape_kv(p), k);                       // (batch, heads_kv, n_k, d)
  in.v = HostTensor::from_f64(p.dtype, shape_kv(p), v);                       // (batch, heads_kv, n_k, d)
  if (!d_o.empty()) in.d_o = HostTensor::from_f64(p.dtype, shape_q(p), d_o);  // (batch, heads_q, n_q, d)
  return in;
}

// Uniform values in [-r, r] from a fixed seed (reproducible), rounded to p.dtype by make_inputs.
inline std::vector<double> uniform(int64_t n, double r, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-r, r);
  std::vector<double> x(static_cast<size_t>(n));  // (n) flat, any layout
  for (double& e : x) e = dist(rng);
  return x;
}

inline Inputs random_inputs(const Problem& p, uint64_t seed, double r = 2.0) {
  std::mt19937_64 rng(seed);
  const auto q = uniform(numel_q(p), r, rng);    // (batch, heads_q, n_q, d)
  const auto k = uniform(numel_kv(p), r, rng);   // (batch, heads_kv, n_k, d)
  const auto v = uniform(numel_kv(p), r, rng);   // (batch, heads_kv, n_k, d)
  const auto d_o = uniform(numel_q(p), r, rng);  // (batch, heads_q, n_q, d)
  return make_inputs(p, q, k, v, d_o);
}

// Forward (+ backward when in.d_o is present) through a kernel's registered entry points, with lse
// kept in `lse_dtype` (F64 lets fp64-storage runs keep full precision; F32 is the contract's).
inline Outputs run(const Kernel& kern, const Inputs& in, const Config& cfg, DType lse_dtype = DType::F32) {
  Outputs out;
  out.o = HostTensor(in.p.dtype, shape_o(in.p));     // (batch, heads_q, n_q, d_v)
  out.lse = HostTensor(lse_dtype, shape_lse(in.p));  // (batch, heads_q, n_q)
  kern.forward(in, cfg, out);
  if (!in.has_d_o()) return out;
  out.d_q = HostTensor(in.p.dtype, shape_q(in.p));   // (batch, heads_q, n_q, d)
  out.d_k = HostTensor(in.p.dtype, shape_kv(in.p));  // (batch, heads_kv, n_k, d)
  out.d_v = HostTensor(in.p.dtype, shape_v(in.p));   // (batch, heads_kv, n_k, d_v)
  kern.backward(in, cfg, out);
  return out;
}

// max_i |x_i - ref_i| / scale_i. Equal values (including equal infinities) contribute 0; a NaN on
// either side, an infinity that differs, or any difference where scale_i = 0 gives +inf.
inline double scaled_error(const std::vector<double>& x, const std::vector<double>& ref,
                           const std::vector<double>& scale) {
  if (x.size() != ref.size() || x.size() != scale.size()) return kInf;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == ref[i]) continue;
    const double e = std::fabs(x[i] - ref[i]) / scale[i];
    if (!(e < kInf)) return kInf;  // NaN or inf: never a pass
    worst = std::max(worst, e);
  }
  return worst;
}

// ||x - ref||_2 / ||ref||_2; +inf for any non-finite value, or any difference when ref = 0.
// Both norms are taken of values divided by the largest magnitude so that tiny differences do
// not underflow to a false 0 when squared.
inline double normwise_error(const std::vector<double>& x, const std::vector<double>& ref) {
  if (x.size() != ref.size()) return kInf;
  double big = 0;
  bool differs = false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(ref[i])) return kInf;
    differs |= x[i] != ref[i];
    big = std::max({big, std::fabs(x[i] - ref[i]), std::fabs(ref[i])});
  }
  if (!differs) return 0;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff += ((x[i] - ref[i]) / big) * ((x[i] - ref[i]) / big);
    norm += (ref[i] / big) * (ref[i] / big);
  }
  return norm == 0 ? kInf : std::sqrt(diff / norm);
}

// A Config with the given tile shape and loop order (accumulation: fp32 default).
inline Config tile_config(int32_t block_m, int32_t block_n, LoopOrder order) {
  Config c;
  c.block_m = block_m;
  c.block_n = block_n;
  c.order = order;
  return c;
}

}  // namespace fc::test
