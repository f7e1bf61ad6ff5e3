// The error model (reference/bounds.hpp) on hand-made values: the comparator's exact treatment of
// non-finite values, the FlashAttention rule, and the bound of a problem small enough to check by
// hand. Its tests against real kernels are properties/tests/bounds_kernels_test.cpp.
#include "tests/catch.hpp"

#include <cmath>
#include <limits>

#include "reference/bounds.hpp"

namespace {

using namespace fc;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("within_bound treats non-finite values exactly", "[cpu]") {
  using ref::within_bound;
  CHECK(within_bound({1.0}, {1.0}, {0.0}, DType::F32).ok);
  CHECK(within_bound({1.5}, {1.0}, {0.5}, DType::F32).ok);
  CHECK_FALSE(within_bound({1.5001}, {1.0}, {0.5}, DType::F32).ok);  // just past the bound
  CHECK_FALSE(within_bound({kNaN}, {1.0}, {kInf}, DType::F32).ok);   // NaN is never "within"
  CHECK_FALSE(within_bound({1.0}, {1.0}, {kNaN}, DType::F32).ok);    // a NaN bound fails
  CHECK_FALSE(within_bound({1.0}, {kNaN}, {1.0}, DType::F32).ok);    // NaN expected
  CHECK(within_bound({kNaN}, {kNaN}, {0.0}, DType::F32).ok);
  CHECK(within_bound({-kInf}, {-kInf}, {0.0}, DType::F32).ok);       // lse of an empty row
  CHECK_FALSE(within_bound({kInf}, {-kInf}, {0.0}, DType::F32).ok);  // wrong sign
  CHECK_FALSE(within_bound({-3.0e38}, {-kInf}, {0.0}, DType::F32).ok);
  CHECK(within_bound({kInf}, {65000.0}, {600.0}, DType::F16).ok);  // overflow the bound allows
  CHECK_FALSE(within_bound({kInf}, {65000.0}, {1.0}, DType::F16).ok);
  CHECK_FALSE(within_bound({-kInf}, {65000.0}, {600.0}, DType::F16).ok);
  // A bound past the whole range admits an overflow of either sign (the fuzz campaign's F16 d_q at
  // huge scores: reference 9.5e-7, bound inf, kernel -inf): reference - bound <= -max.
  CHECK(within_bound({-kInf}, {9.5e-7}, {kInf}, DType::F16).ok);
  CHECK(within_bound({-kInf}, {1.0}, {65505.0}, DType::F16).ok);
  CHECK_FALSE(within_bound({-kInf}, {1.0}, {65000.0}, DType::F16).ok);
  CHECK_FALSE(within_bound({1.0, 2.0}, {1.0}, {1.0}, DType::F16).ok);  // size mismatch
}

TEST_CASE("fa_rule holds within twice the baseline's error and fails beyond", "[cpu]") {
  const std::vector<double> ref_v{1.0, -2.0, 0.5}, err{0, 0, 0};
  const std::vector<double> base{1.01, -2.0, 0.5};  // baseline max error 0.01
  const double noise = 4 * 0x1p-11 * (2.0 + 0.3);
  CHECK(ref::fa_rule({1.0, -2.02, 0.5}, base, ref_v, err, DType::F16).holds);
  CHECK(ref::fa_rule({1.0, -2.02 - noise * 0.99, 0.5}, base, ref_v, err, DType::F16).holds);
  CHECK_FALSE(ref::fa_rule({1.0, -2.02 - noise * 1.01, 0.5}, base, ref_v, err, DType::F16).holds);
  CHECK_FALSE(ref::fa_rule({kNaN, -2.0, 0.5}, base, ref_v, err, DType::F16).holds);
}

TEST_CASE("error bounds of a hand-checked problem", "[cpu]") {
  // One query, two keys, fp16 storage: every term of the model is visible here.
  const Problem p{.n_q = 2, .n_k = 2, .d = 1, .dtype = DType::F16, .mask = Mask::CausalTopLeft, .scale = 1};
  ref::Tensors64 in{{1.0, 0.5}, {1.0, 0.0}, {2.0, -1.0}, {1.0, 1.0}};
  const ref::Certified c = ref::certified(p, in);
  ref::Precision fp16;
  fp16.storage = fp16.p_dtype = DType::F16;
  fp16.block_n = 1;
  const ref::Bounds B = ref::error_bounds(p, in, c, fp16);
  // Row 0 sees one key: o = v_0 = 2; the weight is exp(0) = 1 exactly, so only roundings of
  // magnitude |v| remain, the largest being P's (u_p = 2^-11) and the output's (u_out = 2^-11).
  CHECK(B.o[0] >= 2 * 0x1p-11 * 2.0);
  CHECK(B.o[0] <= 3 * 0x1p-11 * 2.0);
  // Row 1 sees both keys: the bound grows with the spread of v about o but stays a few ulps.
  CHECK(B.o[1] > B.o[0] * 0.5);
  CHECK(B.o[1] < 8 * 0x1p-11 * 2.0);
  // bf16 P and storage loosen it by 2^3; tighter accumulation does not change P's share.
  ref::Precision bf16 = fp16;
  bf16.storage = bf16.p_dtype = DType::BF16;
  const ref::Bounds Bb = ref::error_bounds(p, in, c, bf16);
  CHECK(Bb.o[0] > 6 * B.o[0]);
  // Gradients: present, finite, non-negative.
  for (const auto* v : {&B.d_q, &B.d_k, &B.d_v})
    for (double x : *v) CHECK((std::isfinite(x) && x >= 0));
}
