#include "registry.hpp"

#include <algorithm>
#include <stdexcept>

#ifdef FLASHCHECK_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace fc {

const std::vector<Kernel>& registry() {
  static const std::vector<Kernel> table = [] {
    std::vector<Kernel> t;
    register_cpu_kernels(t);
#ifdef FLASHCHECK_HAVE_CUDA
    register_cuda_kernels(t);
#endif
    register_mutant_kernels(t);
    return t;
  }();
  return table;
}

const Kernel* find_kernel(const std::string& name) {
  for (const Kernel& k : registry())
    if (k.info.name == name) return &k;
  return nullptr;
}

bool device_present(const std::string& device) {
  if (device == "cpu") return true;
#ifdef FLASHCHECK_HAVE_CUDA
  if (device == "cuda") {
    static const bool present = [] {
      int n = 0;
      return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    }();
    return present;
  }
#endif
  return false;
}

bool claims(const Kernel& k, const Problem& p) {
  const KernelInfo& i = k.info;
  auto has = [](const auto& v, auto x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  if (!well_formed(p) || !has(i.dtypes, p.dtype) || !has(i.masks, p.mask)) return false;
  if (!i.head_dims.empty() && !has(i.head_dims, p.d)) return false;
  if (!i.gqa && p.heads_q != p.heads_kv) return false;
  return !k.supports || k.supports(p);
}

Outputs run_forward(const Kernel& k, const Inputs& in, const Config& cfg) {
  Outputs out;
  out.o = HostTensor(in.p.dtype, shape_q(in.p));
  out.lse = HostTensor(lse_dtype(in.p.dtype), shape_lse(in.p));
  k.forward(in.p, cfg, in.q, in.k, in.v, out.o, out.lse);
  return out;
}

Outputs run_forward_backward(const Kernel& k, const Inputs& in, const Config& cfg) {
  if (!k.backward) throw std::invalid_argument(k.info.name + " has no backward");
  if (!in.has_d_o()) throw std::invalid_argument("backward needs d_o");
  Outputs out = run_forward(k, in, cfg);
  out.d_q = HostTensor(in.p.dtype, shape_q(in.p));
  out.d_k = HostTensor(in.p.dtype, shape_kv(in.p));
  out.d_v = HostTensor(in.p.dtype, shape_kv(in.p));
  k.backward(in.p, cfg, in.q, in.k, in.v, out.o, out.lse, in.d_o, out.d_q, out.d_k, out.d_v);
  return out;
}

}  // namespace fc
