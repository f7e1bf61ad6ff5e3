// The test harness itself, under Catch2 v2 and v3 alike: Approx, a RapidCheck property that holds,
// and one that does not, which must reach Catch as a failure (the `[!shouldfail]` test passes only
// if its body fails), and a case that FC_SKIP_TAGS skips.
#include <cmath>
#include <cstdint>

#include "contract/tensor.hpp"
#include "tests/rapidcheck_catch.hpp"

TEST_CASE("Approx compares within its epsilon", "[cpu]") {
  CHECK(1.0 + 1e-12 == Approx(1.0).epsilon(1e-11));
  CHECK_FALSE(1.0 + 1e-9 == Approx(1.0).epsilon(1e-11));
}

TEST_CASE("rc::prop checks a property that holds", "[cpu]") {
  rc::prop("rounding to fp16 or bf16 is idempotent", [](int32_t mantissa, int8_t exponent) {
    const double x = std::ldexp(double(mantissa), exponent / 8);
    for (fc::DType t : {fc::DType::F16, fc::DType::BF16}) {
      const double r = fc::round_to(t, x);
      RC_ASSERT(fc::round_to(t, r) == r);
    }
  });
}

TEST_CASE("rc::prop reports a property that fails", "[cpu][!shouldfail]") {
  rc::prop("every int is even", [](int x) { RC_ASSERT(x % 2 == 0); });
}

// FC_SKIP_TAGS (tests/catch_session.cpp): the ctest test skip_tags runs this case with and without it.
TEST_CASE("a case with the volume tag runs unless FC_SKIP_TAGS names it", "[cpu][volume]") { CHECK(true); }
