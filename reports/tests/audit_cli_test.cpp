// The report commands end to end, run as subprocesses: audit --quick reproducible byte for byte
// (thread counts, shards merged, the committed baseline), gate against the baseline, a killed audit
// leaving the previous report intact, a planted bug failing with a replay line that replays, and
// usage errors exiting 2 with one line.
#include "tests/catch.hpp"
#include <gnu/libc-version.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/tests/subprocess.hpp"

using namespace fc::cli::testing;
using nlohmann::json;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The CI sweep: both CPU kernels named, so the report is the same whether CUDA was built or not.
const std::vector<std::string> kQuick = {"audit",    "--quick",   "--kernel", "cpu_naive",
                                         "--kernel", "cpu_tiled", "--seed",   "1"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

}  // namespace

TEST_CASE("audit --quick is reproducible: threads, shards merged, and the committed baseline", "[cpu]") {
  const std::string dir = scratch_dir("audit_repro");
  const RunResult one =
      run_flashcheck(with(kQuick, {"--jobs", "1", "--out", dir + "/j1", "--junit", dir + "/j.xml"}), 300);
  CAPTURE(one.err);
  REQUIRE(one.code == 0);
  CHECK(one.out.find("flashcheck audit: PASS") != std::string::npos);
  const RunResult two = run_flashcheck(with(kQuick, {"--jobs", "2", "--out", dir + "/j2"}), 300);
  REQUIRE(two.code == 0);
  const std::string report = slurp(dir + "/j1/report.json");
  for (const char* f : {"report.json", "report.md", "report.html"}) {
    CAPTURE(f);
    CHECK(slurp(dir + "/j1/" + f) == slurp(dir + "/j2/" + f));
  }
  // Run metadata lives beside the report, never in it.
  const json run = json::parse(slurp(dir + "/j1/run.json"));
  CHECK(run.contains("commit"));
  CHECK(run.contains("finished_utc"));
  CHECK(report.find("finished_utc") == std::string::npos);
  const json r = json::parse(report);
  CHECK(r["schema"] == "flashcheck-report");
  CHECK(r["verdict"]["status"] == "pass");
  CHECK(r["verdict"]["cells"].get<int>() == int(r["cells"].size()));
  CHECK(slurp(dir + "/j.xml").find("<testsuite name=\"flashcheck.audit.cpu_tiled\"") != std::string::npos);

  // Three shards, merged, are the unsharded run byte for byte.
  std::vector<std::string> merge = {"merge", "--out", dir + "/merged"};
  for (int i = 0; i < 3; ++i) {
    const std::string out = dir + "/s" + std::to_string(i);
    const RunResult s = run_flashcheck(with(kQuick, {"--shard", std::to_string(i) + "/3", "--out", out}), 300);
    REQUIRE(s.code == 0);
    CHECK(json::parse(slurp(out + "/report.json"))["shard"]["index"] == i);
    merge.push_back(out + "/report.json");
  }
  std::swap(merge[3], merge[5]);  // shards in any order
  const RunResult m = run_flashcheck(merge, 60);
  CAPTURE(m.err);
  REQUIRE(m.code == 0);
  for (const char* f : {"report.json", "report.md", "report.html"}) {
    CAPTURE(f);
    CHECK(slurp(dir + "/merged/" + f) == slurp(dir + "/j1/" + f));
  }
  // `render` writes from report.json alone the Markdown and HTML the run wrote (committed results keep
  // no HTML: results/README.md), and nothing else.
  const RunResult rendered = run_flashcheck({"render", dir + "/j1/report.json", "--out", dir + "/rendered"}, 60);
  CAPTURE(rendered.err);
  REQUIRE(rendered.code == 0);
  for (const char* f : {"report.md", "report.html"}) {
    CAPTURE(f);
    CHECK(slurp(dir + "/rendered/" + f) == slurp(dir + "/j1/" + f));
  }
  CHECK_FALSE(std::filesystem::exists(dir + "/rendered/report.json"));
  CHECK_FALSE(std::filesystem::exists(dir + "/rendered/run.json"));

  // CI's gate: the committed baseline is this run, byte for byte (same options, same seed), and the
  // gate passes. A byte difference with a passing gate means machine-dependent arithmetic
  // (docs/gate.md says what the baseline assumes).
  const std::string baseline = std::string(FC_SOURCE_DIR) + "/results/baseline/quick.json";
  INFO(
      "results/baseline/quick.json is not this build's quick audit. After a deliberate change to a CPU kernel, "
      "a bound, the sweep or the metrics, run scripts/results.sh baseline and commit quick.json with the change; "
      "if the gate below passes and only bytes differ, this machine's arithmetic differs (docs/gate.md)");
  // The CPU kernels' lse comes from libm's logf and expf, which differ in the last bit between glibc
  // releases: the bytes are this run's only where the baseline was made on the same glibc
  // (platform.txt, written by update.sh); elsewhere the gate below is the check.
  const std::string made_on = slurp(std::string(FC_SOURCE_DIR) + "/results/baseline/platform.txt");
  const std::string here = std::string("glibc ") + gnu_get_libc_version() + "\n";
  if (made_on == here)
    CHECK(slurp(baseline) == report);
  else
    WARN("results/baseline/quick.json was made on " << made_on << "this is " << here
                                                    << "its bytes are not compared, only the gate");
  const RunResult g = run_flashcheck({"gate", "--baseline", baseline, "--current", dir + "/j1/report.json"}, 60);
  CAPTURE(g.out);
  CHECK(g.code == 0);

  // The gate sees a planted regression in the same report: o's RMSE doubled in one cell.
  json worse = r;
  for (json& cell : worse["cells"])
    if (cell["kernel"] == "cpu_tiled") {
      cell["tensors"]["o"]["rmse"] = 2 * cell["tensors"]["o"]["rmse"].get<double>();
      break;
    }
  write_bytes(dir + "/worse.json", worse.dump(2));
  const RunResult gw =
      run_flashcheck({"gate", "--baseline", dir + "/j1/report.json", "--current", dir + "/worse.json"});
  CHECK(gw.code == 1);
  CHECK(gw.out.find("| rmse |") != std::string::npos);
  write_bytes(dir + "/garbage.json", "{\"schema\": 3");
  const RunResult gg =
      run_flashcheck({"gate", "--baseline", dir + "/garbage.json", "--current", dir + "/j1/report.json"});
  CHECK(gg.code == 2);
  CHECK(gg.stderr_lines() == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a killed audit leaves the previous report intact and no temporary file", "[cpu]") {
  const std::string dir = scratch_dir("audit_kill");
  const std::string out = dir + "/out";
  REQUIRE(run_flashcheck(
              {"audit", "--quick", "--kernel", "cpu_tiled", "--dtype", "F16", "--regime", "normal", "--out", out}, 120)
              .code == 0);
  const std::string before = slurp(out + "/report.json");
  // The full sweep runs for a minute: SIGKILL it after two seconds, in the middle of its work.
  const std::string cmd =
      "timeout -s KILL 2 '" + std::string(FLASHCHECK_BIN) + "' audit --jobs 1 --out '" + out + "' >/dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  CHECK(WEXITSTATUS(status) == 128 + SIGKILL);  // timeout's report of a killed child
  CHECK(slurp(out + "/report.json") == before);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(out)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"report.html", "report.json", "report.md", "run.json"});
  std::filesystem::remove_all(dir);
}

