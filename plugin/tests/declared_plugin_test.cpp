// A version-3 plugin's declarations end to end (examples/plugin_cpu/attention_tiled.c): a kernel that
// takes only multiples of 64 loads, is probed and drawn inside its declarations, reaches the laws its
// tiles and exactness open, and passes them; its planted fault, and an fp16 accumulator hidden behind
// an fp32 claim, fail, while the declared fp16 accumulator passes every law; the permutation laws judge
// a kernel without exactness claims, and kill a position-dependent score; determinism is judged by
// the declared backward (atomic, deterministic, a deterministic mode run 100 times); the same kernel
// without declarations, and declarations that admit nothing, are refused in one line; a version-2
// plugin still loads. FC_LONG_TEST: every law at 100 cases (the short variant: the laws the
// declarations open, at 12 cases).
#include "tests/catch.hpp"
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>
#include <unistd.h>

#include "plugin/tests/run_cli.hpp"

using namespace fc::plugin::testing;

namespace {

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// `check --plugin` with a JSON report; the report's laws by id.
struct DeclaredRun {
  Ran ran;
  nlohmann::json laws;  // id -> law object
};
DeclaredRun check(const std::string& plugin, std::vector<std::string> extra) {
  const std::string json =
      (std::filesystem::temp_directory_path() / ("fc_declared_" + plugin + std::to_string(::getpid()) + ".json"))
          .string();
  std::vector<std::string> args = {"check", "--plugin", plugin_path(plugin), "--json-out", json,
                                   "--regressions", no_regressions()};
  args.insert(args.end(), extra.begin(), extra.end());
  DeclaredRun c;
  c.ran = run_cli(args, 1200);
  c.laws = nlohmann::json::object();
  std::ifstream in(json);
  if (in) {
    const nlohmann::json r = nlohmann::json::parse(in);
    for (const auto& l : r.at("laws")) c.laws[l.at("id").get<std::string>()] = l;
  }
  std::remove(json.c_str());
  return c;
}

}  // namespace

TEST_CASE("declarations: a kernel of multiples of 64 is probed inside them and lists its configs", "[cpu]") {
  const Ran r = run_cli({"kernels", "--plugin", plugin_path("plugin_tiled_none")});
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("example_tiled_none") != std::string::npos);
  CHECK(r.out.find("64x64,64x128,128x64") != std::string::npos);
  // The same kernel without its declarations is refused, and the refusal says what would open it.
  const Ran bare = run_cli({"kernels", "--plugin", plugin_path("plugin_tiled_undeclared")});
  CAPTURE(bare.out, bare.err);
  CHECK(bare.code == 2);
  CHECK(bare.err.find("declines every problem") != std::string::npos);
  CHECK(bare.err.find("declares them (fc_declarations)") != std::string::npos);
  CHECK(bare.err_lines() == 1);
}

TEST_CASE("declarations: lengths that admit nothing, or a residue outside its modulus, are one line and exit 2",
          "[cpu]") {
  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {"bad_bad_residue", "declarations.n_k"}, {"bad_empty_lengths", "admits no length"}}) {
    const Ran r = run_cli({"check", "--plugin", plugin_path(bad)});
    CAPTURE(bad, r.out, r.err);
    CHECK(r.code == 2);
    CHECK(r.err.find(why) != std::string::npos);
    CHECK(r.err_lines() == 1);
  }
  // --max-n below the smallest declared length, and --max-n on a registry kernel.
  const Ran small = run_cli({"check", "--plugin", plugin_path("plugin_tiled_none"), "--max-n", "32"});
  CAPTURE(small.err);
  CHECK(small.code == 2);
  CHECK(small.err.find("--max-n 32 leaves no length") != std::string::npos);
  const Ran reg = run_cli({"check", "--kernel", "cpu_naive", "--max-n", "32"});
  CHECK(reg.code == 2);
}

TEST_CASE("declarations: every case is inside them, the laws they open run, and the shape paths are reported",
          "[cpu]") {
  const std::vector<std::string> opened = {"reference", "block_size", "kv_permutation", "q_permutation",
                                           "determinism"};
#ifdef FC_LONG_TEST
  const int cases = 100;
  std::vector<DeclaredRun> runs = {check("plugin_tiled_none", {"--cases", "100", "--seed", "3"})};
#else
  const int cases = 12;
  std::vector<DeclaredRun> runs;
  for (const std::string& id : opened)
    runs.push_back(check("plugin_tiled_none", {"--law", id, "--cases", std::to_string(cases), "--seed", "3"}));
#endif
  nlohmann::json laws = nlohmann::json::object();
  for (const DeclaredRun& c : runs) {
    CAPTURE(c.ran.out, c.ran.err);
    CHECK(c.ran.code == 0);
    CHECK(count(c.ran.out, "FAIL") == 0);
    for (const auto& [id, l] : c.laws.items()) laws[id] = l;
  }
  // The laws its tiles (three configs) and exactness claims open, passed on >= `cases` cases each,
  // none declined (every drawn length is a multiple of 64).
  for (const std::string& id : opened) {
    CAPTURE(id);
    REQUIRE(laws.contains(id));
    CHECK(laws[id].at("status") == "pass");
    CHECK(laws[id].at("cases").get<int>() >= cases);
    CHECK(laws[id].at("declined").get<int>() == 0);
  }
  // Every law passes or does not apply (no law is left without cases).
  for (const auto& [id, l] : laws.items()) {
    CAPTURE(id);
    CHECK((l.at("status") == "pass" || l.at("status") == "n/a"));
    if (l.at("status") == "pass") CHECK(l.at("cases").get<int>() >= cases);
  }
  // Rows of >= 3 key tiles are reached (the kernel's multiples of 64 rule out decode rows).
  CHECK(laws["reference"].at("paths").value("multi_tile", 0) > 0);
}

