// Correct kernels pass every law over 20 seeds (labels cpu and long). One TEST_CASE per kernel so
// that ctest -j runs them side by side; a new correct CPU kernel gets its own TEST_CASE here.
#include "tests/catch.hpp"

#include <iostream>
#include <sstream>

#include "properties/runner.hpp"

namespace {

void twenty_seeds(const fc::Kernel& k) {
  fc::props::RunOptions opt;
  opt.regressions_dir = fc::props::default_regressions_dir();
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    opt.seed = seed;
    std::ostringstream log;
    const bool ok = fc::props::run_suite(k, opt, log);
    INFO(k.info.name << ", seed " << seed << ":\n" << log.str());
    CHECK(ok);
    if (!ok) std::cerr << log.str();  // the replay line, unwrapped
  }
}

}  // namespace

TEST_CASE("check passes cpu_tiled over 20 seeds", "[cpu][long]") {
  const fc::Kernel* k = fc::find_kernel("cpu_tiled");
  REQUIRE(k != nullptr);
  twenty_seeds(*k);
}

TEST_CASE("check passes cpu_naive over 20 seeds", "[cpu][long]") {
  const fc::Kernel* k = fc::find_kernel("cpu_naive");
  REQUIRE(k != nullptr);
  twenty_seeds(*k);
}
