// The plugin path on a GPU: the CUDA example kernel passes every law through device memory, and one
// that leaves the CUDA context broken (an illegal address) is a failing case with a minimal
// counterexample and a replay line, after which the suite goes on with a fresh worker.
#include "tests/catch.hpp"
#include <regex>
#include <sstream>

#include "plugin/executor.hpp"
#include "plugin/tests/run_cli.hpp"

using namespace fc::plugin::testing;

TEST_CASE("check --plugin: the CUDA example kernel passes every law", "[gpu]") {
  // 20 cases a law: 30 % of a GPU kernel's cases are multi-tile, so every law reaches several, while
  // the default count's certified oracle at those sizes takes minutes.
  const Ran r = run_cli({"check", "--plugin", plugin_path("plugin_cuda_none"), "--cases", "20", "--seed", "11"});
  CAPTURE(r.out, r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("FAIL") == std::string::npos);
  CHECK(r.out.find("(cuda)") != std::string::npos);
}

// Every law fails; shrinking each failure restarts the worker once per faulting candidate, and stops
// after --shrink-faults of them (8 by default), saying so.
TEST_CASE("check --plugin: an illegal address is a failing case and the suite goes on", "[gpu]") {
  const Ran r = run_cli({"check", "--plugin", plugin_path("plugin_cuda_illegal"), "--cases", "20", "--seed", "5",
                         "--regressions", no_regressions()});
  CAPTURE(r.out, r.err);
  CHECK(r.code == 1);
  CHECK(r.out.find("illegal memory access") != std::string::npos);
  CHECK(r.out.find("the CUDA context is broken") != std::string::npos);
  CHECK(r.out.find("shrinking stopped after 8 faulting candidates (--shrink-faults 8)") != std::string::npos);
  CHECK(r.out.find("the worker was restarted") != std::string::npos);
  // Every applicable law ran (and failed on its own minimal case), not only the first.
  int fails = 0;
  for (size_t at = r.out.find("FAIL  "); at != std::string::npos; at = r.out.find("FAIL  ", at + 1)) ++fails;
  CHECK(fails >= 10);
  const std::string replay = replay_of(r.out);
  std::istringstream in(replay);
  std::vector<std::string> args;
  for (std::string w; in >> w;) args.push_back(w);
  REQUIRE(args.size() > 3);
  args.erase(args.begin());
  const Ran again = run_cli(args);
  CHECK(again.code == 1);
  CHECK(again.out.find("illegal memory access") != std::string::npos);
}

// Shrunk to the fault's true minimum: the plugin faults for n_k > 3 with any query (a thread of a
// row i < n_q writes to address 16), so one head of d = 1, one query and 4 keys. A fault first met
// in the generator's GPU-sized rows (>= 3 key tiles) shrinks below them to that row.
TEST_CASE("check --plugin: an illegal address shrinks to its minimal case", "[gpu]") {
  const Ran r = run_cli({"check", "--plugin", plugin_path("plugin_cuda_illegal"), "--law", "reference", "--cases", "20",
                         "--seed", "5", "--regressions", no_regressions(), "--shrink-faults", "100"});
  CAPTURE(r.out, r.err);
  CHECK(r.code == 1);
  CHECK(r.out.find("illegal memory access") != std::string::npos);
  CHECK(r.out.find("shrinking stopped") == std::string::npos);
  CHECK(std::regex_search(r.out, std::regex("batch=1 heads_q=1 heads_kv=1 n_q=1 n_k=4 d=1 ")));
}

// The producer mode (plugin/producer.cu): on half the problems a device kernel writes the
// inputs on the plugin's stream after a 1 ms spin, with no host synchronisation before the call. The
// example launched on a stream of its own (FC_FAULT=OTHER_STREAM) reads them before they land and
// fails reference at every one of 20 seeds; the correct example passes it at the same seeds.
TEST_CASE("check --plugin: the producer mode kills a kernel launched on another stream at 20 seeds", "[gpu]") {
  for (int seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    const std::vector<std::string> common = {"--law", "reference", "--cases", "30", "--seed", std::to_string(seed),
                                             "--no-progress", "--regressions", no_regressions()};
    std::vector<std::string> bad = {"check", "--plugin", plugin_path("plugin_cuda_other_stream")};
    bad.insert(bad.end(), common.begin(), common.end());
    const Ran r = run_cli(bad);
    CAPTURE(r.out, r.err);
    CHECK(r.code == 1);
    std::vector<std::string> good = {"check", "--plugin", plugin_path("plugin_cuda_none")};
    good.insert(good.end(), common.begin(), common.end());
    const Ran ok = run_cli(good);
    CAPTURE(ok.out, ok.err);
    CHECK(ok.code == 0);
  }
}

// The second GPU (plugin/executor.hpp): with two devices, half the problems run on device 1
// (tensors, stream and current device). The example that launches on device 0 whatever its tensors
// say (FC_FAULT=DEVICE0) fails reference at every one of 20 seeds there; on one device every call is
// device 0's and the same fault is harmless, which this checks instead (so the second GPU is what
// kills it).
TEST_CASE("check --plugin: the second GPU kills a kernel that launches on device 0", "[gpu]") {
  const bool two = fc::plugin::DeviceStage::count() >= 2;
  for (int seed = 1; seed <= (two ? 20 : 1); ++seed) {
    CAPTURE(seed, two);
    const Ran r = run_cli({"check", "--plugin", plugin_path("plugin_cuda_device0"), "--law", "reference", "--cases",
                           "30", "--seed", std::to_string(seed), "--no-progress", "--regressions", no_regressions()});
    CAPTURE(r.out, r.err);
    CHECK(r.code == (two ? 1 : 0));
  }
}
