// The dtype table's derived lists: the reading order of messages, the sweep's dtypes and order, the
// kernel floats and the ABI's floats, each against a list written out by hand.
#include "tests/catch.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "contract/attention.h"
#include "contract/tensor.hpp"

using fc::DType;
using fc::HostTensor;

TEST_CASE("the dtype table's lists keep the sweep's order and select what they name", "[cpu]") {
  using V = std::vector<DType>;
  CHECK(fc::sweep_dtypes() == V{DType::F16, DType::BF16, DType::F32});
  CHECK(fc::kernel_floats() == V{DType::F32, DType::F16, DType::BF16});  // the table's order
  CHECK(fc::dtypes_in_order(fc::abi_float) == V{DType::F16, DType::BF16, DType::F32, DType::F64});
  CHECK(fc::dtypes_in_order([](DType) { return true; }) ==
        V{DType::F16, DType::BF16, DType::F32, DType::F64, DType::I32, DType::BOOL});
  CHECK(fc::dtypes_in_order([](DType) { return false; }).empty());
  CHECK_FALSE(fc::kernel_float(DType::F64));
  CHECK_FALSE(fc::kernel_float(DType::BOOL));
  CHECK_FALSE(fc::abi_float(DType::I32));
  CHECK_FALSE(fc::kernel_float(fc::kDtypeAsQ));  // no row: not a dtype
  CHECK_FALSE(fc::abi_float(fc::kDtypeAsQ));
}

TEST_CASE("dtype_names joins a list for a message", "[cpu]") {
  CHECK(fc::dtype_names(fc::is_float) == "F16, BF16, F32 or F64");
  CHECK(fc::dtype_names(fc::kernel_float) == "F16, BF16 or F32");
  CHECK(fc::dtype_names([](DType t) { return t == DType::BOOL; }) == "BOOL");
  CHECK(fc::dtype_names([](DType t) { return t == DType::BF16 || t == DType::I32; }) == "BF16 or I32");
  CHECK(fc::dtype_names([](DType) { return false; }).empty());
}

// HostTensor's 16-bit element access decodes and encodes the bits itself (contract/tensor.hpp, .cpp):
// against Eigen's half and bfloat16 conversions on every bit pattern, and set() against rounding to
// the dtype then converting with Eigen, on random doubles across the 16-bit ranges and their
// midpoints. A NaN reads as a quiet NaN with its sign and payload and is stored as the canonical one.
TEST_CASE("16-bit elements read and write the bits Eigen's conversions give", "[cpu]") {
  for (DType t : {DType::F16, DType::BF16}) {
    CAPTURE(fc::dtype_name(t));
    HostTensor x(t, {1});
    int nan_patterns = 0;
    for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
      const uint16_t b = uint16_t(bits);
      std::memcpy(x.bytes.data(), &b, 2);
      const double eigen = t == DType::F16 ? double(float(Eigen::numext::bit_cast<Eigen::half>(b)))
                                           : double(float(Eigen::numext::bit_cast<Eigen::bfloat16>(b)));
      const double got = x.get(0);
      CAPTURE(bits);
      REQUIRE(std::bit_cast<uint64_t>(got) == std::bit_cast<uint64_t>(eigen));
      // Written back: the same bits, but for a NaN, which becomes the canonical quiet NaN of its sign.
      x.set(0, got);
      uint16_t back = 0;
      std::memcpy(&back, x.bytes.data(), 2);
      if (std::isnan(got)) {
        ++nan_patterns;
        const uint16_t canonical = t == DType::F16 ? Eigen::numext::bit_cast<uint16_t>(Eigen::half(got))
                                                   : Eigen::numext::bit_cast<uint16_t>(Eigen::bfloat16(got));
        REQUIRE(back == canonical);
      } else {
        REQUIRE(back == b);
      }
    }
    CHECK(nan_patterns == (t == DType::F16 ? 2 * 1023 : 2 * 127));
  }
  std::mt19937_64 rng(16);
  for (DType t : {DType::F16, DType::BF16}) {
    HostTensor x(t, {1});
    for (int i = 0; i < 200000; ++i) {
      // Exponents from below the subnormals to past the largest finite value; every fifth value the
      // midpoint of two neighbours in t (a tie), subnormal ones included.
      const bool half = t == DType::F16;
      const int e = std::uniform_int_distribution<int>(half ? -27 : -136, half ? 17 : 129)(rng);
      double v = std::ldexp(std::uniform_real_distribution<double>(1, 2)(rng), e) * (rng() & 1 ? -1 : 1);
      if (i % 5 == 0) {
        int ex = 0;
        std::frexp(v, &ex);  // |v| in [2^(ex-1), 2^ex): t's step there, or its subnormal step
        const double step = std::ldexp(1.0, std::max(ex - (half ? 11 : 8), half ? -24 : -133));
        v = std::copysign((std::floor(std::fabs(v) / step) + 0.5) * step, v);
      }
      x.set(0, v);
      uint16_t got = 0;
      std::memcpy(&got, x.bytes.data(), 2);
      const double r = fc::round_to(t, v);
      const uint16_t want = t == DType::F16 ? Eigen::numext::bit_cast<uint16_t>(Eigen::half(float(r)))
                                            : Eigen::numext::bit_cast<uint16_t>(Eigen::bfloat16(float(r)));
      CAPTURE(v);
      REQUIRE(got == want);
    }
  }
}
