// The CUDA kernel table: one CudaKernel per traits header, in registry order. Everything a row says
// comes from the traits; what a kernel does not list (head dims, configs, a backward) it does not have.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/launchers.hpp"
#include "kernels/cuda/naive_traits.hpp"
#include "kernels/cuda/tiled_traits.hpp"
#include "kernels/cuda/wgmma_traits.hpp"

namespace fc::cuda {
namespace {

template <class Tr, class = void>
struct HasHeadDims : std::false_type {};
template <class Tr>
struct HasHeadDims<Tr, std::void_t<decltype(Tr::kHeadDims)>> : std::true_type {};
template <class Tr, class = void>
struct HasTiles : std::false_type {};
template <class Tr>
struct HasTiles<Tr, std::void_t<decltype(Tr::kForwardTiles)>> : std::true_type {};
template <class Tr, class = void>
struct HasBackward : std::false_type {};
template <class Tr>
struct HasBackward<Tr, std::void_t<decltype(Tr::kBackwardTiles)>> : std::true_type {};
template <class Tr, class = void>
struct HasConfigs : std::false_type {};
template <class Tr>
struct HasConfigs<Tr, std::void_t<decltype(Tr::kConfigs)>> : std::true_type {};
template <class Tr, class = void>
struct HasConfigDefault : std::false_type {};
template <class Tr>
struct HasConfigDefault<Tr, std::void_t<decltype(Tr::kConfigDefault)>> : std::true_type {};
template <class Tr, class = void>
struct StoresSP : std::false_type {};
template <class Tr>
struct StoresSP<Tr, std::void_t<decltype(Tr::kStoresSP)>> : std::bool_constant<Tr::kStoresSP> {};
template <class Tr, class = void>
struct LargeOffsets : std::false_type {};
template <class Tr>
struct LargeOffsets<Tr, std::void_t<decltype(Tr::kLargeOffsets)>> : std::bool_constant<Tr::kLargeOffsets> {};

// The tiles of `list` built for head dim d, `first` (the default) leading.
template <class List>
std::vector<Tile> tiles_for(const List& list, Tile first, int d) {
  std::vector<Tile> out{first};
  for (const auto& x : list)
    if ((x.d == 0 || x.d == d) && !(Tile{x.block_m, x.block_n} == first)) out.push_back(Tile{x.block_m, x.block_n});
  return out;
}

template <class Tr>
bool head_dim_ok(int d) {
  if constexpr (HasHeadDims<Tr>::value)
    return std::find(std::begin(Tr::kHeadDims), std::end(Tr::kHeadDims), d) != std::end(Tr::kHeadDims);
  else
    return true;
}

template <class Tr>
bool supports(const Problem& p, Tile t) {
  if (!well_formed(p) || !head_dim_ok<Tr>(p.d) || !Tr::supports(p)) return false;
  if (std::find(std::begin(Tr::kDTypes), std::end(Tr::kDTypes), p.dtype) == std::end(Tr::kDTypes)) return false;
  if (Tr::kHopperOnly && !device_is_sm90()) return false;
  if constexpr (HasTiles<Tr>::value) {
    if (t == Tile{}) return true;
    for (const auto& x : Tr::kForwardTiles)
      if ((x.d == 0 || x.d == p.d) && Tile{x.block_m, x.block_n} == t) return true;
    return false;
  }
  return true;
}

template <class Tr, class = void>
struct HasArithmetic : std::false_type {};
template <class Tr>
struct HasArithmetic<Tr, std::void_t<decltype(&Tr::arithmetic)>>
    : std::is_same<decltype(&Tr::arithmetic), ArithmeticOf> {};

template <class Tr>
CudaKernel row() {
  static_assert(HasArithmetic<Tr>::value,
                "a CUDA kernel's traits declare its arithmetic: static Arithmetic arithmetic(const Problem&, Tile "
                "forward, Tile backward, bool deterministic) (arithmetic.hpp)");
  CudaKernel k;
  k.name = Tr::kName;
  k.description = Tr::kDescription;
  k.dtypes.assign(std::begin(Tr::kDTypes), std::end(Tr::kDTypes));
  if constexpr (HasHeadDims<Tr>::value) k.head_dims.assign(std::begin(Tr::kHeadDims), std::end(Tr::kHeadDims));
  k.hopper_only = Tr::kHopperOnly;
  k.stores_s_p = StoresSP<Tr>::value;
  k.large_offsets = LargeOffsets<Tr>::value;
  if constexpr (HasConfigs<Tr>::value)
    for (const ConfigTile& c : Tr::kConfigs)
      if (std::find(k.configs.begin(), k.configs.end(), c.forward) == k.configs.end()) k.configs.push_back(c.forward);
  k.exact = Tr::kExact;
  k.arithmetic = Tr::arithmetic;
  k.supports = supports<Tr>;
  k.forward = Tr::forward;
  k.forward_workspace_bytes = Tr::forward_workspace_bytes;
  // Config{}: the traits' kConfigDefault where they list one, else the launcher's default for d.
  if constexpr (HasConfigDefault<Tr>::value)
    k.config_default = [](int d) { return tile_for(Tr::kConfigDefault, d); };
  else if constexpr (HasTiles<Tr>::value)
    k.config_default = [](int d) { return tile_for(Tr::kForwardDefault, d); };
  else
    k.config_default = [](int) { return Tile{}; };
  if constexpr (HasTiles<Tr>::value)
    k.forward_tiles = [](int d) { return tiles_for(Tr::kForwardTiles, tile_for(Tr::kForwardDefault, d), d); };
  else
    k.forward_tiles = [](int) { return std::vector<Tile>{Tile{}}; };
  if constexpr (HasBackward<Tr>::value) {
    k.backward = Tr::backward;
    k.backward_workspace_bytes = Tr::backward_workspace_bytes;
    k.backward_tiles = [](int d) { return tiles_for(Tr::kBackwardTiles, tile_for(Tr::kBackwardDefault, d), d); };
    k.backward_tile = [](Tile forward, int d) {
      for (const ConfigTile& c : Tr::kConfigs)
        if (c.forward == forward && (c.d == 0 || c.d == d) && !(c.backward == Tile{})) return c.backward;
      return tile_for(Tr::kBackwardDefault, d);
    };
  }
  return k;
}

}  // namespace

const std::vector<CudaKernel>& cuda_kernel_table() {
  static const std::vector<CudaKernel> table{row<TiledTraits>(), row<WgmmaTraits>(), row<NaiveTraits>()};
  return table;
}

const CudaKernel* find_cuda_kernel(const std::string& name) {
  for (const CudaKernel& k : cuda_kernel_table())
    if (k.name == name) return &k;
  return nullptr;
}

}  // namespace fc::cuda
