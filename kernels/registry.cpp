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

Variants all_variants() {
  return {.varlen = true,
          .paged = true,
          .window = true,
          .softcap = true,
          .alibi = true,
          .d_v = true,
          .strides = true,
          .sinks = true,
          .padded = true,
          .mask_bool = true,
          .mask_additive = true,
          .block_mask = true};
}

std::vector<std::string> variant_names(const Variants& v) {
  std::vector<std::string> out;
  const std::pair<bool, const char*> named[] = {{v.varlen, "varlen"},   {v.paged, "paged"}, {v.window, "window"},
                                                {v.softcap, "softcap"}, {v.alibi, "alibi"}, {v.d_v, "d_v"},
                                                {v.strides, "strides"}, {v.sinks, "sinks"},
                                                {v.mask_bool, "mask_bool"}, {v.mask_additive, "mask_additive"},
                                                {v.block_mask, "block_mask"}, {v.padded, "padded_varlen"}};
  for (auto [on, name] : named)
    if (on) out.emplace_back(name);
  return out;
}

Variants variants_of(const Problem& p) {
  Variants v;
  v.varlen = p.varlen;
  v.paged = p.page_size > 0;
  v.window = has_window(p);
  v.softcap = p.softcap > 0;
  v.alibi = p.alibi;
  v.d_v = head_dim_v(p) != p.d;
  v.sinks = p.sinks;
  v.padded = p.padded;
  v.mask_bool = p.mask_kind == MaskKind::Bool;
  v.mask_additive = p.mask_kind == MaskKind::Additive;
  v.block_mask = has_block_mask(p);
  return v;
}

Variants variants_of(const Inputs& in) {
  Variants v = variants_of(in.p);
  v.strides = in.strided();
  return v;
}

bool covers(const Variants& have, const Variants& need) {
  return (have.varlen || !need.varlen) && (have.paged || !need.paged) && (have.window || !need.window) &&
         (have.softcap || !need.softcap) && (have.alibi || !need.alibi) && (have.d_v || !need.d_v) &&
         (have.strides || !need.strides) && (have.sinks || !need.sinks) && (have.mask_bool || !need.mask_bool) &&
         (have.mask_additive || !need.mask_additive) && (have.block_mask || !need.block_mask) &&
         (have.padded || !need.padded);
}

bool declared_shape(const KernelInfo& i, const Problem& p) {
  if (!i.n_q.admits(p.n_q) || !i.n_k.admits(p.n_k)) return false;
  if (i.max_batch > 0 && p.batch > i.max_batch) return false;
  if (i.max_heads > 0 && p.heads_q > i.max_heads) return false;
  return i.fixed_scale == 0 || p.scale == i.fixed_scale;
}

bool claims(const Kernel& k, const Problem& p) {
  const KernelInfo& i = k.info;
  if (i.kind != KernelKind::Attention) return false;
  if (!declared_shape(i, p)) return false;
  auto has = [](const auto& v, auto x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  if (!well_formed(p) || !has(i.masks, p.mask)) return false;
  if (mixed_dtypes(p) ? !has(i.mixed_dtypes, dtypes_of(p)) : !has(i.dtypes, p.dtype)) return false;
  if (!i.head_dims.empty() && !has(i.head_dims, p.d)) return false;
  if (!i.gqa && p.heads_q != p.heads_kv) return false;
  if (!covers(i.variants, variants_of(p))) return false;
  if (p.mask_kind == MaskKind::Additive && !has(i.mask_dtypes, p.mask_dtype)) return false;
  return !k.supports || k.supports(p);
}

bool claims(const Kernel& k, const Inputs& in) { return claims(k, in.p) && (k.info.variants.strides || !in.strided()); }

Outputs alloc_outputs(const Inputs& in, bool grads) {
  const Problem& p = in.p;
  Outputs out;
  out.o = HostTensor(dtype_o(p), shape_o(p));
  out.lse = HostTensor(lse_dtype(p), shape_lse(p));
  if (grads) {
    out.d_q = HostTensor(dtype_q(p), shape_q(p));
    out.d_k = HostTensor(dtype_kv(p), shape_kv(p));
    out.d_v = HostTensor(dtype_kv(p), shape_v(p));
  }
  return out;
}

namespace {
void check_sendable(const Kernel& k, const Inputs& in) {
  if (std::string e = validate(in); !e.empty()) throw std::invalid_argument(k.info.name + ": inputs: " + e);
  if (!covers(k.info.variants, variants_of(in)))
    throw std::invalid_argument(k.info.name + " does not declare every variant the inputs use");
}
}  // namespace

Outputs run_forward(const Kernel& k, const Inputs& in, const Config& cfg) {
  Outputs out = alloc_outputs(in, false);
  run_forward_into(k, in, cfg, out);
  return out;
}

bool claims_merge(const Kernel& k, const MergeProblem& p) {
  if (k.info.kind != KernelKind::Merge || !k.merge || !well_formed(p)) return false;
  const auto& t = k.info.merge_dtypes;
  if (std::find(t.begin(), t.end(), p.dtype) == t.end()) return false;
  return !k.merge_supports || k.merge_supports(p);
}

MergeOutputs run_merge(const Kernel& k, const MergeInputs& in) {
  if (k.info.kind != KernelKind::Merge || !k.merge) throw std::invalid_argument(k.info.name + " is not a merge kernel");
  if (std::string e = validate(in); !e.empty()) throw std::invalid_argument(k.info.name + ": inputs: " + e);
  MergeOutputs out = alloc_merge_outputs(in.p);
  k.merge(in, out);
  return out;
}

void run_forward_into(const Kernel& k, const Inputs& in, const Config& cfg, Outputs& out) {
  check_sendable(k, in);
  k.forward(in, cfg, out);
}

Outputs run_forward_backward(const Kernel& k, const Inputs& in, const Config& cfg) {
  if (!k.backward) throw std::invalid_argument(k.info.name + " has no backward");
  if (!in.has_d_o()) throw std::invalid_argument("backward needs d_o");
  Outputs out = run_forward(k, in, cfg);
  Outputs grads = alloc_outputs(in, true);
  out.d_q = std::move(grads.d_q);
  out.d_k = std::move(grads.d_k);
  out.d_v = std::move(grads.d_v);
  k.backward(in, cfg, out);
  return out;
}

}  // namespace fc
