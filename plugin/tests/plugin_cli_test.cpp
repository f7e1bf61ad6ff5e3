// `flashcheck check --plugin` and `kernels --plugin` end to end on the example CPU kernel, built
// correct and with planted faults, and on plugins that break the ABI's rules.
#include "tests/catch.hpp"
#include <nlohmann/json.hpp>
#include <regex>

#include <filesystem>
#include <sstream>

#include "io/attention_io.hpp"
#include "io/safetensors.hpp"
#include "plugin/tests/run_cli.hpp"

using namespace fc::plugin::testing;

namespace {

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// Splits a replay line into arguments (paths contain no spaces in the build tree).
std::vector<std::string> args_of(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string w;
  while (in >> w) out.push_back(w);
  REQUIRE(out.size() > 2);
  REQUIRE(out[0] == "flashcheck");
  out.erase(out.begin());
  return out;
}

// `check --plugin` on a faulty CPU plugin, law `reference`, 30 cases of seed 5, no regression folder
// (its cases, any shape, would meet the fault before the generated ones); a hang times out at 0.5 s.
std::vector<std::string> reference_run(const std::string& fault) {
  std::vector<std::string> args = {"check",
                                   "--plugin",
                                   plugin_path("plugin_cpu_" + fault),
                                   "--law",
                                   "reference",
                                   "--cases",
                                   "30",
                                   "--seed",
                                   "5",
                                   "--regressions",
                                   no_regressions()};
  if (fault == "hang") args.insert(args.end(), {"--timeout", "0.5"});
  return args;
}

}  // namespace

TEST_CASE("check --plugin: the correct example kernel passes every law, isolated and in-process", "[cpu][volume]") {
  const Ran r = run_cli({"check", "--plugin", plugin_path("plugin_cpu_none"), "--seed", "7"});
  CAPTURE(r.out, r.err);
  CHECK(r.code == 0);
  CHECK(count(r.out, "FAIL") == 0);
  // Every law that applies passes: block_size needs declared configurations; the permutation laws,
  // without declarations, hold each run to its certified bound.
  CHECK(count(r.out, "PASS") >= 10);
  CHECK(r.out.find("every law holds") != std::string::npos);
  // In-process: the same kernel through the same mapping, without the worker.
  const Ran here = run_cli({"check", "--plugin", plugin_path("plugin_cpu_none"), "--isolation", "none", "--law",
                            "reference", "--cases", "40", "--seed", "7"});
  CAPTURE(here.out, here.err);
  CHECK(here.code == 0);
  CHECK(count(here.out, "PASS") == 1);
}

TEST_CASE("kernels --plugin lists the capabilities supports() accepts", "[cpu]") {
  const Ran r = run_cli({"kernels", "--json", "--plugin", plugin_path("plugin_cpu_short")});
  REQUIRE(r.code == 0);
  const auto k = nlohmann::json::parse(r.out)["kernels"].at(0);
  CHECK(k["name"] == "example_cpu_short");
  CHECK(k["device"] == "cpu");
  CHECK(k["dtypes"] == nlohmann::json({"F16", "BF16", "F32", "F64"}));
  CHECK(k["masks"].size() == 3);
  CHECK(k["head_dims"].empty());  // any d
  CHECK(k["backward"] == true);
  CHECK(k["gqa"] == true);
}

TEST_CASE("check --plugin: a problem the plugin declines is n/a, never a failure", "[cpu]") {
  // example_cpu_short declines n > 32: a 64-key input is outside it, so no law applies (exit 2, one
  // line), while random cases it declines are skipped, not failed.
  fc::Inputs in;
  in.p.n_q = in.p.n_k = 64, in.p.d = 8, in.p.scale = 0.25;
  for (fc::HostTensor* t : {&in.q, &in.k, &in.v}) *t = fc::HostTensor(fc::DType::F32, {1, 1, 64, 8});
  const std::string file = (std::filesystem::temp_directory_path() / "fc_plugin_declined.safetensors").string();
  fc::io::write_safetensors(file, fc::io::inputs_file(in));
  const Ran r = run_cli({"check", "--plugin", plugin_path("plugin_cpu_short"), "--law", "reference", "--inputs", file});
  CAPTURE(r.out, r.err);
  CHECK(r.code == 2);
  CHECK(r.err_lines() == 1);
  CHECK(r.out.find("does not claim this problem") != std::string::npos);
  const Ran random = run_cli(
      {"check", "--plugin", plugin_path("plugin_cpu_short"), "--law", "reference", "--cases", "20", "--seed", "1"});
  CAPTURE(random.out, random.err);
  CHECK(random.code == 0);
  CHECK(random.out.find("gave up") == std::string::npos);
  std::filesystem::remove(file);
}

