// Replay: a failure's token replays exactly its minimal case (and only it), through the runner and
// through `flashcheck check`; regression files replay before random cases; the coverage check
// fails a budget too small to reach every claimed regime.
#include "tests/catch.hpp"

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "properties/runner.hpp"

namespace {

using namespace fc::props;

std::string token_of(const std::string& replay) { return replay.substr(replay.rfind(' ') + 1); }

// Runs a shell command, returns its stdout and exit status.
std::pair<std::string, int> run(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  while (f && std::fgets(buf.data(), int(buf.size()), f)) out += buf.data();
  const int status = f ? pclose(f) : -1;
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

}  // namespace

TEST_CASE("a replay token reproduces exactly the minimal counterexample", "[cpu]") {
  const fc::Kernel* k = fc::find_kernel("mutant_drop_last_tile");
  REQUIRE(k != nullptr);
  RunOptions opt;
  const LawResult first = run_law(*find_law("reference"), *k, opt);
  REQUIRE_FALSE(first.ok);
  REQUIRE(first.replay.find("--reproduce ") != std::string::npos);
  opt.reproduce = token_of(first.replay);
  opt.seed = 12345;  // the token, not the seed, decides the case
  const LawResult again = run_law(*find_law("reference"), *k, opt);
  CHECK_FALSE(again.ok);
  CHECK(again.cases == 0);  // one case was run, and it failed
  CHECK(again.counterexample == first.counterexample);
  CHECK(again.message == first.message);
  // A token replays only the property it came from.
  CHECK_THROWS(run_law(*find_law("rows_sum"), *k, opt));
}

TEST_CASE("a saved regression file replays before random cases", "[cpu]") {
  RunOptions opt;
  const std::string dir = (std::filesystem::temp_directory_path() / "fc_replay_test").string();
  std::filesystem::remove_all(dir);
  opt.regressions_dir = dir;
  opt.save_failures = true;
  const LawResult saved = run_law(*find_law("reference"), *fc::find_kernel("mutant_scale_twice"), opt);
  REQUIRE(!saved.saved.empty());
  // The saved file replays before random cases: the mutant fails on it at once...
  RunOptions from_file;
  from_file.case_file = saved.saved;
  const LawResult replayed = run_law(*find_law("reference"), *fc::find_kernel("mutant_scale_twice"), from_file);
  CHECK_FALSE(replayed.ok);
  CHECK(replayed.counterexample == saved.counterexample);
  CHECK(replayed.replay.find("--case " + saved.saved) != std::string::npos);
  // ...and the correct kernel passes it.
  const LawResult correct = run_law(*find_law("reference"), *fc::find_kernel("cpu_tiled"), from_file);
  CHECK(correct.ok);
  CHECK(correct.cases == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("flashcheck check prints a replay line that reproduces the failure", "[cpu]") {
  const std::string exe = FC_FLASHCHECK_EXE;
  const auto [out, code] = run(exe + " check --kernel mutant_no_l_rescale --law block_size --seed 3");
  CHECK(code == 1);
  const auto at = out.find("replay: flashcheck ");
  REQUIRE(at != std::string::npos);
  const std::string line = out.substr(at + 19, out.find('\n', at) - at - 19);
  const auto [out2, code2] = run(exe + " " + line);
  CHECK(code2 == 1);
  const auto ce = [](const std::string& s) {
    return s.substr(s.find("minimal counterexample:"), s.find("  replay:") - s.find("minimal counterexample:"));
  };
  CHECK(ce(out2) == ce(out));
  CHECK(run(exe + " check --kernel no_such_kernel").second == 2);
  CHECK(run(exe + " check --kernel cpu_tiled --law no_such_law").second == 2);
  CHECK(run(exe + " check --kernel cpu_tiled --reproduce X").second == 2);
  CHECK(run(exe + " check --kernel cpu_tiled --law rows_sum --seed 1").second == 0);
}

TEST_CASE("the coverage check fails a budget that never reaches a claimed regime", "[cpu]") {
  // rows_sum claims seven regimes; two cases cannot reach them all.
  RunOptions opt;
  opt.cases = 2;
  const LawResult r = run_law(*find_law("rows_sum"), *fc::find_kernel("cpu_tiled"), opt);
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("coverage:") != std::string::npos);
  // With the default budget every claimed regime is reached.
  const LawResult full = run_law(*find_law("rows_sum"), *fc::find_kernel("cpu_tiled"), RunOptions{});
  CHECK(full.ok);
  for (Regime reg : claimed_regimes(*find_law("rows_sum"), *fc::find_kernel("cpu_tiled")))
    CHECK(full.coverage.count(reg));
}
