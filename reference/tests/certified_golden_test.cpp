// The seeds' worked examples through the certified oracle: its values at the printed precision,
// and its bounds finite and non-negative on them.
#include <cmath>

#include "golden_checks.hpp"
#include "reference/certified.hpp"

namespace fc::ref {
namespace {

Result64 run_certified(const Problem& p, const Tensors64& in) {
  const Certified c = certified(p, in);
  for (const auto* e : {&c.err.o, &c.err.lse, &c.err.d_q, &c.err.d_k, &c.err.d_v})
    for (double x : *e) CHECK((std::isfinite(x) && x >= 0));
  return c.value;
}

TEST_CASE("certified forward: the seeds' 3x2 example", "[cpu]") { seeds::check_three_by_two(run_certified); }

TEST_CASE("certified forward: the seeds' softmax rows", "[cpu]") { seeds::check_softmax_rows(run_certified); }

TEST_CASE("certified forward: row [101,100,102] pours o = [0.910, 0.755]", "[cpu]") {
  seeds::check_row101_pour(run_certified);
}

TEST_CASE("certified backward: resurrection P2 = e^(100-102)/1.5032 = 0.090", "[cpu]") {
  seeds::check_resurrection(run_certified);
}

}  // namespace
}  // namespace fc::ref