TEST_CASE("a planted bug fails the audit with a replay line that replays", "[cpu]") {
  const std::string dir = scratch_dir("audit_mutant");
  const RunResult r = run_flashcheck(
      {"audit", "--quick", "--kernel", "mutant_no_o_rescale", "--dtype", "F32", "--regime", "normal", "--out", dir},
      120);
  CHECK(r.code == 1);
  CHECK(r.out.find("flashcheck audit: FAIL") != std::string::npos);
  const json rep = json::parse(slurp(dir + "/report.json"));
  std::string replay, failed_case;
  for (const json& cell : rep["cells"])
    if (cell["status"] == "fail") {
      replay = cell["replay"], failed_case = cell["case"];
      CHECK_FALSE(cell["tensors"]["o"]["pass"].get<bool>());
      CHECK(cell["tensors"]["o"].contains("why_element"));
      break;
    }
  REQUIRE_FALSE(replay.empty());
  CHECK(replay == "flashcheck audit --kernel mutant_no_o_rescale --case " + failed_case + " --seed 1");
  // The replay line, run, fails the same cell with the same numbers.
  std::vector<std::string> args;
  std::istringstream words(replay.substr(std::string("flashcheck ").size()));
  for (std::string w; words >> w;) args.push_back(w);
  args.insert(args.end(), {"--out", dir + "/replay"});
  CHECK(run_flashcheck(args, 60).code == 1);
  const json again = json::parse(slurp(dir + "/replay/report.json"));
  REQUIRE(again["cells"].size() == 1);
  for (const json& cell : rep["cells"])
    if (cell["case"] == failed_case) CHECK(again["cells"][0]["tensors"] == cell["tensors"]);
  std::filesystem::remove_all(dir);
}