// A kernel that takes compact tensors only (as JAX's DLPack import does) and fails if another reaches
// it: compact1 in every problem, compact2 in varlen problems only. The start-up probe must see that
// compact1 declines strided layouts (its axes all longer than 1, where a strided layout cannot pass for
// a compact one), and every problem a law derives (a varlen batch, its sequences run alone, zero_length's
// batches) must pass supports() as generated cases do: every law that applies runs and none fails.
TEST_CASE("check --plugin: a kernel of compact tensors only never receives another", "[cpu][volume]") {
  for (const char* flavour : {"plugin_cpu_compact1", "plugin_cpu_compact2"}) {
    const Ran r = run_cli({"check", "--plugin", plugin_path(flavour), "--seed", "7", "--cases", "50"});
    CAPTURE(flavour, r.out, r.err);
    CHECK(r.code == 0);
    CHECK(count(r.out, "FAIL") == 0);
    CHECK(r.out.find("non-compact") == std::string::npos);
    CHECK(r.out.find("gave up") == std::string::npos);
    CHECK(r.out.find("PASS  varlen_split") != std::string::npos);
    CHECK(r.out.find("PASS  zero_length") != std::string::npos);
    CHECK(count(r.out, "PASS") >= 12);
    const bool compact_only = std::string(flavour) == "plugin_cpu_compact1";
    CHECK((r.out.find("the kernel declines strided tensors") != std::string::npos) == compact_only);
  }
}

TEST_CASE("check --plugin: what is not a usable plugin is one line and exit 2", "[cpu]") {
  const std::pair<std::string, std::string> cases[] = {
      {"/nonexistent/lib.so", "no such file"},
      {FLASHCHECK_BIN, "not a loadable shared library"},
      {plugin_path("bad_no_symbol"), "exports no flashcheck_kernel"},
      {plugin_path("bad_null_kernel"), "returned NULL"},
      {plugin_path("bad_old_abi"), "ABI version 1"},
      {plugin_path("bad_null_forward"), "forward entry is NULL"},
      {plugin_path("bad_null_supports"), "supports entry is NULL"},
      {plugin_path("bad_bad_device"), "device_type 7"},
      {plugin_path("bad_bad_name"), "name may use only"},
      {plugin_path("bad_declines_all"), "declines every problem"},
      {plugin_path("bad_crashes_in_supports"), "SIGSEGV"},
  };
  for (const auto& [path, why] : cases)
    for (const char* isolation : {"process", "none"}) {
      if (std::string(isolation) == "none" && why == "SIGSEGV") continue;  // in-process it would crash us
      CAPTURE(path, isolation);
      const Ran r = run_cli({"check", "--plugin", path, "--cases", "1", "--isolation", isolation});
      CAPTURE(r.out, r.err);
      CHECK(r.code == 2);
      CHECK(r.err_lines() == 1);
      CHECK(r.err.find(why) != std::string::npos);
    }
  const Ran both = run_cli({"check", "--plugin", plugin_path("plugin_cpu_none"), "--kernel", "cpu_tiled"});
  CHECK(both.code == 2);
  const Ran none = run_cli({"check"});
  CHECK(none.code == 2);
  CHECK(none.err_lines() == 1);
}

// Each planted fault fails the reference law with its own message, the minimal counterexample has
// n_k = 4 (the faults but `strides` fire for n_k > 3, so shrinking went through crashing candidates),
// and the replay line reproduces it. A kernel ignoring strides reads the padding's NaNs and writes
// into the gaps of a padded o.
TEST_CASE("check --plugin: crashes, hangs and errors are failing cases with a replay line", "[cpu]") {
  const std::pair<std::string, std::string> faults[] = {
      {"segv", "SIGSEGV"},
      {"abort", "SIGABRT"},
      {"exit", "exited with status 0"},
      {"hang", "did not return within 0.5 s"},
      {"error", "forward returned 1: refusing n_k = 4"},
      {"oob", "the kernel wrote"},
      {"strides", "the kernel wrote into the gaps between the elements of o"},
      {"causal", "[b=0,h=0,"},  // an element of o, lse or a gradient beyond its bound
  };
  for (const auto& [fault, why] : faults) {
    CAPTURE(fault);
    const std::vector<std::string> args = reference_run(fault);
    const Ran r = run_cli(args);
    CAPTURE(r.out, r.err);
    CHECK(r.code == 1);
    CHECK(r.out.find(why) != std::string::npos);
    if (fault != "strides") CHECK(std::regex_search(r.out, std::regex("n_k=4\\b")));
    const std::string replay = replay_of(r.out);
    REQUIRE(replay.find("--plugin " + plugin_path("plugin_cpu_" + fault)) != std::string::npos);
    const Ran again = run_cli(args_of(replay));
    CAPTURE(again.out, again.err);
    CHECK(again.code == 1);
    CHECK(again.out.find(why) != std::string::npos);
  }
}

