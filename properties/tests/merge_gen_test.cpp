// The merge generator reaches what the merge laws claim to cover: 1 and 16 partials, GQA-decode shapes
// (rows and heads both > 1), empty partials and rows of only empty partials, lse beyond +-1e30 and
// below -1e4, strided views, every dtype the kernel merges; and every draw is valid input.
#include "tests/catch.hpp"
#include <cmath>
#include <set>

#include "properties/merge_gen.hpp"

TEST_CASE("draw_merge covers the merge laws' shapes and values", "[cpu]") {
  const fc::Kernel& k = *fc::find_kernel("cpu_merge");
  std::mt19937_64 rng(1);
  std::set<int32_t> partials;
  std::set<fc::DType> dtypes;
  int gqa = 0, strided = 0, empty = 0, empty_rows = 0, huge = 0, far_below = 0;
  for (int n = 0; n < 400; ++n) {
    const fc::MergeInputs in = fc::props::draw_merge(k, rng);
    INFO("draw " << n << ": " << fc::validate(in));
    REQUIRE(fc::validate(in).empty());
    partials.insert(in.p.partials), dtypes.insert(in.p.dtype);
    gqa += in.p.rows > 1 && in.p.heads > 1;
    strided += in.strided();
    for (int64_t r = 0; r < in.p.rows; ++r)
      for (int64_t h = 0; h < in.p.heads; ++h) {
        bool all = true;
        for (int64_t q = 0; q < in.p.partials; ++q) {
          const double l = in.lse.get(fc::merge_lse_index(in.p, q, h, r));
          all = all && std::isinf(l);
          empty += std::isinf(l);
          huge += std::fabs(l) > 1e30 && std::isfinite(l);
          far_below += l < -1e4 && std::isfinite(l);
        }
        empty_rows += all;
      }
  }
  CHECK(partials.count(1));
  CHECK(partials.count(16));
  CHECK(dtypes.size() == 3);
  CHECK(gqa > 50);
  CHECK(strided > 50);
  CHECK(empty > 100);
  CHECK(empty_rows > 10);
  CHECK(huge > 100);
  CHECK(far_below > 100);
}
