// The test comparators pass what they should and fail what they should: NaN, mismatched
// infinities, differences where the scale is 0, and errors just above the threshold.
#include "tests/catch.hpp"
#include <cmath>

#include "kernels/tests/test_util.hpp"

using fc::test::kInf;
using fc::test::normwise_error;
using fc::test::scaled_error;

TEST_CASE("scaled_error measures |x - ref| / scale and never passes NaN", "[cpu]") {
  const std::vector<double> ref{1.0, -2.0, 0.0, -kInf}, scale{1.0, 4.0, 0.0, 1.0};  // (4)
  CHECK(scaled_error(ref, ref, scale) == 0.0);
  CHECK(scaled_error({1.5, -2.0, 0.0, -kInf}, ref, scale) == 0.5);
  CHECK(scaled_error({1.0, -1.0, 0.0, -kInf}, ref, scale) == 0.25);
  CHECK(scaled_error({1.0, -2.0, 1e-300, -kInf}, ref, scale) == kInf);  // scale 0: exact only
  CHECK(scaled_error({std::nan(""), -2.0, 0.0, -kInf}, ref, scale) == kInf);
  CHECK(scaled_error({1.0, -2.0, 0.0, 5.0}, ref, scale) == kInf);  // -inf expected, finite given
  CHECK(scaled_error({1.0, -2.0, 0.0, kInf}, ref, scale) == kInf);
  CHECK(scaled_error({1.0}, ref, scale) == kInf);                                     // size mismatch
  CHECK(scaled_error({1.0, std::nan("")}, {1.0, std::nan("")}, {1.0, 1.0}) == kInf);  // NaN != NaN
}

TEST_CASE("normwise_error measures ||x - ref|| / ||ref|| and never passes non-finite values", "[cpu]") {
  CHECK(normwise_error({3.0, 4.0}, {3.0, 4.0}) == 0.0);
  CHECK(normwise_error({3.0, 5.0}, {3.0, 4.0}) == Approx(0.2).epsilon(1e-15));
  CHECK(normwise_error({1e-300, 1e-300}, {1e-300, 2e-300}) == Approx(0.5 / std::sqrt(1.25)).epsilon(1e-15));
  CHECK(normwise_error({0.0, 0.0}, {0.0, 0.0}) == 0.0);
  CHECK(normwise_error({1e-300, 0.0}, {0.0, 0.0}) == kInf);
  CHECK(normwise_error({std::nan(""), 4.0}, {3.0, 4.0}) == kInf);
  CHECK(normwise_error({kInf, 4.0}, {kInf, 4.0}) == kInf);
  CHECK(normwise_error({3.0}, {3.0, 4.0}) == kInf);
}