// Attention sinks reach a version-4 plugin that declares them: the example kernel takes them (its
// whole check passes above), and the same kernel normalising o by the keys' sum alone (FC_FAULT=SINK)
// fails the reference law on a problem with sinks.
TEST_CASE("check --plugin: a declared sink that o's denominator forgets fails reference", "[cpu]") {
  const Ran kernels = run_cli({"check", "--plugin", plugin_path("plugin_cpu_none"), "--law", "sink_neg_inf", "--cases",
                               "20", "--seed", "3", "--regressions", no_regressions()});
  CAPTURE(kernels.out, kernels.err);
  CHECK(kernels.code == 0);
  CHECK(kernels.out.find("sinks") != std::string::npos);  // the variants line names them
  for (const char* seed : {"1", "2", "3"}) {
    const Ran r = run_cli({"check", "--plugin", plugin_path("plugin_cpu_sink"), "--law", "reference", "--seed", seed,
                           "--regressions", no_regressions()});
    CAPTURE(seed, r.out, r.err);
    CHECK(r.code == 1);
    CHECK(r.out.find("sinks (") != std::string::npos);  // the failing case is a problem with sinks
  }
}

// Padded varlen reaches a version-5 plugin that declares it: the example kernel gives the compact
// layout's bits (padded_varlen passes); the same kernel locating the sequences by cu_seqlens
// (FC_FAULT=PADDED, a shipped bug class) fails padded_varlen, naming an output element on a padding
// token or a differing element; a version-4 build of the example loads, runs, and is never offered padding.
TEST_CASE("check --plugin: padded varlen offered to a version-5 plugin, caught when it reads cu_seqlens", "[cpu]") {
  const Ran good = run_cli({"check", "--plugin", plugin_path("plugin_cpu_none"), "--law", "padded_varlen", "--cases",
                            "30", "--seed", "3", "--regressions", no_regressions()});
  CAPTURE(good.out, good.err);
  CHECK(good.code == 0);
  CHECK(good.out.find("padded_varlen") != std::string::npos);
  CHECK(good.out.find("PASS  padded_varlen") != std::string::npos);
  for (const char* seed : {"1", "2", "3"}) {
    const Ran r = run_cli({"check", "--plugin", plugin_path("plugin_cpu_padded"), "--law", "padded_varlen", "--seed",
                           seed, "--regressions", no_regressions()});
    CAPTURE(seed, r.out, r.err);
    CHECK(r.code == 1);
    CHECK(r.out.find("FAIL  padded_varlen") != std::string::npos);
  }
  const Ran old = run_cli({"check", "--plugin", plugin_path("plugin_cpu_abi4"), "--law", "reference", "--cases", "20",
                           "--seed", "2", "--regressions", no_regressions()});
  CAPTURE(old.out, old.err);
  CHECK(old.code == 0);
  CHECK(old.out.find("PASS  reference") != std::string::npos);
  const Ran old_padded = run_cli({"check", "--plugin", plugin_path("plugin_cpu_abi4"), "--law", "padded_varlen",
                                  "--cases", "20", "--seed", "2", "--regressions", no_regressions()});
  CAPTURE(old_padded.out, old_padded.err);
  CHECK(old_padded.out.find("PASS  padded_varlen") == std::string::npos);  // not applicable: not declared
}

