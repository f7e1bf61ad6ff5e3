// The suite bites: `flashcheck check`'s default budget (100 cases per law, seed 1) kills every
// registered mutant, while the fault-free form of the mutants' kernel passes every law.
#include "tests/catch.hpp"

#include <sstream>

#include "kernels/mutants/faulty_tiled.hpp"
#include "properties/runner.hpp"

namespace {

// The first law that fails on k, or "" when every law holds.
std::string first_failing_law(const fc::Kernel& k, const fc::props::RunOptions& opt) {
  for (const fc::props::Law& law : fc::props::laws()) {
    const fc::props::LawResult r = fc::props::run_law(law, k, opt);
    if (r.applies && !r.ok) return law.id + ": " + r.message;
  }
  return "";
}

}  // namespace

TEST_CASE("check kills every mutant within the default budget", "[cpu]") {
  const fc::props::RunOptions opt;  // the defaults of `flashcheck check`: 100 cases, seed 1
  int mutants = 0;
  for (const fc::Kernel& k : fc::registry()) {
    if (!k.info.mutant) continue;
    ++mutants;
    const std::string killed = first_failing_law(k, opt);
    INFO(k.info.name << " (" << k.info.description << ")");
    CHECK_FALSE(killed.empty());
    if (!killed.empty()) std::cout << k.info.name << " killed by " << killed.substr(0, killed.find('\n')) << "\n";
  }
  CHECK(mutants >= 12);
}

TEST_CASE("check passes the mutants' kernel without its fault", "[cpu]") {
  const fc::Kernel clean = fc::mutants::make_faulty_kernel(fc::mutants::Fault::None, "faulty_tiled_none", "no fault");
  fc::props::RunOptions opt;
  for (uint64_t seed : {1, 2, 3}) {
    opt.seed = seed;
    const std::string failed = first_failing_law(clean, opt);
    INFO("seed " << seed << ": " << failed);
    CHECK(failed.empty());
  }
}
