// Run-time values to template arguments, over the lists a kernel's traits header declares: a
// launcher is one dtype x head-dim switch and one tile switch, and each instantiates exactly what its
// traits list (the idea of FlashAttention's static_switch.h, written as functions over constexpr
// lists instead of macros). Host code of the .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <iterator>
#include <type_traits>
#include <utility>

#include "contract/attention.h"
#include "kernels/cuda/launchers.hpp"

namespace fc::cuda {

// The device storage type of a 16-bit dtype.
template <DType>
struct StorageOf;
template <>
struct StorageOf<DType::F16> {
  using type = __half;
};
template <>
struct StorageOf<DType::BF16> {
  using type = __nv_bfloat16;
};

// A type as a value, so that a generic lambda can receive it.
template <class T>
struct TypeTag {
  using type = T;
};

template <size_t I>
using IndexTag = std::integral_constant<size_t, I>;

namespace detail {

template <const auto& kList, class Match, class F, size_t... I>
cudaError_t first_match(const Match& match, F& f, std::index_sequence<I...>) {
  cudaError_t e = cudaErrorInvalidValue;
  (void)((match(kList[I]) && (e = f(IndexTag<I>{}), true)) || ...);
  return e;
}

template <const auto& kTiles, int kD, size_t I, class F>
bool try_tile(Tile t, F& f, cudaError_t& e) {
  constexpr auto x = kTiles[I];
  if constexpr (x.d == 0 || x.d == kD) {
    if (x.block_m == t.block_m && x.block_n == t.block_n) {
      e = f(IndexTag<I>{});
      return true;
    }
  }
  return false;
}

template <const auto& kTiles, int kD, class F, size_t... I>
cudaError_t tile_match(Tile t, F& f, std::index_sequence<I...>) {
  cudaError_t e = cudaErrorInvalidValue;
  (void)(try_tile<kTiles, kD, I>(t, f, e) || ...);
  return e;
}

}  // namespace detail

// f(IndexTag<i>) for the first i with kList[i] == v; cudaErrorInvalidValue when v is not listed.
template <const auto& kList, class V, class F>
cudaError_t value_switch(V v, F&& f) {
  return detail::first_match<kList>([v](auto x) { return x == v; }, f, std::make_index_sequence<std::size(kList)>{});
}

// f(TypeTag<T>) for the storage type T of dtype t, over Traits::kDTypes.
template <class Traits, class F>
cudaError_t dtype_switch(DType t, F&& f) {
  return value_switch<Traits::kDTypes>(
      t, [&](auto i) { return f(TypeTag<typename StorageOf<Traits::kDTypes[decltype(i)::value]>::type>{}); });
}

// f(TypeTag<T>, std::integral_constant<int, kD>) for dtype t and head dim d, over Traits::kDTypes and
// Traits::kHeadDims.
template <class Traits, class F>
cudaError_t dtype_dim_switch(DType t, int d, F&& f) {
  return dtype_switch<Traits>(t, [&](auto type) {
    return value_switch<Traits::kHeadDims>(
        d, [&](auto j) { return f(type, std::integral_constant<int, Traits::kHeadDims[decltype(j)::value]>{}); });
  });
}

// f(IndexTag<i>) for the tile kTiles[i] that equals t and is built for head dim kD (its d is kD or 0);
// cudaErrorInvalidValue when there is none. Only the listed tiles are instantiated.
template <const auto& kTiles, int kD, class F>
cudaError_t tile_switch(Tile t, F&& f) {
  return detail::tile_match<kTiles, kD>(t, f, std::make_index_sequence<std::size(kTiles)>{});
}

}  // namespace fc::cuda
