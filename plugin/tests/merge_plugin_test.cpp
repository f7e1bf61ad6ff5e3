// Merge-state plugins (ABI version 5, fc_kernel.merge) end to end: the example merge kernel passes the
// merge laws, its planted exp(-inf - -inf) fails merge_empty at 20 seeds, it runs in flashcheck's
// process whatever --isolation says; a version-4 attention plugin still loads and runs.
#include "tests/catch.hpp"

#include <string>

#include "plugin/tests/run_cli.hpp"

using namespace fc::plugin::testing;

TEST_CASE("check --plugin: the example merge kernel passes the merge laws and no attention law applies", "[cpu]") {
  const Ran r = run_cli({"check", "--plugin", plugin_path("plugin_merge_none"), "--isolation", "none", "--seed", "3"});
  CAPTURE(r.out, r.err);
  CHECK(r.code == 0);
  for (const char* law : {"merge_identity", "merge_empty", "merge_associativity", "merge_union"})
    CHECK(r.out.find(std::string("PASS  ") + law) != std::string::npos);
  CHECK(r.out.find("n/a   reference") != std::string::npos);
  CHECK(r.out.find("every law holds") != std::string::npos);
}

TEST_CASE("check --plugin: a merge kernel without the empty-row guard fails merge_empty at 20 seeds", "[cpu][volume]") {
  for (int s = 1; s <= 20; ++s) {
    const std::string seed = std::to_string(s);
    const Ran r =
        run_cli({"check", "--plugin", plugin_path("plugin_merge_nan_empty"), "--isolation", "none", "--seed", seed});
    CAPTURE(seed, r.out, r.err);
    CHECK(r.code == 1);
    CHECK(r.out.find("FAIL  merge_empty") != std::string::npos);
  }
}

TEST_CASE("check and kernels --plugin: a merge kernel runs in flashcheck's process without --isolation none", "[cpu]") {
  const Ran r = run_cli({"check", "--plugin", plugin_path("plugin_merge_none"), "--law", "merge_union"});
  CAPTURE(r.out, r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("PASS  merge_union") != std::string::npos);
  const Ran k = run_cli({"kernels", "--plugin", plugin_path("plugin_merge_none")});
  CAPTURE(k.out, k.err);
  CHECK(k.code == 0);
  CHECK(k.out.find("(merges states)") != std::string::npos);
}

TEST_CASE("check --plugin: a version-4 plugin still loads and passes", "[cpu]") {
  const Ran r = run_cli({"check", "--plugin", plugin_path("plugin_cpu_abi4"), "--law", "reference", "--cases", "20",
                         "--seed", "2", "--regressions", no_regressions()});
  CAPTURE(r.out, r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("PASS  reference") != std::string::npos);
}