TEST_CASE("declarations: the planted fault is killed, and a hidden fp16 accumulator fails where a declared one passes",
          "[cpu][volume]") {
  const DeclaredRun tail = check("plugin_tiled_tail", {"--law", "reference", "--cases", "30", "--seed", "5"});
  CAPTURE(tail.ran.out);
  CHECK(tail.ran.code == 1);
  CHECK(tail.ran.out.find("FAIL  reference") != std::string::npos);
  const DeclaredRun hidden = check("plugin_tiled_acc16_hidden", {"--law", "reference", "--cases", "20", "--seed", "5"});
  CAPTURE(hidden.ran.out);
  CHECK(hidden.ran.code == 1);
  CHECK(hidden.ran.out.find("FAIL  reference") != std::string::npos);
  // Declared, the same accumulator is judged by its own arithmetic and passes every law that applies
  // (fp16_max, whose unnormalised sums overflow an fp16 accumulator by design, is not drawn for it),
  // at 100 cases each in the long variant; the short one runs the laws that once judged it at fp32.
#ifdef FC_LONG_TEST
  std::vector<DeclaredRun> runs = {check("plugin_tiled_acc16", {"--cases", "100", "--seed", "5"})};
  const int cases = 100;
#else
  const int cases = 20;
  std::vector<DeclaredRun> runs;
  for (const std::string id : {"reference", "extreme", "shift", "affine_v", "softmax_row"})
    runs.push_back(check("plugin_tiled_acc16", {"--law", id, "--cases", std::to_string(cases), "--seed", "5"}));
#endif
  for (const DeclaredRun& declared : runs) {
    CAPTURE(declared.ran.out, declared.ran.err);
    CHECK(declared.ran.code == 0);
    CHECK(count(declared.ran.out, "FAIL") == 0);
    for (const auto& [id, l] : declared.laws.items()) {
      CAPTURE(id);
      CHECK((l.at("status") == "pass" || l.at("status") == "n/a"));
      if (l.at("status") == "pass") CHECK(l.at("cases").get<int>() >= cases);
    }
  }
}

TEST_CASE("permutations: declared arithmetic without exactness is judged by the differential bound, and a "
          "position-dependent score fails only the permutation law",
          "[cpu][volume]") {
#ifdef FC_LONG_TEST
  const std::string cases = "100";
#else
  const std::string cases = "40";
#endif
  // Correct: both permutation laws apply (no exactness declared) and pass.
  for (const std::string id : {"kv_permutation", "q_permutation"}) {
    const DeclaredRun ok = check("plugin_tiled_noexact", {"--law", id, "--cases", cases, "--seed", "3"});
    CAPTURE(id, ok.ran.out, ok.ran.err);
    CHECK(ok.ran.code == 0);
    REQUIRE(ok.laws.contains(id));
    CHECK(ok.laws[id].at("status") == "pass");
    CHECK(ok.laws[id].at("cases").get<int>() >= std::stoi(cases));
  }
  // The last 8 keys' (rows') scores summed in reverse: within every bound, so reference holds, but the
  // permuted run differs beyond what the two runs do not share.
  for (const auto& [plugin, fails, holds] :
       {std::tuple<std::string, std::string, std::string>{"plugin_tiled_tailkeys", "kv_permutation", "q_permutation"},
        {"plugin_tiled_tailrows", "q_permutation", "kv_permutation"}}) {
    const DeclaredRun bad = check(plugin, {"--law", fails, "--cases", cases, "--seed", "3"});
    CAPTURE(plugin, bad.ran.out);
    CHECK(bad.ran.code == 1);
    CHECK(bad.ran.out.find("FAIL  " + fails) != std::string::npos);
    for (const std::string& id : {holds, std::string("reference")}) {
      const DeclaredRun other = check(plugin, {"--law", id, "--cases", cases, "--seed", "3"});
      CAPTURE(id, other.ran.out);
      CHECK(other.ran.code == 0);
    }
  }
#ifdef FC_LONG_TEST
  // Nothing else kills them: every other law passes or does not apply.
  for (const auto& [plugin, fails] : {std::pair<std::string, std::string>{"plugin_tiled_tailkeys", "kv_permutation"},
                                      {"plugin_tiled_tailrows", "q_permutation"}}) {
    const DeclaredRun all = check(plugin, {"--cases", "100", "--seed", "3"});
    for (const auto& [id, l] : all.laws.items()) {
      CAPTURE(plugin, id, all.ran.out);
      if (id == fails) CHECK(l.at("status") == "fail");
      else CHECK((l.at("status") == "pass" || l.at("status") == "n/a"));
    }
  }
#endif
  // A kernel that declares neither (the example CPU plugin): both laws apply, each run held to its
  // certified bound.
  for (const std::string id : {"kv_permutation", "q_permutation"}) {
    const DeclaredRun bare = check("plugin_cpu_none", {"--law", id, "--cases", "30", "--seed", "3", "--max-n", "48"});
    CAPTURE(id, bare.ran.out, bare.ran.err);
    CHECK(bare.ran.code == 0);
    REQUIRE(bare.laws.contains(id));
    CHECK(bare.laws[id].at("status") == "pass");
  }
}

