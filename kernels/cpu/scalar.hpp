// Scalar types of the CPU kernels: storage T (Eigen::half, Eigen::bfloat16, float, double), the
// accumulation type A of every dot product and running sum, and the softmax type L (fp32, or fp64
// when A is fp64) of scale·s, m, exp, l and lse. Conversions round exactly once, to nearest-even.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "contract/attention.h"
#include "contract/tensor.hpp"

namespace fc::cpu {

template <class T>
inline constexpr bool is_16bit = std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>;

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, Eigen::half>)
    return DType::F16;
  else if constexpr (std::is_same_v<T, Eigen::bfloat16>)
    return DType::BF16;
  else if constexpr (std::is_same_v<T, float>)
    return DType::F32;
  else {
    static_assert(std::is_same_v<T, double>, "storage types: half, bfloat16, float, double");
    return DType::F64;
  }
}

// The softmax scalar type for accumulation type A.
template <class A>
using Soft = std::conditional_t<std::is_same_v<A, double>, double, float>;

// x rounded once to To (round-to-nearest-even, IEEE overflow to inf, subnormals kept).
template <class To, class From>
inline To cvt(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (is_16bit<From>) {
    return cvt<To>(static_cast<float>(x));  // 16-bit -> float is exact
  } else if constexpr (is_16bit<To>) {
    if constexpr (std::is_same_v<From, float>) return To(x);  // Eigen's float -> 16-bit is RNE
    // double -> float -> 16-bit would round twice; round_to rounds the double once, the result is
    // then exact in float and in To.
    else
      return To(static_cast<float>(round_to(dtype_of<To>(), static_cast<double>(x))));
  } else {
    return static_cast<To>(x);
  }
}

// acc + a·b in A with one rounding per step when A is 16-bit (the product of two 16-bit values is
// exact in float, so float(acc) + a·b followed by one conversion models an fp16-accumulating MMA
// step); plain A arithmetic otherwise.
template <class A>
inline A mac(A acc, A a, A b) {
  if constexpr (is_16bit<A>)
    return A(static_cast<float>(acc) + static_cast<float>(a) * static_cast<float>(b));
  else
    return acc + a * b;
}

// exp and log in the softmax type L (float or double).
struct Exp {
  float operator()(float x) const { return std::exp(x); }
  double operator()(double x) const { return std::exp(x); }
};
struct Log {
  float operator()(float x) const { return std::log(x); }
  double operator()(double x) const { return std::log(x); }
};
struct Tanh {
  float operator()(float x) const { return std::tanh(x); }
  double operator()(double x) const { return std::tanh(x); }
};

// Call f.template operator()<T, A>() for storage dtype `storage` and accumulation dtype `accum`.
// F64 storage always accumulates in fp64 (the oracle-grade configuration); otherwise accum selects
// fp32 (default), fp16 or fp64. BF16 accumulation is not offered.
template <class F>
void with_types(DType storage, DType accum, F&& f) {
  auto with_acc = [&]<class T>() {
    if constexpr (std::is_same_v<T, double>) {
      f.template operator()<T, double>();
    } else {
      if (accum == DType::F64)
        f.template operator()<T, double>();
      else if (accum == DType::F32)
        f.template operator()<T, float>();
      else if (accum == DType::F16)
        f.template operator()<T, Eigen::half>();
      else
        throw std::invalid_argument("cpu kernels: accumulation must be F32, F16 or F64");
    }
  };
  switch (storage) {
    case DType::F16: return with_acc.template operator()<Eigen::half>();
    case DType::BF16: return with_acc.template operator()<Eigen::bfloat16>();
    case DType::F32: return with_acc.template operator()<float>();
    case DType::F64: return with_acc.template operator()<double>();
    case DType::I32: break;
    case DType::BOOL: break;
  }
  throw std::invalid_argument("cpu kernels: storage must be F16, BF16, F32 or F64");
}

}  // namespace fc::cpu
