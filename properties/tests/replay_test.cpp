// Replay: a failure's token replays exactly its minimal case (and only it), through the runner and
// through `flashcheck check`; regression files replay before random cases; the coverage check
// fails a budget too small to reach every claimed regime.
#include "tests/catch.hpp"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "io/attention_io.hpp"
#include "io/safetensors.hpp"
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
  CHECK_THROWS(run_law(*find_law("lse_bracket"), *k, opt));
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
  CHECK(run(exe + " check --kernel cpu_tiled --law lse_bracket --seed 1").second == 0);
}

TEST_CASE("the coverage check tops up a short regime and fails one the law never reaches", "[cpu]") {
  const fc::Kernel& k = *fc::find_kernel("cpu_tiled");
  const Law& law = *find_law("lse_bracket");
  const std::vector<Regime> claimed = claimed_regimes(law, k);
  REQUIRE(claimed.size() >= 5);
  // Two cases cannot reach five regimes: the runner tops each up to its share of the budget.
  RunOptions opt;
  opt.cases = 2;
  const LawResult small = run_law(law, k, opt);
  CHECK(small.ok);
  CHECK(small.cases > 2);
  for (Regime reg : claimed) CHECK(small.coverage.at(reg) >= coverage_share(opt.cases, int(claimed.size())));
  // The default budget gives every claimed regime a real share: half of an even split.
  const LawResult full = run_law(law, k, RunOptions{});
  CHECK(full.ok);
  for (Regime reg : claimed) CHECK(full.coverage.at(reg) >= coverage_share(100, int(claimed.size())));
  CHECK(coverage_share(100, int(claimed.size())) == 100 / (2 * int(claimed.size())));
  // A law that can judge no case of a regime it claims fails, whatever the budget.
  Law blind = law;
  blind.id = "blind";
  blind.regimes = {Regime::Normal, Regime::Huge};
  blind.check = [](const fc::Kernel&, const Case& c) -> std::string {
    if (classify(c) == Regime::Huge) throw NotApplicable("huge scores are outside this test law");
    return "";
  };
  const LawResult r = run_law(blind, k, RunOptions{});
  CHECK_FALSE(r.ok);
  CHECK((r.coverage.count(Regime::Huge) == 0 || r.coverage.at(Regime::Huge) == 0));
}

TEST_CASE("check --inputs runs every law that applies to one input file", "[cpu]") {
  const std::string exe = FC_FLASHCHECK_EXE;
  const std::string dir = (std::filesystem::temp_directory_path() / "fc_inputs_test").string();
  std::filesystem::create_directories(dir);
  // A plain input file (no fc.* metadata): causal, n_q = n_k = 3, d = 2, with d_o.
  Case c;
  c.in.p.n_q = c.in.p.n_k = 3, c.in.p.d = 2, c.in.p.mask = fc::Mask::CausalTopLeft, c.in.p.scale = 0.5;
  fill_values(c, 1, 5, true, 1e9);
  const std::string plain = dir + "/plain.safetensors";
  fc::io::write_safetensors(plain, fc::io::inputs_file(c.in));
  const auto [out, code] = run(exe + " check --kernel cpu_tiled --inputs " + plain);
  CHECK(code == 0);
  CHECK(out.find("PASS  reference") != std::string::npos);
  CHECK(out.find("n/a   q_permutation") != std::string::npos);  // a causal input: holds only without a mask
  CHECK(out.find("PASS  nan_blast") != std::string::npos);      // NaN at q[0], k[0], v[0] in turn
  // The same input fails on a mutant, with the replay line naming the file.
  const auto [bad, bad_code] = run(exe + " check --kernel mutant_scale_twice --inputs " + plain);
  CHECK(bad_code == 1);
  CHECK(bad.find("replay: flashcheck check --kernel mutant_scale_twice --law reference --inputs " + plain) !=
        std::string::npos);
  // No law that applies: exit 2, never "0 cases, every law holds".
  c.in.p.mask = fc::Mask::None;
  const std::string unmasked = dir + "/unmasked.safetensors";
  fc::io::write_safetensors(unmasked, fc::io::inputs_file(c.in));
  CHECK(run(exe + " check --kernel cpu_tiled --law invisible_keys --inputs " + unmasked).second == 2);
  // --case with a file that carries no fc.law is refused (--inputs is for plain files), never passes.
  CHECK(run(exe + " check --kernel cpu_tiled --law reference --case " + unmasked).second == 2);
  const auto [one, one_code] = run(exe + " check --kernel cpu_tiled --law reference --inputs " + unmasked);
  CHECK(one_code == 0);
  CHECK(one.find("(1 case, ") != std::string::npos);
  // Malformed law metadata is bad input.
  fc::io::TensorFile f = fc::io::inputs_file(c.in);
  f.metadata["fc.aux"] = "twelve";
  const std::string junk = dir + "/junk.safetensors";
  fc::io::write_safetensors(junk, f);
  CHECK(run(exe + " check --kernel cpu_tiled --inputs " + junk).second == 2);
  CHECK(run(exe + " check --kernel cpu_tiled --inputs " + dir + "/missing.safetensors").second == 2);
  std::filesystem::remove_all(dir);
}

TEST_CASE("check's verdict options, per-law time, JSON fields and the case a time-out cuts", "[cpu]") {
  const std::string exe = FC_FLASHCHECK_EXE;
  CHECK(run(exe + " check --kernel cpu_tiled --fail-on-inconclusive --allow-inconclusive 2>/dev/null").second == 2);
  CHECK(run(exe + " check --kernel cpu_tiled --replay-repeats x 2>/dev/null").second == 2);
  const std::string json = (std::filesystem::temp_directory_path() / "fc_verdicts_check.json").string();
  const std::string empty = (std::filesystem::temp_directory_path() / "fc_verdicts_empty").string();
  std::filesystem::create_directories(empty);
  const auto [out2, code2] = run(exe + " check --kernel mutant_scale_twice --law reference --seed 2 --cases 10 " +
                                 "--regressions " + empty + " --json-out " + json + " --no-progress");
  CHECK(code2 == 1);
  CHECK(out2.find(" s)\n") != std::string::npos);  // the law's line ends with its wall time
  std::ifstream in(json);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.find("\"status\": \"fail\"") != std::string::npos);
  CHECK(text.find("\"failed_on\": \"random\"") != std::string::npos);
  CHECK(text.find("\"seconds\": ") != std::string::npos);
  CHECK(text.find("\"regression_failures\": []") != std::string::npos);
  CHECK(text.find("\"hint\": \"\"") != std::string::npos);
  std::filesystem::remove(json);
  // A run cut from outside names the law and the case it was on (stderr), then dies of the signal.
  const auto [cut, cut_code] =
      run("timeout -s TERM 2 " + exe + " check --kernel cpu_tiled --cases 1000000 --seed 1 2>&1");
  CHECK(cut_code == 124);
  CHECK(cut.find("flashcheck check: cut during law reference on case batch=") != std::string::npos);
}