TEST_CASE("determinism: judged by what the backward declares", "[cpu]") {
  auto determinism = [](const std::string& plugin) {
    return check(plugin, {"--law", "determinism", "--cases", "100", "--seed", "3", "--max-n", "48"});
  };
  // d_q summed in an order drawn per call (atomics): declared atomic, within the reordering tolerance.
  const DeclaredRun atomic = determinism("plugin_cpu_dq_atomic");
  CAPTURE(atomic.ran.out, atomic.ran.err);
  CHECK(atomic.ran.code == 0);
  REQUIRE(atomic.laws.contains("determinism"));
  CHECK(atomic.laws["determinism"].at("status") == "pass");
  CHECK(atomic.laws["determinism"].at("cases").get<int>() >= 100);
  // The same kernel claiming a deterministic backward: its bits differ.
  const DeclaredRun hidden = determinism("plugin_cpu_dq_atomic_hidden");
  CAPTURE(hidden.ran.out);
  CHECK(hidden.ran.code == 1);
  CHECK(hidden.ran.out.find("on the same inputs") != std::string::npos);
  // A deterministic mode beside the atomic configuration: 100 runs a case, the same bits.
  const DeclaredRun mode = determinism("plugin_cpu_dq_mode");
  CAPTURE(mode.ran.out, mode.ran.err);
  CHECK(mode.ran.code == 0);
  REQUIRE(mode.laws.contains("determinism"));
  CHECK(mode.laws["determinism"].at("status") == "pass");
  // A mode that sums in another order in one call of 30 is caught within a case's 100 runs.
  const DeclaredRun rare = determinism("plugin_cpu_dq_mode_rare");
  CAPTURE(rare.ran.out);
  CHECK(rare.ran.code == 1);
  CHECK(rare.ran.out.find("of 100 in the declared deterministic mode differs from the first") != std::string::npos);
}

TEST_CASE("declarations: a version-3 plugin's declarations are read to large_offsets only", "[cpu]") {
  // plugin_tiled_abi3 says version 3 and holds nonsense in the version-4 fields (num_dtypes = -1,
  // sinks = 1) that a version-3 struct does not have: it loads, its lengths are drawn, no sinks offered.
  const DeclaredRun c = check("plugin_tiled_abi3", {"--law", "reference", "--cases", "20", "--seed", "2"});
  CAPTURE(c.ran.out, c.ran.err);
  CHECK(c.ran.code == 0);
  REQUIRE(c.laws.contains("reference"));
  CHECK(c.laws["reference"].at("status") == "pass");
}

TEST_CASE("declarations: a version-4 plugin's declarations are read to sinks only", "[cpu]") {
  // plugin_cpu_abi4 says version 4 and holds nonsense in the version-5 fields (mask_tensors = 3,
  // mask_dtypes = -1, block_masks = 7) and implements no masks: it loads and passes, and is never
  // offered a mask tensor or a block mask (a mask it ignored would fail reference).
  const DeclaredRun c = check("plugin_cpu_abi4", {"--law", "reference", "--cases", "40", "--seed", "2"});
  CAPTURE(c.ran.out, c.ran.err);
  CHECK(c.ran.code == 0);
  REQUIRE(c.laws.contains("reference"));
  CHECK(c.laws["reference"].at("status") == "pass");
  CHECK(c.ran.out.find("sinks") != std::string::npos);  // the variants line: version 4's sinks
  CHECK(c.ran.out.find("mask_bool") == std::string::npos);
  CHECK(c.ran.out.find("block_mask") == std::string::npos);
}

TEST_CASE("declarations: a version-2 plugin loads and runs unchanged", "[cpu]") {
  const DeclaredRun c = check("plugin_cpu_abi2", {"--law", "reference", "--cases", "20", "--seed", "2"});
  CAPTURE(c.ran.out, c.ran.err);
  CHECK(c.ran.code == 0);
  REQUIRE(c.laws.contains("reference"));
  CHECK(c.laws["reference"].at("status") == "pass");
}
