// rounded_bound (reference/bounds.hpp) as plain data and host-device code: the GPU error model rounds
// each element's bound on the device with the same function the CPU model calls, so both give the
// same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "contract/attention.h"
#include "contract/rounding.h"

namespace fc::ref {

// A float dtype's rounding (round_to) and the two facts of it rounded_bound needs.
struct Rounding {
  int32_t kind;  // kBinary: round_binary(p, e_min, e_max) (F16, BF16); kF32: a float's; kF64: none
  int32_t p, e_min, e_max;
  double u, max_finite;  // unit_roundoff and max_finite of the dtype
};
enum RoundingKind { kBinary = 0, kF32, kF64 };
Rounding rounding_of(DType t);  // a float dtype (bounds_compare.cpp); std::invalid_argument otherwise

FC_HD inline double round_with(const Rounding& t, double x) {
  switch (t.kind) {
    case kBinary: return round_binary(x, t.p, t.e_min, t.e_max);
    case kF32: return double(float(x));
    default: return x;
  }
}

// std::nextafter(x, -inf) and std::nextafter(x, +inf) on the bits.
FC_HD inline double next_down(double x) {
  if (x != x || x == -HUGE_VAL) return x;
  if (x == 0) return -0x1p-1074;
  const uint64_t b = bits_of(x);
  return double_of(x > 0 ? b - 1 : b + 1);
}
FC_HD inline double next_up(double x) { return -next_down(-x); }

// bounds.hpp's rounded_bound, with the dtypes as Roundings.
FC_HD inline double rounded_bound(double r, double e, double err_r, const Rounding& soft, const Rounding& out,
                                  bool soft_round) {
  const double w = e + err_r;
  if (r != r || !(w < HUGE_VAL)) return w;  // NaN stays NaN, a vacuous bound stays vacuous
  // The kernel's value before its last rounding lies in [lo, hi] (outward by the fp64 sums' own
  // rounding); rounding is monotone, so the stored value lies between the roundings of lo and hi.
  double lo = next_down(r - w), hi = next_up(r + w);
  if (soft_round) {
    if (soft.kind == kF64)  // an fp64 rounding moves a value by at most 2^-53 of it
      lo -= 0x1p-53 * fabs(lo) + 0x1p-1074, hi += 0x1p-53 * fabs(hi) + 0x1p-1074;
    else
      lo = round_with(soft, lo), hi = round_with(soft, hi);
  }
  lo = round_with(out, lo), hi = round_with(out, hi);
  // The kernel may overflow to +-inf there: the bound reaches past the largest finite value (finite,
  // so that within_bound accepts that infinity and no other).
  if (fabs(lo) == HUGE_VAL || fabs(hi) == HUGE_VAL) return w + 2 * out.u * out.max_finite;
  // Measured from the exact value (within err_r of r) the stored value is err_r further at most: the
  // bound holds against the exact result and against r alike, so two kernels' bounds add up.
  const double up = hi - r, down = r - lo;
  return (up < down ? down : up) + err_r;
}

}  // namespace fc::ref
