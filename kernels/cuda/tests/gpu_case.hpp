// Helpers for the GPU tests: random problems, the CUDA kernels' registry rows, the certified
// reference and the error model's bounds for what each kernel declares about its arithmetic.
#pragma once

#include "tests/catch.hpp"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/registry.hpp"
#include "reference/bounds.hpp"
#include "reference/certified.hpp"

namespace fc::gpu_test {

// The CUDA family's rows, registered here directly (the tests need no other family).
inline const Kernel& cuda_kernel(const std::string& name) {
  static const std::vector<Kernel> rows = [] {
    std::vector<Kernel> out;
    register_cuda_kernels(out);
    return out;
  }();
  for (const Kernel& k : rows)
    if (k.info.name == name) return k;
  FAIL("no CUDA kernel named " << name);
  return rows.front();
}

inline Problem problem(DType t, int32_t d, Mask mask, int32_t b, int32_t h_q, int32_t h_kv, int32_t n_q, int32_t n_k) {
  return Problem{.batch = b,
                 .heads_q = h_q,
                 .heads_kv = h_kv,
                 .n_q = n_q,
                 .n_k = n_k,
                 .d = d,
                 .dtype = t,
                 .mask = mask,
                 .scale = default_scale(d)};
}

// Uniform inputs in [-r, r] from a fixed seed, each rounded once to p.dtype.
inline Inputs random_inputs(const Problem& p, uint64_t seed, double r = 2.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-r, r);
  auto draw = [&](int64_t n) {
    std::vector<double> x(static_cast<size_t>(n));
    for (double& e : x) e = u(rng);
    return x;
  };
  Inputs in;
  in.p = p;
  in.q = HostTensor::from_f64(p.dtype, shape_q(p), draw(numel_q(p)));    // (b, h_q, n_q, d)
  in.k = HostTensor::from_f64(p.dtype, shape_kv(p), draw(numel_kv(p)));  // (b, h_kv, n_k, d)
  in.v = HostTensor::from_f64(p.dtype, shape_kv(p), draw(numel_kv(p)));  // (b, h_kv, n_k, d)
  in.d_o = HostTensor::from_f64(p.dtype, shape_q(p), draw(numel_q(p)));  // (b, h_q, n_q, d)
  return in;
}

// A kernel's forward (and backward) on in, outputs allocated as the contract shapes them. (The
// registry's run_forward lives in fc_registry, which would pull every family into these tests.)
inline Outputs run_fwd(const Kernel& kern, const Inputs& in, const Config& cfg = {}) {
  Outputs out;
  out.o = HostTensor(in.p.dtype, shape_q(in.p));      // (b, h_q, n_q, d)
  out.lse = HostTensor(DType::F32, shape_lse(in.p));  // (b, h_q, n_q)
  kern.forward(in, cfg, out);
  return out;
}
inline Outputs run_fwd_bwd(const Kernel& kern, const Inputs& in, const Config& cfg = {}) {
  Outputs out = run_fwd(kern, in, cfg);
  out.d_q = HostTensor(in.p.dtype, shape_q(in.p));   // (b, h_q, n_q, d)
  out.d_k = HostTensor(in.p.dtype, shape_kv(in.p));  // (b, h_kv, n_k, d)
  out.d_v = HostTensor(in.p.dtype, shape_kv(in.p));  // (b, h_kv, n_k, d)
  kern.backward(in, cfg, out);
  return out;
}

inline ref::Tensors64 tensors64(const Inputs& in, bool with_d_o) {
  ref::Tensors64 t{in.q.to_f64(), in.k.to_f64(), in.v.to_f64(), {}};
  if (with_d_o) t.d_o = in.d_o.to_f64();
  return t;
}

// What kern declares about its arithmetic under cfg on p (KernelInfo::arithmetic): the error model
// charges exactly that.
inline ref::Precision declared_precision(const Kernel& kern, const Problem& p, const Config& cfg = {}) {
  ref::Precision pr;
  pr.storage = p.dtype;
  pr.ar = kern.info.arithmetic(p, cfg);
  return pr;
}

// One output tensor against the certified value and its bound; reports the worst element.
inline void require_within(const char* name, const HostTensor& got, const std::vector<double>& ref,
                           const std::vector<double>& bound, DType out) {
  const ref::Verdict v = ref::within_bound(got.to_f64(), ref, bound, out);
  INFO(name << ": worst element " << v.worst << " measured " << v.measured << " bound " << v.bound << " max ratio "
            << v.ratio << " " << v.why);
  REQUIRE(v.ok);
}

// The three gradients against the certified value and their bounds.
inline void require_gradients_within(const Outputs& out, const ref::Certified& c, const ref::Bounds& bd, DType t) {
  require_within("d_q", out.d_q, c.value.d_q, bd.d_q, t);
  require_within("d_k", out.d_k, c.value.d_k, bd.d_k, t);
  require_within("d_v", out.d_v, c.value.d_v, bd.d_v, t);
}

}  // namespace fc::gpu_test
