// Registry rows of the CUDA mutants (mutant_traits.hpp): each is its base kernel's row (masks, GQA,
// backward, what it declares to the error model and the laws) narrowed to the one dtype, head dim
// and tile its fault is built for, mutant = true. The half of the kernel pair without the fault,
// and the deterministic backward (its own d_q kernel, which carries none of the backward faults),
// are the real kernel's launchers. Host only.
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_kernels.hpp"
#include "kernels/cuda/mutant_traits.hpp"
#include "kernels/cuda/tiled_traits.hpp"
#include "kernels/cuda/wgmma_traits.hpp"

namespace fc::cuda {
namespace {

constexpr bool tiled(FaultSite s) { return s == FaultSite::TiledForward || s == FaultSite::TiledBackward; }
const char* base_name(FaultSite s) { return tiled(s) ? TiledTraits::kName : WgmmaTraits::kName; }

template <size_t I>
bool supports(const Problem& p, Tile t) {
  constexpr CudaMutant m = kCudaMutants[I];
  if (p.dtype != m.dtype || p.d != m.d || !(t == Tile{} || t == m.forward)) return false;
  const CudaKernel* base = find_cuda_kernel(base_name(m.site));
  return base != nullptr && base->supports(p, m.forward);
}

template <size_t I>
cudaError_t forward(const Problem& p, Tile, const ForwardArgs& a, void* workspace, cudaStream_t stream) {
  constexpr CudaMutant m = kCudaMutants[I];
  if constexpr (m.site == FaultSite::TiledForward) return tiled_forward_mutant(m.fault, p, a, stream);
  if constexpr (m.site == FaultSite::WgmmaForward) return wgmma_forward_mutant(m.fault, p, a, stream);
  if constexpr (tiled(m.site)) return TiledTraits::forward(p, m.forward, a, workspace, stream);
  return WgmmaTraits::forward(p, m.forward, a, workspace, stream);
}

template <size_t I>
cudaError_t backward(const Problem& p, Tile, bool deterministic, const BackwardArgs& a, void* workspace,
                     cudaStream_t stream) {
  constexpr CudaMutant m = kCudaMutants[I];
  if (!deterministic) {
    if constexpr (m.site == FaultSite::TiledBackward) return tiled_backward_mutant(m.fault, p, a, workspace, stream);
    if constexpr (m.site == FaultSite::WgmmaBackward) return wgmma_backward_mutant(m.fault, p, a, workspace, stream);
  }
  if constexpr (tiled(m.site)) return TiledTraits::backward(p, m.backward, deterministic, a, workspace, stream);
  return WgmmaTraits::backward(p, m.backward, deterministic, a, workspace, stream);
}

template <size_t I>
CudaKernel mutant_kernel() {
  constexpr CudaMutant m = kCudaMutants[I];
  CudaKernel k;
  k.name = m.name;
  k.description = m.description;
  k.dtypes = {m.dtype};
  k.head_dims = {m.d};
  k.hopper_only = !tiled(m.site);
  k.large_offsets = m.large_offsets;
  k.configs = {m.forward};
  k.arithmetic = tiled(m.site) ? TiledTraits::arithmetic : WgmmaTraits::arithmetic;  // its base's declaration
  k.supports = supports<I>;
  k.config_default = [](int) { return kCudaMutants[I].forward; };
  k.forward_tiles = [](int) { return std::vector<Tile>{kCudaMutants[I].forward}; };
  k.backward_tiles = [](int) { return std::vector<Tile>{kCudaMutants[I].backward}; };
  k.backward_tile = [](Tile, int) { return kCudaMutants[I].backward; };
  k.forward = forward<I>;
  k.forward_workspace_bytes =
      tiled(m.site) ? TiledTraits::forward_workspace_bytes : WgmmaTraits::forward_workspace_bytes;
  k.backward = backward<I>;
  k.backward_workspace_bytes =
      m.fault == Fault::TiledDqAccPad32
          ? padded_dq_workspace_bytes
          : (tiled(m.site) ? TiledTraits::backward_workspace_bytes : WgmmaTraits::backward_workspace_bytes);
  return k;
}

template <size_t... I>
std::vector<CudaKernel> mutant_kernels(std::index_sequence<I...>) {
  return {mutant_kernel<I>()...};
}

}  // namespace

void register_cuda_mutants(std::vector<Kernel>& out) {
  static const std::vector<CudaKernel> table = mutant_kernels(std::make_index_sequence<std::size(kCudaMutants)>{});
  for (size_t i = 0; i < table.size(); ++i) {
    const std::string base = base_name(kCudaMutants[i].site);
    const Kernel* base_row = nullptr;
    for (const Kernel& k : out)
      if (k.info.name == base) base_row = &k;
    if (base_row == nullptr) throw std::logic_error("CUDA mutant " + table[i].name + ": no row of " + base);
    Kernel row = registry_row(table[i]);
    KernelInfo info = base_row->info;  // what the base kernel declares, narrowed to the mutant's build
    info.name = row.info.name;
    info.description = row.info.description;
    info.mutant = true;
    info.dtypes = row.info.dtypes;
    info.head_dims = row.info.head_dims;
    info.configs = row.info.configs;
    info.large_offsets = row.info.large_offsets;
    info.arithmetic = declared_arithmetic(table[i]);  // the base's arithmetic on the mutant's tiles
    row.info = std::move(info);
    out.push_back(std::move(row));
  }
}

}  // namespace fc::cuda
