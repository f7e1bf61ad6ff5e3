// Registry rows of the CUDA kernels, one per entry of the kernel table (kernel_table.cpp), and their
// host-tensor glue: upload the inputs, run the entry's launchers on the calling thread's default stream
// (device_buffer.hpp: kStream), download.
// Every output (o, lse, d_q, d_k, d_v) lies between two guards and starts as NaN (GuardedBuffer): a
// write outside it fails the call, naming the tensor and the element.
#include "kernels/cuda/cuda_kernels.hpp"

#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "contract/arithmetic.h"
#include "kernels/cuda/device_buffer.hpp"

namespace fc {
namespace cuda {
namespace {

// The kernels write and read lse in F32 (the contract); a caller may hand an F64 tensor (as the CPU
// kernels accept): convert through F32, each value exact in both directions.
void download_lse(const GuardedBuffer& d_lse, HostTensor& lse) {
  if (lse.dtype == DType::F32) return d_lse.download(lse);
  HostTensor f32(DType::F32, lse.shape);  // (batch, heads_q, n_q)
  d_lse.download(f32);
  for (int64_t i = 0; i < f32.numel(); ++i) lse.set(i, f32.get(i));
}
DeviceBuffer upload_lse(const HostTensor& lse) {
  if (lse.dtype == DType::F32) return DeviceBuffer(lse);
  HostTensor f32(DType::F32, lse.shape);  // (batch, heads_q, n_q); rounding an F64 lse once
  for (int64_t i = 0; i < lse.numel(); ++i) f32.set(i, lse.get(i));
  return DeviceBuffer(f32);
}

// Throws, naming the kernel's pass, the tensor and the element, when a guard of an output changed.
struct Guarded {
  const char* name;
  const GuardedBuffer* buf;
  int elem_size;  // bytes per element on the device
};
void check_guards(const std::string& pass, std::initializer_list<Guarded> outs) {
  for (const Guarded& g : outs)
    if (const std::string bad = g.buf->breach(g.name, g.elem_size); !bad.empty())
      throw std::runtime_error(pass + ": " + bad);
}

// Upload, run the kernel's forward launcher on tile t, download.
void forward_host(const CudaKernel& ck, Tile t, const Problem& p, const HostTensor& q, const HostTensor& k,
                  const HostTensor& v, HostTensor& o, HostTensor& lse) {
  if (!ck.supports(p, t)) throw Refusal(ck.name + ": unsupported problem, tile or device");
  DeviceBuffer dq(q), dk(k), dv(v);
  GuardedBuffer d_out(o.bytes.size()), d_lse(size_t(lse.numel()) * sizeof(float));
  DeviceBuffer ws(ck.forward_workspace_bytes(p));
  ForwardArgs a{dq.get(), dk.get(), dv.get(), d_out.get(), static_cast<float*>(d_lse.get())};
  check(ck.forward(p, t, a, ws.get(), kStream), (ck.name + " forward").c_str());
  check(cudaStreamSynchronize(kStream), (ck.name + " forward (sync)").c_str());
  check_guards(ck.name + " forward", {{"o", &d_out, dtype_size(o.dtype)}, {"lse", &d_lse, int(sizeof(float))}});
  d_out.download(o);
  download_lse(d_lse, lse);
}

// Upload, run the kernel's backward launcher on tile t, download the gradients.
void backward_host(const CudaKernel& ck, Tile t, bool deterministic, const Problem& p, const HostTensor& q,
                   const HostTensor& k, const HostTensor& v, const HostTensor& o, const HostTensor& lse,
                   const HostTensor& d_o, HostTensor& d_q, HostTensor& d_k, HostTensor& d_v) {
  if (!ck.supports(p, Tile{})) throw Refusal(ck.name + ": unsupported problem or device");
  DeviceBuffer bq(q), bk(k), bv(v), bo(o), blse = upload_lse(lse), bdo(d_o);
  GuardedBuffer bdq(d_q.bytes.size()), bdk(d_k.bytes.size()), bdv(d_v.bytes.size());
  DeviceBuffer ws(ck.backward_workspace_bytes(p));
  BackwardArgs a{bq.get(),  bk.get(),  bv.get(), bo.get(), bdo.get(), static_cast<const float*>(blse.get()),
                 bdq.get(), bdk.get(), bdv.get()};
  check(ck.backward(p, t, deterministic, a, ws.get(), kStream), (ck.name + " backward").c_str());
  check(cudaStreamSynchronize(kStream), (ck.name + " backward (sync)").c_str());
  check_guards(ck.name + " backward", {{"d_q", &bdq, dtype_size(d_q.dtype)},
                                       {"d_k", &bdk, dtype_size(d_k.dtype)},
                                       {"d_v", &bdv, dtype_size(d_v.dtype)}});
  bdq.download(d_q);
  bdk.download(d_k);
  bdv.download(d_v);
}

}  // namespace

// The registry row of a table entry: every mask, GQA; configs are its forward tiles.
Kernel registry_row(const CudaKernel& ck) {
  Kernel k;
  k.info.name = ck.name;
  k.info.device = "cuda";
  k.info.description = ck.description;
  k.info.dtypes = ck.dtypes;
  k.info.masks = {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight};
  k.info.head_dims.assign(ck.head_dims.begin(), ck.head_dims.end());
  k.info.backward = ck.backward != nullptr;
  // The backward's default (Config::deterministic false) adds d_q by fp32 atomics or TMA reduce-adds:
  // the order, and so the last bit, changes run to run (determinism and consecutive_calls hold the
  // gradients to the reordering tolerance there; the deterministic variant's bits: cuda_tiled_test).
  k.info.atomic_backward = ck.backward != nullptr;
  k.info.stores_s_p = ck.stores_s_p;
  k.info.large_offsets = ck.large_offsets;
  k.info.exact = ck.exact;
  k.info.arithmetic = declared_arithmetic(ck);
  for (Tile t : ck.configs) {
    Config c;
    c.block_m = t.block_m;
    c.block_n = t.block_n;
    k.info.configs.push_back(c);
  }
  const CudaKernel* kp = &ck;  // the table outlives the registry
  k.supports = [kp](const Problem& p) { return kp->supports(p, Tile{}); };
  // Dense attention only: KernelInfo::variants stays empty, so no variant is ever sent here.
  k.forward = [kp](const Inputs& in, const Config& cfg, Outputs& out) {
    forward_host(*kp, forward_tile(*kp, cfg, in.p.d), in.p, in.q, in.k, in.v, out.o, out.lse);
  };
  if (ck.backward)
    k.backward = [kp](const Inputs& in, const Config& cfg, Outputs& out) {
      backward_host(*kp, backward_tile(*kp, cfg, in.p.d), cfg.deterministic, in.p, in.q, in.k, in.v, out.o, out.lse,
                    in.d_o, out.d_q, out.d_k, out.d_v);
    };
  return k;
}

Tile forward_tile(const CudaKernel& k, const Config& cfg, int d) {
  if (cfg.block_m == 0 && cfg.block_n == 0) return k.config_default(d);
  return Tile{cfg.block_m, cfg.block_n};
}

Tile backward_tile(const CudaKernel& k, const Config& cfg, int d) {
  return k.backward_tile ? k.backward_tile(forward_tile(k, cfg, d), d) : Tile{};
}

std::function<Arithmetic(const Problem&, const Config&)> declared_arithmetic(const CudaKernel& k) {
  if (k.arithmetic == nullptr) throw std::logic_error(k.name + ": declares no arithmetic");
  const CudaKernel* kp = &k;  // the tables outlive the registry
  return [kp](const Problem& p, const Config& cfg) {
    return kp->arithmetic(p, forward_tile(*kp, cfg, p.d), backward_tile(*kp, cfg, p.d), cfg.deterministic);
  };
}

}  // namespace cuda

void register_cuda_kernels(std::vector<Kernel>& out) {
  for (const cuda::CudaKernel& ck : cuda::cuda_kernel_table()) out.push_back(cuda::registry_row(ck));
  cuda::register_cuda_mutants(out);
}

}  // namespace fc
