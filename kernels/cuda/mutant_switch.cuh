// The run-time fault of a CUDA mutant to the compile-time row of kCudaMutants that plants it
// (mutant_traits.hpp), in the style of static_switch.cuh: a site's launcher instantiates its own
// mutants only. Host code of the .cu files.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <iterator>
#include <utility>

#include "kernels/cuda/mutant_traits.hpp"
#include "kernels/cuda/static_switch.cuh"

namespace fc::cuda {
namespace detail {

template <FaultSite kSite, size_t I, class F>
bool try_mutant(Fault f, const Problem& p, F& fn, cudaError_t& e) {
  constexpr CudaMutant m = kCudaMutants[I];
  if constexpr (m.site == kSite) {
    if (m.fault == f) {
      e = p.dtype == m.dtype && p.d == m.d ? fn(IndexTag<I>{}) : cudaErrorInvalidValue;
      return true;
    }
  }
  return false;
}

template <FaultSite kSite, class F, size_t... I>
cudaError_t mutant_match(Fault f, const Problem& p, F& fn, std::index_sequence<I...>) {
  cudaError_t e = cudaErrorInvalidValue;
  (void)(try_mutant<kSite, I>(f, p, fn, e) || ...);
  return e;
}

}  // namespace detail

// fn(IndexTag<i>) for the mutant i of site kSite whose fault is f, when p has its dtype and head dim;
// cudaErrorInvalidValue otherwise. fn reads the row as `constexpr CudaMutant m = kCudaMutants[i]`.
template <FaultSite kSite, class F>
cudaError_t mutant_switch(Fault f, const Problem& p, F&& fn) {
  return detail::mutant_match<kSite>(f, p, fn, std::make_index_sequence<std::size(kCudaMutants)>{});
}

// The storage type of a mutant's dtype.
template <size_t I>
using MutantStorage = typename StorageOf<kCudaMutants[I].dtype>::type;

}  // namespace fc::cuda