TEST_CASE("audit, gate, merge and render refuse bad usage with exit 2 and one line", "[cpu]") {
  const std::vector<std::vector<std::string>> bad = {
      {"audit", "--shard", "3/3"},
      {"audit", "--shard", "x"},
      {"audit", "--dtype", "F64"},
      {"audit", "--kernel", "no_such_kernel"},
      {"audit", "--case", "F16/normal/n3"},
      {"audit", "--regime", "sideways"},
      {"audit", "--quick", "--regime", "normal,mask_bool"},  // contract v3's regimes: full plan only
      {"audit", "--accumulation", "--kernel", "cpu_tiled:acc=f8"},
      {"audit", "--save-case", "/tmp/x.safetensors"},
      {"gate", "--baseline", "/nonexistent.json", "--current", "/nonexistent.json"},
      {"gate", "--baseline", "/dev/null", "--current", "/dev/null", "--tolerance", "abc"},
      {"merge", "/nonexistent.json"},
      {"render", "/nonexistent.json", "--out", "/tmp"},
      {"render", "/dev/null", "--out", "/tmp"},
      {"render", FC_SOURCE_DIR "/results/baseline/quick.json", "--out", "/dev/null/x"},
  };
  for (const auto& args : bad) {
    const RunResult r = run_flashcheck(args, 60);
    CAPTURE(args, r.out, r.err);
    CHECK(r.code == 2);
    CHECK(r.stderr_lines() == 1);
  }
}

