// The exact sum of finite doubles, rounded once into an MPFR value: a fixed-point accumulator over
// the whole double range (Kulisch's long accumulator). The certified oracle's MPFR path uses it for
// each score's dot product (certified_mp.cpp): the products split without error into two doubles
// each, so 2d exact additions and one rounding replace 3d MPFR operations. Hand-written because
// neither MPFR nor GMP adds a double to an integer without a conversion per term.
#pragma once

#include <gmp.h>
#include <mpfr.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

namespace fc::ref {

class ExactSum {
 public:
  // Every finite double is m·2^e with an integer 0 <= m < 2^53 and e in [-1074, 971]: its bits lie
  // in [0, 2098) counted from 2^-1074. They are held as 32-bit digits in int64 slots: one addition
  // puts below 2^32 into each of three slots, so up to 2^30 additions between two roundings cannot
  // overflow a slot (a dot product adds two per term).
  static constexpr int kDigits = 66 + 3;  // 2098 bits, and room for the carries above

  ExactSum() { slot_.fill(0); }

  // x finite (a NaN or infinity is the caller's to keep out).
  void add(double x) {
    const uint64_t bits = std::bit_cast<uint64_t>(x);
    const int biased = int((bits >> 52) & 0x7ff);
    uint64_t m = bits & ((uint64_t(1) << 52) - 1);
    if (biased != 0) m |= uint64_t(1) << 52;
    if (m == 0) return;
    const int pos = biased == 0 ? 0 : biased - 1;  // the exponent above 2^-1074 of m's lowest bit
    const int i = pos >> 5;
    const unsigned __int128 w = static_cast<unsigned __int128>(m) << (pos & 31);  // < 2^84
    const int64_t d0 = int64_t(uint32_t(w)), d1 = int64_t(uint32_t(w >> 32)), d2 = int64_t(uint32_t(w >> 64));
    if (bits >> 63) {
      slot_[size_t(i)] -= d0, slot_[size_t(i) + 1] -= d1, slot_[size_t(i) + 2] -= d2;
    } else {
      slot_[size_t(i)] += d0, slot_[size_t(i) + 1] += d1, slot_[size_t(i) + 2] += d2;
    }
    lo_ = std::min(lo_, i), hi_ = std::max(hi_, i + 2);
  }

  // The sum rounded once to out's precision (round to nearest), +0 for an empty or zero sum; the
  // accumulator is empty afterwards. z: scratch, initialised by the caller.
  void round_into(mpfr_ptr out, mpz_ptr z) {
    if (hi_ < 0) {
      mpfr_set_zero(out, 1);
      return;
    }
    // Carries upward: digit i keeps the low 32 bits of slot i plus the carry; the carry is the rest
    // (an arithmetic shift: a negative slot borrows). Every slot is below 2^62 in magnitude, so the
    // carry leaving the top is 0 or -1 (the sign) once two more digits have taken it.
    int64_t carry = 0;
    const int top = std::min(hi_ + 2, kDigits - 1);
    for (int i = lo_; i <= top; ++i) {
      const int64_t v = slot_[size_t(i)] + carry;
      digit_[size_t(i)] = uint32_t(v);
      carry = v >> 32;
    }
    const bool negative = carry < 0;
    if (negative) {  // two's complement over [lo_, top]: invert and add one
      uint64_t c = 1;
      for (int i = lo_; i <= top; ++i) {
        const uint64_t v = uint64_t(~digit_[size_t(i)]) + c;
        digit_[size_t(i)] = uint32_t(v);
        c = v >> 32;
      }
    }
    mpz_import(z, size_t(top - lo_ + 1), -1, sizeof(uint32_t), 0, 0, &digit_[size_t(lo_)]);
    mpfr_set_z_2exp(out, z, mpfr_exp_t(32 * lo_ - 1074), MPFR_RNDN);
    if (negative) mpfr_neg(out, out, MPFR_RNDN);  // exact
    clear();
  }

  // Empties the accumulator.
  void clear() {
    if (hi_ >= 0) std::fill(slot_.begin() + lo_, slot_.begin() + std::min(hi_ + 2, kDigits - 1) + 1, 0);
    lo_ = kDigits, hi_ = -1;
  }

 private:
  std::array<int64_t, kDigits> slot_;
  std::array<uint32_t, kDigits> digit_{};
  int lo_ = kDigits, hi_ = -1;  // the slots touched since the last round_into
};

}  // namespace fc::ref
