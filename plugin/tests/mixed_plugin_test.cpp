// Per-tensor dtypes end to end (examples/plugin_cpu/attention_mixed.c): a kernel that takes q and o in
// F32 with an F16 or BF16 K/V cache declares those combinations, is probed on them (supports() sees
// each tensor's dtype), is drawn inside them, and passes; reading K as bf16, or rounding o to fp16,
// is killed; a failing case is saved with its dtypes and replays from the file; the example host
// kernel's backward, given per-tensor dtypes, passes. FC_LONG_TEST: every law at 100 cases (the short
// variant: the reference law at 100 cases, the backward's laws at 25).
#include "tests/catch.hpp"
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "io/safetensors.hpp"
#include "plugin/tests/run_cli.hpp"

using namespace fc::plugin::testing;

namespace {

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

struct MixedRun {
  Ran ran;
  nlohmann::json laws;  // id -> law object
};
MixedRun check(const std::string& plugin, std::vector<std::string> extra, const std::string& regressions = "") {
  const std::string json =
      (std::filesystem::temp_directory_path() / ("fc_mixed_" + plugin + std::to_string(::getpid()) + ".json")).string();
  std::vector<std::string> args = {"check",
                                   "--plugin",
                                   plugin_path(plugin),
                                   "--json-out",
                                   json,
                                   "--regressions",
                                   regressions.empty() ? no_regressions() : regressions};
  args.insert(args.end(), extra.begin(), extra.end());
  MixedRun c;
  c.ran = run_cli(args, 1200);
  c.laws = nlohmann::json::object();
  std::ifstream in(json);
  if (in) {
    const nlohmann::json r = nlohmann::json::parse(in);
    for (const auto& l : r.at("laws")) c.laws[l.at("id").get<std::string>()] = l;
  }
  std::filesystem::remove(json);
  return c;
}

}  // namespace

TEST_CASE("per-tensor dtypes: the declared combinations are what the kernel lists", "[cpu]") {
  const Ran r = run_cli({"kernels", "--plugin", plugin_path("plugin_mixed_none"), "--json"});
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  const nlohmann::json k = nlohmann::json::parse(r.out).at("kernels").at(0);
  CHECK(k.at("dtypes").empty());  // no single dtype: it takes only its mixed calls
  const nlohmann::json want =
      nlohmann::json::parse(R"([{"q": "F32", "kv": "F16", "o": "F32"}, {"q": "F32", "kv": "BF16", "o": "F32"}])");
  CHECK(k.at("mixed_dtypes") == want);
  const Ran text = run_cli({"kernels", "--plugin", plugin_path("plugin_mixed_none")});
  CHECK(text.out.find("F32/F16/F32,F32/BF16/F32") != std::string::npos);
}

TEST_CASE("per-tensor dtypes: an unknown dtype code, or a combination supports() declines, is one line and exit 2",
          "[cpu]") {
  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {"plugin_mixed_bad1", "declarations.dtypes[1] = {3, 9, 3}"},
           {"plugin_mixed_bad2", "declarations.dtypes names {F16}, but supports() declines it"}}) {
    const Ran r = run_cli({"check", "--plugin", plugin_path(bad)});
    CAPTURE(bad, r.out, r.err);
    CHECK(r.code == 2);
    CHECK(r.err.find(why) != std::string::npos);
    CHECK(r.err_lines() == 1);
  }
}

TEST_CASE("per-tensor dtypes: a correct mixed kernel passes every law that applies", "[cpu]") {
#ifdef FC_LONG_TEST
  const MixedRun c = check("plugin_mixed_none", {"--cases", "100", "--seed", "7"});
#else
  const MixedRun c = check("plugin_mixed_none", {"--law", "reference", "--cases", "100", "--seed", "7"});
#endif
  CAPTURE(c.ran.out, c.ran.err);
  CHECK(c.ran.code == 0);
  CHECK(count(c.ran.out, "FAIL") == 0);
  REQUIRE(c.laws.contains("reference"));
  for (const auto& [id, l] : c.laws.items()) {
    CAPTURE(id);
    CHECK((l.at("status") == "pass" || l.at("status") == "n/a"));
    if (l.at("status") == "pass") {
      CHECK(l.at("cases").get<int>() >= 100);
      CHECK(l.at("declined").get<int>() == 0);  // drawn inside the declared combinations, never rejected
    }
  }
  CHECK(c.laws["reference"].at("status") == "pass");
#ifdef FC_LONG_TEST
  // The laws its exactness and tiles open reach it (the kernel has no backward: those laws are n/a).
  for (const char* id : {"shift", "affine_v", "kv_permutation", "q_permutation", "extreme", "determinism"}) {
    CAPTURE(id);
    REQUIRE(c.laws.contains(id));
    CHECK(c.laws[id].at("status") == "pass");
  }
#endif
}

