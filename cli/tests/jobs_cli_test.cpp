// `check --jobs N`: the laws in processes of their own give the report of `--jobs 1`, law for law
// (verdicts, counterexamples, replay lines, JSON), but for wall times; a law process that dies is an
// error naming the law, never a verdict.
#include "tests/catch.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli/tests/subprocess.hpp"

using namespace fc::cli::testing;
using nlohmann::json;

namespace {

// The report less its wall times: "(12 cases, 3.4 s)" -> "(12 cases)", "(...; 0.1 s)" -> "(...)".
std::string without_times(const std::string& report) {
  return std::regex_replace(report, std::regex("[,;] [0-9]+\\.[0-9] s\\)"), ")");
}

json without_seconds(json j) {
  for (json& law : j.at("laws")) law.erase("seconds");
  return j;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// `check ARGS --json-out` at --jobs 1 and at --jobs `jobs`: both reports and documents agree.
void same_report(const std::vector<std::string>& args, int jobs, int want_code) {
  const std::string dir = scratch_dir("jobs");
  std::vector<std::string> one = args, many = args;
  for (const std::string& a : {std::string("--no-progress"), std::string("--json-out")}) one.push_back(a), many.push_back(a);
  one.push_back(dir + "/one.json"), many.push_back(dir + "/many.json");
  many.insert(many.end(), {"--jobs", std::to_string(jobs)});
  const RunResult a = run_flashcheck(one, 600), b = run_flashcheck(many, 600);
  INFO(a.out << a.err << "\n---- --jobs " << jobs << ":\n" << b.out << b.err);
  CHECK(a.code == want_code);
  CHECK(b.code == want_code);
  CHECK(b.stderr_lines() == 0);
  CHECK(without_times(a.out) == without_times(b.out));
  CHECK(without_seconds(read_json(dir + "/one.json")) == without_seconds(read_json(dir + "/many.json")));
  std::filesystem::remove_all(dir);
}

}  // namespace

TEST_CASE("check --jobs: a correct kernel's report is that of --jobs 1", "[cpu]") {
  same_report({"check", "--kernel", "cpu_tiled", "--cases", "8", "--seed", "5"}, 3, 0);
}

TEST_CASE("check --jobs: a mutant fails with the counterexample and replay line of --jobs 1", "[cpu]") {
  same_report({"check", "--kernel", "mutant_no_l_rescale", "--cases", "8", "--seed", "3"}, 4, 1);
}

TEST_CASE("check --jobs: a law process that dies is exit 2 with one line naming the law", "[cpu]") {
  // In-process plugin whose forward segfaults once n_k > 3: the law's own process dies with it.
  const RunResult r =
      run_flashcheck({"check", "--plugin", PLUGIN_SEGV, "--isolation", "none", "--cases", "5", "--jobs", "2"}, 300);
  INFO(r.out << r.err);
  CHECK(r.code == 2);
  CHECK(r.stderr_lines() == 1);
  CHECK(r.err.find("flashcheck: error: --jobs: the process of law ") == 0);
  // (died of SIGSEGV; under AddressSanitizer, whose handler reports the fault, it exits 1 instead)
  CHECK(r.err.find("without a verdict") != std::string::npos);
}
