// A double rounded to a narrower IEEE binary format, ties to even, in one step: the host's round_to
// (contract/tensor.cpp) and the GPU error model's last rounding (reference/rounded_bound.hpp) share it,
// so that both give the same bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "contract/attention.h"

namespace fc {

FC_HD inline uint64_t bits_of(double x) {
#ifdef __CUDA_ARCH__
  return uint64_t(__double_as_longlong(x));
#else
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}
FC_HD inline double double_of(uint64_t b) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double(static_cast<long long>(b));
#else
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

// x rounded to p significant bits with exponent range [e_min, e_max] (IEEE binary with subnormals;
// e_min is the smallest normal's exponent), ties to even: fp16 (p = 11) and bf16 (p = 8). On the bits:
// x = m·2^(e-52) with m the 53-bit significand; the kept bits are multiples of 2^lsb, so m rounds to an
// integer number of 2^(lsb - e + 52) (`shift`) by the integer rule for ties to even, and the result
// r·2^lsb is exact in a double.
FC_HD inline double round_binary(double x, int p, int e_min, int e_max) {
  const uint64_t bits = bits_of(x);
  const int biased = int((bits >> 52) & 0x7ff);
  if (biased == 0x7ff || (bits << 1) == 0) return x;  // NaN, ±inf, ±0
  if (biased == 0) return copysign(0.0, x);           // a double subnormal: far below every 16-bit type's
  const int e = biased - 1023;                        // x = ±1.f·2^e
  const uint64_t m = (bits & ((uint64_t(1) << 52) - 1)) | (uint64_t(1) << 52);
  const int lsb = e - p + 1 > e_min - p + 1 ? e - p + 1 : e_min - p + 1;  // the last kept bit's weight exponent
  const int shift = lsb - e + 52;                                         // significand bits dropped
  if (shift <= 0) return x;                                               // fits as it is
  uint64_t r = 0;
  if (shift <= 53) {
    r = m >> shift;
    const uint64_t rem = m & ((uint64_t(1) << shift) - 1), half = uint64_t(1) << (shift - 1);
    r += rem > half || (rem == half && (r & 1));
  }  // shift > 53: |x| < 2^(lsb-1), half the smallest step: rounds to 0
  const double q = copysign(double(r) * double_of(uint64_t(lsb + 1023) << 52), x);
  if (e < e_max) return q;  // |q| <= 2^(e+1) <= 2^e_max: finite
  const double max_finite = ldexp(2.0 - ldexp(1.0, 1 - p), e_max);
  return fabs(q) > max_finite ? copysign(HUGE_VAL, x) : q;
}

}  // namespace fc