TEST_CASE("audit --plugin audits a plugin like a registry kernel, replay lines included", "[cpu]") {
  const std::string dir = scratch_dir("audit_plugin");
  // window: a variant the example plugin declines, so it gets no such cell; varlen and d_v it declares.
  const std::vector<std::string> sweep = {"audit", "--quick",  "--dtype",
                                          "F32",   "--regime", "normal,causal_top_left,varlen,window,d_v"};
  const RunResult ok = run_flashcheck(with(sweep, {"--plugin", PLUGIN_OK, "--out", dir + "/ok"}), 300);
  CAPTURE(ok.out, ok.err);
  CHECK(ok.code == 0);
  const json r = json::parse(slurp(dir + "/ok/report.json"));
  REQUIRE_FALSE(r["cells"].empty());
  std::set<std::string> regimes;
  for (const json& c : r["cases"]) regimes.insert(c["regime"].get<std::string>());
  CHECK(regimes == std::set<std::string>{"normal", "causal_top_left", "varlen", "d_v"});
  for (const json& cell : r["cells"]) {
    CHECK(cell["kernel"] == "example_cpu_none");
    CHECK(cell["device"] == "plugin");
    CHECK(cell["tensors"]["o"].contains("baseline_ratio"));  // the baseline runs though it is not audited
  }
  // A plugin with the other causal alignment fails the causal cells, with a replay line that replays.
  const RunResult bad = run_flashcheck(with(sweep, {"--plugin", PLUGIN_CAUSAL, "--out", dir + "/bad"}), 300);
  CHECK(bad.code == 1);
  const json rb = json::parse(slurp(dir + "/bad/report.json"));
  std::string replay;
  for (const json& cell : rb["cells"])
    if (cell["status"] == "fail") replay = cell["replay"];
  REQUIRE(replay.find("flashcheck audit --plugin ") == 0);
  std::vector<std::string> args;
  std::istringstream words(replay.substr(std::string("flashcheck ").size()));
  for (std::string w; words >> w;) args.push_back(w);
  args.insert(args.end(), {"--out", dir + "/replay"});
  CHECK(run_flashcheck(args, 120).code == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("audit --accumulation reports the variants, and --save-case writes a case's inputs for compare", "[cpu]") {
  const std::string dir = scratch_dir("audit_acc");
  const RunResult r =
      run_flashcheck({"audit", "--accumulation", "--case", "acc/F16/positive_v/n64", "--out", dir}, 120);
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  const json rep = json::parse(slurp(dir + "/report.json"));
  CHECK(rep["kind"] == "accumulation");
  std::set<std::string> kernels;
  for (const json& cell : rep["cells"]) kernels.insert(cell["kernel"]);
  for (const char* k :
       {"cpu_tiled", "cpu_tiled:acc=f16", "cpu_tiled:p=f32", "cpu_tiled:fa1", "cpu_tiled:p=bf16", "cpu_naive:acc=f16"})
    CHECK(kernels.count(k) == 1);
  CHECK(r.out.find("#### F16 positive_v: RMSE of o vs N") != std::string::npos);
  // fp16 accumulation is less accurate than fp32 on the same inputs.
  auto rmse = [&](const char* k) {
    for (const json& cell : rep["cells"])
      if (cell["kernel"] == k) return cell["tensors"]["o"]["rmse"].get<double>();
    return -1.0;
  };
  CHECK(rmse("cpu_tiled:acc=f16") > 2 * rmse("cpu_tiled"));

  const std::string saved = dir + "/case.safetensors";
  REQUIRE(run_flashcheck({"audit", "--case", "F16/normal/n64", "--save-case", saved}).code == 0);
  CHECK(std::filesystem::file_size(saved) > 4 * 2 * 64 * 64 * 2);  // q k v d_o, 2 heads of 64 x 64 fp16
  std::filesystem::remove_all(dir);
}

namespace {

// Runs a cell's replay line (into dir) and returns the replayed report's one cell; code: its exit status.
json replay_cell(const std::string& replay, const std::string& dir, int* code) {
  std::vector<std::string> args;
  std::istringstream words(replay.substr(std::string("flashcheck ").size()));
  for (std::string w; words >> w;) args.push_back(w);
  args.insert(args.end(), {"--out", dir});
  *code = run_flashcheck(args, 60).code;
  const json again = json::parse(slurp(dir + "/report.json"));
  REQUIRE(again["cells"].size() == 1);
  return again["cells"][0];
}

}  // namespace

TEST_CASE("variant cells carry every metric, only for kernels that declare the variant, and replay", "[cpu]") {
  const std::string dir = scratch_dir("audit_variants");
  // cpu_tiled declares every variant; the mutant measures the window from the other alignment's row.
  const RunResult r =
      run_flashcheck({"audit", "--quick", "--dtype", "F32", "--regime", "normal,window,paged,strides", "--kernel",
                      "cpu_tiled", "--kernel", "mutant_window_other_alignment", "--out", dir + "/a"},
                     120);
  CAPTURE(r.out, r.err);
  CHECK(r.code == 1);
  const json rep = json::parse(slurp(dir + "/a/report.json"));
  std::map<std::string, std::string> regime;
  for (const json& c : rep["cases"]) regime[c["id"]] = c["regime"];
  const json* normal = nullptr;
  for (const json& cell : rep["cells"])
    if (cell["kernel"] == "cpu_tiled" && regime[cell["case"]] == "normal") normal = &cell;
  REQUIRE(normal);
  std::set<std::string> seen;
  std::string failed, failed_case, paged;
  for (const json& cell : rep["cells"]) {
    const std::string rg = regime[cell["case"]];
    CAPTURE(cell["case"], cell["kernel"]);
    seen.insert(rg);
    if (cell["kernel"] == "cpu_tiled" && rg != "normal") {
      CHECK(cell["status"] == "pass");
      // The same tensors and, in each, the same metrics as a dense cell's (both passing).
      REQUIRE(cell["tensors"].size() == (*normal)["tensors"].size());
      for (const auto& [name, m] : (*normal)["tensors"].items()) {
        std::set<std::string> want, got;
        for (const auto& [k, v] : m.items()) want.insert(k);
        for (const auto& [k, v] : cell["tensors"][name].items()) got.insert(k);
        CHECK(got == want);
      }
      if (rg == "paged") paged = cell["replay"];
    }
    if (cell["kernel"] != "cpu_tiled" && cell["status"] == "fail" && rg == "window")
      failed = cell["replay"], failed_case = cell["case"];
  }
  CHECK(seen == std::set<std::string>{"normal", "window", "paged", "strides"});
  // The paged case as a replay line: the same cell, number for number.
  REQUIRE_FALSE(paged.empty());
  int code = -1;
  json again = replay_cell(paged, dir + "/paged", &code);
  CHECK(code == 0);
  for (const json& cell : rep["cells"])
    if (cell["replay"] == paged) CHECK(again["tensors"] == cell["tensors"]);
  // The mutant's failing window cell, replayed, fails with the same numbers.
  REQUIRE_FALSE(failed.empty());
  CHECK(failed == "flashcheck audit --kernel mutant_window_other_alignment --case " + failed_case + " --seed 1");
  again = replay_cell(failed, dir + "/window", &code);
  CHECK(code == 1);
  for (const json& cell : rep["cells"])
    if (cell["replay"] == failed) CHECK(again["tensors"] == cell["tensors"]);
  std::filesystem::remove_all(dir);
}

TEST_CASE("contract v3 regimes: cells pass on the CPU kernels, cpu_naive gets no sinks cell, and they replay",
          "[cpu]") {
  const std::string dir = scratch_dir("audit_v3");
  const RunResult r =
      run_flashcheck({"audit", "--dtype", "F16", "--regime", "sinks,padded_varlen,mask_bool,mask_additive,block_mask",
                      "--kernel", "cpu_naive", "--kernel", "cpu_tiled", "--out", dir + "/a"},
                     120);
  CAPTURE(r.out, r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("flashcheck audit: PASS") != std::string::npos);
  const json rep = json::parse(slurp(dir + "/a/report.json"));
  std::map<std::string, std::string> regime;
  for (const json& c : rep["cases"]) regime[c["id"]] = c["regime"];
  std::map<std::string, std::set<std::string>> regimes_of;  // kernel -> regimes it got
  std::string masked;
  for (const json& cell : rep["cells"]) {
    CAPTURE(cell["case"], cell["kernel"]);
    CHECK(cell["status"] == "pass");
    regimes_of[cell["kernel"]].insert(regime[cell["case"]]);
    if (cell["kernel"] == "cpu_tiled" && regime[cell["case"]] == "mask_additive") masked = cell["replay"];
  }
  CHECK(regimes_of["cpu_tiled"] ==
        std::set<std::string>{"sinks", "padded_varlen", "mask_bool", "mask_additive", "block_mask"});
  CHECK(regimes_of["cpu_naive"] == std::set<std::string>{"padded_varlen", "mask_bool", "mask_additive", "block_mask"});
  REQUIRE_FALSE(masked.empty());
  int code = -1;
  const json again = replay_cell(masked, dir + "/replay", &code);
  CHECK(code == 0);
  for (const json& cell : rep["cells"])
    if (cell["replay"] == masked) CHECK(again["tensors"] == cell["tensors"]);
  std::filesystem::remove_all(dir);
}