TEST_CASE("per-tensor dtypes: a backward's gradients are held in their own tensors' dtypes", "[cpu]") {
#ifdef FC_LONG_TEST
  const std::string cases = "100";
#else
  const std::string cases = "25";
#endif
  const MixedRun c = check("plugin_mixed_cpu", {"--cases", cases, "--seed", "11"});
  CAPTURE(c.ran.out, c.ran.err);
  CHECK(c.ran.code == 0);
  CHECK(count(c.ran.out, "FAIL") == 0);
  for (const char* id : {"reference", "extreme", "nan_blast", "determinism", "affine_v", "invisible_keys"}) {
    CAPTURE(id);
    REQUIRE(c.laws.contains(id));
    CHECK(c.laws[id].at("status") == "pass");
  }
  for (const auto& [id, l] : c.laws.items()) {
    CAPTURE(id);
    CHECK((l.at("status") == "pass" || l.at("status") == "n/a"));
  }
}

TEST_CASE("per-tensor dtypes: K read as bf16, or o rounded to fp16, is killed; the case replays from its file",
          "[cpu]") {
  for (const char* plugin : {"plugin_mixed_k_bf16", "plugin_mixed_o_f16"}) {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / (std::string("fc_mixed_reg_") + plugin + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const MixedRun bad =
        check(plugin, {"--law", "reference", "--cases", "30", "--seed", "5", "--save-regressions"}, dir.string());
    CAPTURE(plugin, bad.ran.out, bad.ran.err);
    CHECK(bad.ran.code == 1);
    CHECK(bad.ran.out.find("FAIL  reference") != std::string::npos);
    CHECK(bad.ran.out.find("q=F32 kv=") != std::string::npos);  // the counterexample names its dtypes
    // The saved case carries its per-tensor dtypes: the correct kernel passes it, the faulty one fails it.
    std::string file;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
      if (e.path().extension() == ".safetensors") file = e.path().string();
    REQUIRE(!file.empty());
    const Ran good =
        run_cli({"check", "--plugin", plugin_path("plugin_mixed_none"), "--law", "reference", "--case", file});
    CAPTURE(good.out, good.err);
    CHECK(good.code == 0);
    const Ran again = run_cli({"check", "--plugin", plugin_path(plugin), "--law", "reference", "--case", file});
    CAPTURE(again.out, again.err);
    CHECK(again.code == 1);
    // `compare` on the case: the reference's o stored in o's F32 passes beside the baseline (run in the
    // finest dtype); rounded to fp16 first it fails; stored as F16 it is refused (o's dtype is F32).
    const std::string ref = (dir / "ref.safetensors").string();
    REQUIRE(run_cli({"reference", "--inputs", file, "--out", ref}).code == 0);
    const fc::io::TensorFile exact = fc::io::read_safetensors(ref);
    auto outputs = [&](const char* name, fc::DType stored, fc::DType rounded) {
      fc::io::TensorFile f;
      const fc::HostTensor& o = exact.tensors.at("o");
      std::vector<double> x = o.to_f64();
      for (double& y : x) y = fc::round_to(rounded, y);
      f.tensors["o"] = fc::HostTensor::from_f64(stored, o.shape, x);
      f.tensors["lse"] = fc::HostTensor::from_f64(fc::DType::F32, exact.tensors.at("lse").shape,
                                                   exact.tensors.at("lse").to_f64());
      const std::string path = (dir / name).string();
      fc::io::write_safetensors(path, f);
      return path;
    };
    const std::string report = (dir / "report").string();
    const Ran pass = run_cli({"compare", "--inputs", file, "--outputs", outputs("good.safetensors", fc::DType::F32,
                                                                               fc::DType::F32),
                              "--rounding", "nearest", "--p-f32", "--block-n", "64", "--out", report});
    CAPTURE(pass.out, pass.err);
    CHECK(pass.code == 0);
    std::ifstream in(report + "/report.json");
    const nlohmann::json r = nlohmann::json::parse(in);
    CHECK(r.at("cases").at(0).at("dtype").get<std::string>().rfind("q=F32 kv=", 0) == 0);
    const Ran fail = run_cli({"compare", "--inputs", file, "--outputs",
                              outputs("o16.safetensors", fc::DType::F32, fc::DType::F16), "--rounding", "nearest",
                              "--p-f32", "--block-n", "64", "--out", report});
    CAPTURE(fail.out, fail.err);
    CHECK(fail.code == 1);
    const Ran refused = run_cli({"compare", "--inputs", file, "--outputs",
                                 outputs("f16.safetensors", fc::DType::F16, fc::DType::F16)});
    CAPTURE(refused.out, refused.err);
    CHECK(refused.code == 2);
    CHECK(refused.err.find("tensor \"o\" is F16, expected F32") != std::string::npos);
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("per-tensor dtypes: a version-2 plugin loads and runs unchanged beside them", "[cpu]") {
  const MixedRun c = check("plugin_cpu_abi2", {"--law", "reference", "--cases", "20", "--seed", "2"});
  CAPTURE(c.ran.out, c.ran.err);
  CHECK(c.ran.code == 0);
  REQUIRE(c.laws.contains("reference"));
  CHECK(c.laws["reference"].at("status") == "pass");
}
