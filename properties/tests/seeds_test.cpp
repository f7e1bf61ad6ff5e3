// Correct kernels pass every law over 20 seeds (labels cpu and long: about two minutes).
#include <catch2/catch.hpp>

#include <sstream>

#include "properties/runner.hpp"

TEST_CASE("check passes every correct cpu kernel over 20 seeds", "[cpu][long]") {
  fc::props::RunOptions opt;
  opt.regressions_dir = fc::props::default_regressions_dir();
  for (const fc::Kernel& k : fc::registry()) {
    if (k.info.mutant || k.info.device != "cpu") continue;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      opt.seed = seed;
      std::ostringstream log;
      const bool ok = fc::props::run_suite(k, opt, log);
      INFO(k.info.name << ", seed " << seed << ":\n" << log.str());
      CHECK(ok);
      if (!ok) std::cerr << log.str();  // the replay line, unwrapped
    }
  }
}
