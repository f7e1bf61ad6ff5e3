// A version-3 plugin's declarations end to end (examples/plugin_cpu/attention_tiled.c): a kernel that
// takes only multiples of 64 loads, is probed and drawn inside its declarations, reaches the laws its
// tiles and exactness open, and passes them; its planted fault, and an fp16 accumulator hidden behind
// an fp32 claim, fail; the same kernel without declarations, and declarations that admit nothing, are
// refused in one line; a version-2 plugin still loads. FC_LONG_TEST: every law at 100 cases (the
// short variant: the laws the declarations open, at 12 cases).
#include "tests/catch.hpp"
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include "kernels/plugin/tests/run_cli.hpp"

using namespace fc::plugin::testing;

namespace {

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// `check --plugin` with a JSON report; the report's laws by id.
struct Checked {
  Ran ran;
  nlohmann::json laws;  // id -> law object
};
Checked check(const std::string& plugin, std::vector<std::string> extra) {
  const std::string json =
      (std::filesystem::temp_directory_path() / ("fc_declared_" + plugin + std::to_string(::getpid()) + ".json"))
          .string();
  std::vector<std::string> args = {"check", "--plugin", plugin_path(plugin), "--json-out", json,
                                   "--regressions", no_regressions()};
  args.insert(args.end(), extra.begin(), extra.end());
  Checked c;
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
  std::vector<Checked> runs = {check("plugin_tiled_none", {"--cases", "100", "--seed", "3"})};
#else
  const int cases = 12;
  std::vector<Checked> runs;
  for (const std::string& id : opened)
    runs.push_back(check("plugin_tiled_none", {"--law", id, "--cases", std::to_string(cases), "--seed", "3"}));
#endif
  nlohmann::json laws = nlohmann::json::object();
  for (const Checked& c : runs) {
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
          "[cpu]") {
  const Checked tail = check("plugin_tiled_tail", {"--law", "reference", "--cases", "30", "--seed", "5"});
  CAPTURE(tail.ran.out);
  CHECK(tail.ran.code == 1);
  CHECK(tail.ran.out.find("FAIL  reference") != std::string::npos);
  const Checked hidden = check("plugin_tiled_acc16_hidden", {"--law", "reference", "--cases", "20", "--seed", "5"});
  CAPTURE(hidden.ran.out);
  CHECK(hidden.ran.code == 1);
  CHECK(hidden.ran.out.find("FAIL  reference") != std::string::npos);
  // Declared, the same accumulator is charged its fp16 roundings and passes the reference law. (Its
  // sums overflow fp16 at the fp16_max regime, which the extreme law reports: a true defect of fp16
  // accumulation, so the declared kernel is held to the reference law alone here.)
#ifdef FC_LONG_TEST
  const std::string declared_cases = "100";
#else
  const std::string declared_cases = "20";
#endif
  const Checked declared =
      check("plugin_tiled_acc16", {"--law", "reference", "--cases", declared_cases, "--seed", "5"});
  CAPTURE(declared.ran.out, declared.ran.err);
  CHECK(declared.ran.code == 0);
  CHECK(count(declared.ran.out, "FAIL") == 0);
}

TEST_CASE("declarations: a version-2 plugin loads and runs unchanged", "[cpu]") {
  const Checked c = check("plugin_cpu_abi2", {"--law", "reference", "--cases", "20", "--seed", "2"});
  CAPTURE(c.ran.out, c.ran.err);
  CHECK(c.ran.code == 0);
  REQUIRE(c.laws.contains("reference"));
  CHECK(c.laws["reference"].at("status") == "pass");
}
