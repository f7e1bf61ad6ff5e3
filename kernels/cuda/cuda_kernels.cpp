// Registry rows of the CUDA kernels (cuda_tiled, cuda_naive) and their host-tensor glue: upload the
// inputs, run the launchers of launchers.hpp on the default stream, download the outputs.
#include "kernels/cuda/cuda_kernels.hpp"

#include <functional>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_buffer.hpp"

namespace fc {
namespace cuda {
namespace {

bool is_16bit(const Problem& p) { return p.dtype == DType::F16 || p.dtype == DType::BF16; }

// The kernels write and read lse in F32 (the contract); a caller may hand an F64 tensor (as the CPU
// kernels accept): convert through F32, each value exact in both directions.
void download_lse(const DeviceBuffer& d_lse, HostTensor& lse) {
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

// Upload, run one of the forward launchers (tiled_forward, wgmma_forward), download.
using ForwardLauncher = cudaError_t (*)(const Problem&, Tile, const ForwardArgs&, cudaStream_t);
void forward_host(const char* name, ForwardLauncher launch, bool (*supports)(const Problem&, Tile), Tile t,
                  const Problem& p, const HostTensor& q, const HostTensor& k, const HostTensor& v, HostTensor& o,
                  HostTensor& lse) {
  if (!supports(p, t)) throw std::invalid_argument(std::string(name) + ": unsupported problem, tile or device");
  DeviceBuffer dq(q), dk(k), dv(v), d_out(o.bytes.size()), d_lse(size_t(lse.numel()) * sizeof(float));
  ForwardArgs a{dq.get(), dk.get(), dv.get(), d_out.get(), static_cast<float*>(d_lse.get())};
  check(launch(p, t, a, nullptr), (std::string(name) + " forward").c_str());
  check(cudaDeviceSynchronize(), (std::string(name) + " forward (sync)").c_str());
  d_out.download(o);
  download_lse(d_lse, lse);
}

void tiled_forward_host(const Problem& p, const Config& cfg, const HostTensor& q, const HostTensor& k,
                        const HostTensor& v, HostTensor& o, HostTensor& lse) {
  const Tile t = forward_tile(cfg, p.d);
  forward_host("cuda_tiled", tiled_forward, tiled_forward_supports, t.block_m == 0 ? Tile{64, 64} : t, p, q, k, v, o,
               lse);
}

void wgmma_forward_host(const Problem& p, const Config& cfg, const HostTensor& q, const HostTensor& k,
                        const HostTensor& v, HostTensor& o, HostTensor& lse) {
  const Tile t = forward_tile(cfg, p.d);
  forward_host("cuda_wgmma", wgmma_forward, wgmma_forward_supports, t.block_m == 0 ? wgmma_forward_default(p.d) : t, p,
               q, k, v, o, lse);
}

// Upload, run a backward launcher (mma.sync with its tile, or wgmma), download the gradients.
void backward_host(const char* name, const std::function<cudaError_t(const BackwardArgs&, void*)>& launch,
                   const Problem& p, const HostTensor& q, const HostTensor& k, const HostTensor& v, const HostTensor& o,
                   const HostTensor& lse, const HostTensor& d_o, HostTensor& d_q, HostTensor& d_k, HostTensor& d_v) {
  DeviceBuffer bq(q), bk(k), bv(v), bo(o), blse = upload_lse(lse), bdo(d_o);
  DeviceBuffer bdq(d_q.bytes.size()), bdk(d_k.bytes.size()), bdv(d_v.bytes.size());
  DeviceBuffer ws(tiled_backward_workspace_bytes(p));
  BackwardArgs a{bq.get(),  bk.get(),  bv.get(), bo.get(), bdo.get(), static_cast<const float*>(blse.get()),
                 bdq.get(), bdk.get(), bdv.get()};
  check(launch(a, ws.get()), (std::string(name) + " backward").c_str());
  check(cudaDeviceSynchronize(), (std::string(name) + " backward (sync)").c_str());
  bdq.download(d_q);
  bdk.download(d_k);
  bdv.download(d_v);
}

void tiled_backward_host(const Problem& p, const Config& cfg, const HostTensor& q, const HostTensor& k,
                         const HostTensor& v, const HostTensor& o, const HostTensor& lse, const HostTensor& d_o,
                         HostTensor& d_q, HostTensor& d_k, HostTensor& d_v) {
  const Tile t = backward_tile(cfg, p.d);
  if (!tiled_backward_supports(p, t)) throw std::invalid_argument("cuda_tiled: unsupported problem or tile");
  backward_host(
      "cuda_tiled",
      [&](const BackwardArgs& a, void* ws) { return tiled_backward(p, t, cfg.deterministic, a, ws, nullptr); }, p, q, k,
      v, o, lse, d_o, d_q, d_k, d_v);
}

void wgmma_backward_host(const Problem& p, const Config& cfg, const HostTensor& q, const HostTensor& k,
                         const HostTensor& v, const HostTensor& o, const HostTensor& lse, const HostTensor& d_o,
                         HostTensor& d_q, HostTensor& d_k, HostTensor& d_v) {
  if (!wgmma_backward_supports(p)) throw std::invalid_argument("cuda_wgmma: unsupported problem or device");
  backward_host(
      "cuda_wgmma",
      [&](const BackwardArgs& a, void* ws) { return wgmma_backward(p, cfg.deterministic, a, ws, nullptr); }, p, q, k, v,
      o, lse, d_o, d_q, d_k, d_v);
}

void naive_forward_host(const Problem& p, const Config&, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                        HostTensor& o, HostTensor& lse) {
  if (!naive_forward_supports(p)) throw std::invalid_argument("cuda_naive: unsupported problem");
  DeviceBuffer dq(q), dk(k), dv(v), d_out(o.bytes.size()), d_lse(size_t(lse.numel()) * sizeof(float));
  DeviceBuffer ws(naive_forward_workspace_bytes(p));
  ForwardArgs a{dq.get(), dk.get(), dv.get(), d_out.get(), static_cast<float*>(d_lse.get())};
  check(naive_forward(p, a, ws.get(), nullptr), "cuda_naive forward");
  check(cudaDeviceSynchronize(), "cuda_naive forward (sync)");
  d_out.download(o);
  download_lse(d_lse, lse);
}

}  // namespace

namespace {
std::vector<Config> configs_of(std::initializer_list<std::pair<int, int>> tiles) {
  std::vector<Config> out;
  for (auto [m, n] : tiles) {
    Config c;
    c.block_m = m;
    c.block_n = n;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::vector<Config> tiled_configs() { return configs_of({{64, 64}, {128, 64}, {128, 32}}); }
std::vector<Config> wgmma_configs() { return configs_of({{128, 128}, {128, 64}, {192, 64}}); }

Tile forward_tile(const Config& cfg, int d) {
  if (cfg.block_m == 0 && cfg.block_n == 0) return Tile{};  // the launcher's default for d
  return Tile{cfg.block_m, cfg.block_n};
}

// Config i of tiled_configs() selects the backward's i-th tile, so block-size invariance ranges over
// three backward tiles too; any other config gets the backward's default.
Tile backward_tile(const Config& cfg, int d) {
  Tile tiles[3];
  const int n = tiled_backward_tiles(d, tiles, 3);
  const std::vector<Config> configs = tiled_configs();
  for (int i = 0; i < int(configs.size()) && i < n; ++i)
    if (configs[i].block_m == cfg.block_m && configs[i].block_n == cfg.block_n) return tiles[i];
  return n > 0 ? tiles[0] : Tile{};
}

}  // namespace cuda

void register_cuda_kernels(std::vector<Kernel>& out) {
  const std::vector<Mask> masks = {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight};
  // The two tiled kernels share their contract: fp16/bf16, d = 64 and 128, every mask, GQA, backward;
  // dense attention only (KernelInfo::variants stays empty: no variant is ever sent to them).
  auto tiled_row = [&](const char* name, const char* description, std::vector<Config> configs) {
    Kernel k;
    k.info.name = name;
    k.info.device = "cuda";
    k.info.description = description;
    k.info.dtypes = {DType::F16, DType::BF16};
    k.info.masks = masks;
    k.info.head_dims = {64, 128};
    k.info.backward = true;
    k.info.configs = std::move(configs);
    // Rows never interact in the forward (d_q of the backward is summed by atomics or a reduce-add);
    // S is an MMA chain over d, the same for every key and tile; P = exp2(s c - m) with m the running
    // max at the tile's end. The scale is folded with log2 e before the max is subtracted, so scores
    // are never exact (exact_scores false).
    k.info.exact = {.rows = true, .shared_scores = true, .tile_weights = true};
    return k;
  };
  Kernel tiled =
      tiled_row("cuda_tiled",
                "FlashAttention-2 on mma.sync tensor cores: fp32 accumulate, P rounded to storage, recompute backward",
                cuda::tiled_configs());
  tiled.supports = [](const Problem& p) { return cuda::is_16bit(p) && (p.d == 64 || p.d == 128); };
  tiled.forward = [](const Inputs& in, const Config& c, Outputs& out) {
    cuda::tiled_forward_host(in.p, c, in.q, in.k, in.v, out.o, out.lse);
  };
  tiled.backward = [](const Inputs& in, const Config& c, Outputs& out) {
    cuda::tiled_backward_host(in.p, c, in.q, in.k, in.v, out.o, out.lse, in.d_o, out.d_q, out.d_k, out.d_v);
  };
  out.push_back(std::move(tiled));

  Kernel wgmma = tiled_row("cuda_wgmma",
                           "Hopper (sm_90a only): TMA producer warpgroup, wgmma consumers, fp32 accumulate, P / dS "
                           "rounded to storage; recompute backward with d_q by TMA reduce-add (deterministic: an "
                           "atomic-free d_q kernel)",
                           cuda::wgmma_configs());
  wgmma.supports = [](const Problem& p) {
    return cuda::is_16bit(p) && (p.d == 64 || p.d == 128) && cuda::device_is_sm90();
  };
  wgmma.forward = [](const Inputs& in, const Config& c, Outputs& out) {
    cuda::wgmma_forward_host(in.p, c, in.q, in.k, in.v, out.o, out.lse);
  };
  wgmma.backward = [](const Inputs& in, const Config& c, Outputs& out) {
    cuda::wgmma_backward_host(in.p, c, in.q, in.k, in.v, out.o, out.lse, in.d_o, out.d_q, out.d_k, out.d_v);
  };
  out.push_back(std::move(wgmma));

  Kernel naive;
  naive.info.name = "cuda_naive";
  naive.info.device = "cuda";
  naive.info.description = "three kernels, S and P materialised in HBM in the storage type (fp32 accumulate)";
  naive.info.dtypes = {DType::F16, DType::BF16};
  naive.info.stores_s_p = true;
  naive.info.masks = masks;
  naive.info.exact = {.rows = true};
  naive.supports = [](const Problem& p) { return cuda::naive_forward_supports(p); };
  naive.forward = [](const Inputs& in, const Config& c, Outputs& out) {
    cuda::naive_forward_host(in.p, c, in.q, in.k, in.v, out.o, out.lse);
  };
  out.push_back(std::move(naive));
}

}  // namespace fc