// Mask tensors and block masks reach a version-5 plugin that declares them: the example kernel takes
// them (its whole check passes above), and the same kernel reading an F32 additive mask as F16
// (FC_FAULT=MASK_F16, the shipped bug) fails reference on a problem with such a mask. (The example's
// faults fire at n_k > 3 only: seed 1's variant problems give it no F32 mask that long.)
TEST_CASE("check --plugin: an F32 additive mask read as F16 fails reference", "[cpu]") {
  const Ran ok = run_cli({"check", "--plugin", plugin_path("plugin_cpu_none"), "--law", "block_mask_dense", "--cases",
                          "20", "--seed", "3", "--regressions", no_regressions()});
  CAPTURE(ok.out, ok.err);
  CHECK(ok.code == 0);
  CHECK(ok.out.find("mask_bool, mask_additive, block_mask") != std::string::npos);  // the variants line
  for (const char* seed : {"2", "3", "4"}) {
    const Ran r = run_cli({"check", "--plugin", plugin_path("plugin_cpu_mask_f16"), "--law", "reference", "--seed",
                           seed, "--regressions", no_regressions()});
    CAPTURE(seed, r.out, r.err);
    CHECK(r.code == 1);
    CHECK(r.out.find("F32 mask tensor") != std::string::npos);  // the failing case has an F32 additive mask
  }
}

// Shrinking a crash, an abort or a hang restarts the worker for every faulting candidate: past
// --shrink-faults of them it stops, says so, and reports the smallest failing case so far, which its
// replay line reproduces.
TEST_CASE("check --plugin: shrinking stops after --shrink-faults faulting candidates", "[cpu]") {
  const std::pair<std::string, std::string> faults[] = {
      {"segv", "SIGSEGV"}, {"abort", "SIGABRT"}, {"hang", "did not return within 0.5 s"}};
  for (const auto& [fault, why] : faults) {
    CAPTURE(fault);
    std::vector<std::string> args = reference_run(fault);
    args.insert(args.end(), {"--shrink-faults", "2"});
    const Ran r = run_cli(args);
    CAPTURE(r.out, r.err);
    CHECK(r.code == 1);
    CHECK(r.out.find(why) != std::string::npos);
    CHECK(r.out.find("shrinking stopped after 2 faulting candidates (--shrink-faults 2): the counterexample may not "
                     "be minimal") != std::string::npos);
    CHECK(r.out.find("the worker was restarted 2 times") != std::string::npos);  // 1 failure + 2 candidates
    const std::string replay = replay_of(r.out);
    const Ran again = run_cli(args_of(replay));
    CAPTURE(again.out);
    CHECK(again.code == 1);
    CHECK(again.out.find(why) != std::string::npos);
    auto shown = [](const std::string& out) {  // the counterexample as printed
      const size_t at = out.find("  minimal counterexample:");
      return at == std::string::npos ? std::string() : out.substr(at, out.find("  replay:", at) - at);
    };
    CHECK(!shown(r.out).empty());
    CHECK(shown(again.out) == shown(r.out));
    CHECK(again.out.find("the worker was restarted") == std::string::npos);  // the one case faults, once
  }
  const Ran zero = run_cli({"check", "--plugin", plugin_path("plugin_cpu_segv"), "--shrink-faults", "0"});
  CHECK(zero.code == 2);
  CHECK(zero.err_lines() == 1);
}

TEST_CASE("check --plugin: after a crash the suite goes on with a fresh worker", "[cpu]") {
  const Ran r = run_cli({"check", "--plugin", plugin_path("plugin_cpu_segv"), "--cases", "10", "--seed", "3"});
  CAPTURE(r.out, r.err);
  CHECK(r.code == 1);
  CHECK(count(r.out, "SIGSEGV") >= 10);  // law after law
  CHECK(r.out.find("the worker was restarted") != std::string::npos);
}

// A plan cached per problem, strides included (FC_FAULT=LAYOUT_CACHE): one problem always comes in one
// layout, so reference passes it; consecutive_calls calls the problem again in another layout and kills
// it at every one of 20 seeds, naming the layout. The correct example passes consecutive_calls.
TEST_CASE("check --plugin: consecutive_calls kills a layout cached per problem at 20 seeds", "[cpu][volume]") {
  const std::string cached = plugin_path("plugin_cpu_layout_cache"), none = plugin_path("plugin_cpu_none");
  const Ran ref = run_cli({"check", "--plugin", cached, "--law", "reference", "--seed", "1", "--no-progress",
                           "--regressions", no_regressions()});
  CAPTURE(ref.out, ref.err);
  CHECK(ref.code == 0);
  for (int seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    const Ran r = run_cli({"check", "--plugin", cached, "--law", "consecutive_calls", "--seed", std::to_string(seed),
                           "--no-progress"});
    CAPTURE(r.out, r.err);
    CHECK(r.code == 1);
    CHECK(r.out.find("in another layout") != std::string::npos);
  }
  const Ran ok = run_cli({"check", "--plugin", none, "--law", "consecutive_calls", "--seed", "1", "--no-progress"});
  CAPTURE(ok.out, ok.err);
  CHECK(ok.code == 0);
}
