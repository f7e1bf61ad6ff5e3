// libflashcheck.so's typed API (<flashcheck/flashcheck.h>) as an embedding program calls it: a check
// and an audit on the example CPU plugin's kernel in this process and served by a worker command, the
// result's law entries and JSON, the argv front end, and every malformed request (NULL fields, a wrong
// struct_size, an unknown law, an enum value out of range) exit 2 with one line, never a crash.
#include <dlfcn.h>
#include <flashcheck/flashcheck.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/catch.hpp"

namespace {

const fc_kernel* plugin_kernel(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);  // kept loaded for the test's life
  REQUIRE(h);
  auto get = reinterpret_cast<const fc_kernel* (*)()>(dlsym(h, "flashcheck_kernel"));
  REQUIRE(get);
  return get();
}

void keep(const char* text, size_t size, void* ctx) { static_cast<std::string*>(ctx)->append(text, size); }

flashcheck_subject subject_of(const fc_kernel* k, std::string* report) {
  flashcheck_subject s{};
  s.struct_size = sizeof s;
  s.kernel = k;
  s.replay_prefix = "capi_test {cmd}";
  s.write = keep;
  s.write_ctx = report;
  return s;
}

flashcheck_check_request check_request(const flashcheck_subject& s, const char* law, int32_t cases) {
  flashcheck_check_request r{};
  r.struct_size = sizeof r;
  r.subject = s;
  r.law = law;
  r.cases = cases;
  r.seed_given = 1;
  r.seed = 1;
  r.no_progress = 1;
  return r;
}

// A result of a request that should be exit 2: its one-line reason.
std::string usage_error(const flashcheck_check_request* r) {
  flashcheck_result res{};
  res.struct_size = sizeof res;
  const int code = flashcheck_check(r, &res);
  CHECK(code == 2);
  CHECK(res.exit_code == 2);
  REQUIRE(res.error);
  const std::string error = res.error;
  CHECK(!error.empty());
  CHECK(error.find('\n') == std::string::npos);
  CHECK(res.num_laws == 0);
  flashcheck_result_free(&res);
  return error;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("check on a kernel in this process: the exit code, the law entries and the JSON", "[cpu]") {
  std::string report;
  const flashcheck_check_request r = check_request(subject_of(plugin_kernel(PLUGIN_OK), &report), "reference", 5);
  flashcheck_result res{};
  res.struct_size = sizeof res;
  REQUIRE(flashcheck_check(&r, &res) == 0);
  CHECK(res.exit_code == 0);
  CHECK(std::string(res.error).empty());
  REQUIRE(res.num_laws == 1);
  const flashcheck_law_result* law = flashcheck_result_law(&res, 0);
  CHECK(law->struct_size == sizeof(flashcheck_law_result));
  CHECK(std::string(law->id) == "reference");
  CHECK(law->status == FLASHCHECK_LAW_PASS);
  const nlohmann::json j = nlohmann::json::parse(std::string(res.json, res.json_size));
  CHECK(law->cases >= 5);  // 5 random cases per law (and per config the law runs them on)
  CHECK(j["laws"][0]["cases"] == law->cases);
  CHECK(j["seed"] == 1);
  CHECK(j["laws"].size() == 1);
  CHECK(j["laws"][0]["status"] == "pass");
  CHECK(contains(report, "every law holds"));
  flashcheck_result_free(&res);
  CHECK(res.json == nullptr);
  flashcheck_result_free(&res);  // twice: nothing
}

TEST_CASE("a failing law is exit 1 with a fail entry whose message says why", "[cpu]") {
  std::string report;
  const flashcheck_check_request r = check_request(subject_of(plugin_kernel(PLUGIN_ERROR), &report), "reference", 20);
  flashcheck_result res{};
  res.struct_size = sizeof res;
  CHECK(flashcheck_check(&r, &res) == 1);
  REQUIRE(res.num_laws == 1);
  const flashcheck_law_result* law = flashcheck_result_law(&res, 0);
  CHECK(law->status == FLASHCHECK_LAW_FAIL);
  CHECK(contains(law->message, "refusing n_k"));
  CHECK(contains(report, "capi_test check"));  // the replay line starts with the caller's prefix
  flashcheck_result_free(&res);
}

TEST_CASE("a worker command gets the request's environment, and this process keeps its own", "[cpu]") {
  REQUIRE(std::getenv("FC_CAPI_TEST_ENV") == nullptr);
  // The worker starts only when the variable reached it.
  const std::string script =
      std::string("test \"$FC_CAPI_TEST_ENV\" = yes && exec ") + FLASHCHECK_BIN + " __worker " + PLUGIN_OK;
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  const char* env[] = {"FC_CAPI_TEST_ENV=yes", nullptr};
  std::string report;
  flashcheck_check_request r = check_request(subject_of(nullptr, &report), "reference", 3);
  r.subject.worker_argv = argv;
  r.subject.worker_env = env;
  flashcheck_result res{};
  res.struct_size = sizeof res;
  CHECK(flashcheck_check(&r, &res) == 0);
  CAPTURE(res.error, report);
  flashcheck_result_free(&res);
  CHECK(std::getenv("FC_CAPI_TEST_ENV") == nullptr);
  // Without it the worker exits before it is ready: exit 2, one line.
  const char* none[] = {"OTHER=1", nullptr};
  r.subject.worker_env = none;
  CHECK(contains(usage_error(&r), "before it was ready"));
}

TEST_CASE("malformed requests are exit 2 with one line", "[cpu]") {
  std::string report;
  const flashcheck_subject s = subject_of(plugin_kernel(PLUGIN_OK), &report);
  const flashcheck_check_request good = check_request(s, "reference", 2);
  CHECK(contains(usage_error(nullptr), "NULL"));
  flashcheck_check_request r = good;
  r.struct_size = sizeof r - 8;
  CHECK(contains(usage_error(&r), "struct_size"));
  r = good;
  r.subject.struct_size = 0;
  CHECK(contains(usage_error(&r), "flashcheck_subject.struct_size"));
  r = good;
  r.subject.kernel = nullptr;
  CHECK(contains(usage_error(&r), "neither a kernel nor a worker command"));
  r = good;
  r.law = "no_such_law";
  CHECK(contains(usage_error(&r), "unknown law"));
  r = good;
  r.oracle = 7;
  CHECK(contains(usage_error(&r), "oracle"));
  r = good;
  r.layout = -1;
  CHECK(contains(usage_error(&r), "layout"));
  r = good;
  r.on_inconclusive = 3;
  CHECK(contains(usage_error(&r), "on_inconclusive"));
  r = good;
  r.seed_given = 2;
  CHECK(contains(usage_error(&r), "seed_given"));
  r = good;
  r.cases = -1;
  CHECK(contains(usage_error(&r), "--cases -1"));
  r = good;
  r.timeout_s = -1;
  CHECK(contains(usage_error(&r), "--timeout"));
  r = good;
  r.reproduce = "token";
  r.law = nullptr;
  CHECK(contains(usage_error(&r), "need --law"));
  const char* env[] = {"NO_EQUALS_SIGN", nullptr};
  const char* argv[] = {"/bin/true", nullptr};
  r = good;
  r.subject.kernel = nullptr;
  r.subject.worker_argv = argv;
  r.subject.worker_env = env;
  CHECK(contains(usage_error(&r), "KEY=VALUE"));
  // A result the library cannot fill: exit 2, nothing written.
  CHECK(flashcheck_check(&good, nullptr) == 2);
  flashcheck_result small{};
  small.struct_size = 4;
  CHECK(flashcheck_check(&good, &small) == 2);
  CHECK(small.error == nullptr);
  CHECK(report.empty());  // no request above ran a law
}

TEST_CASE("audit on a kernel in this process: report.json in memory and in the folder", "[cpu]") {
  const std::filesystem::path out = std::filesystem::temp_directory_path() / "flashcheck_capi_audit";
  std::filesystem::remove_all(out);
  std::string report;
  flashcheck_audit_request r{};
  r.struct_size = sizeof r;
  r.subject = subject_of(plugin_kernel(PLUGIN_OK), &report);
  const std::string dir = out.string();
  r.out = dir.c_str();
  const char* cases[] = {"F32/normal/n16", nullptr};
  r.cases = cases;
  r.jobs = 1;
  flashcheck_result res{};
  res.struct_size = sizeof res;
  CHECK(flashcheck_audit(&r, &res) == 0);
  CAPTURE(res.error);
  const nlohmann::json j = nlohmann::json::parse(std::string(res.json, res.json_size));
  CHECK(j["verdict"]["status"] == "pass");
  CHECK(std::filesystem::exists(out / "report.json"));
  CHECK(contains(report, "wrote"));
  flashcheck_result_free(&res);
  r.oracle = 3;
  CHECK(flashcheck_audit(&r, &res) == 2);
  CHECK(contains(res.error, "oracle"));
  flashcheck_result_free(&res);
  const char* bad[] = {"F32/normal/n16", "no/such/case", nullptr};
  r.oracle = FLASHCHECK_ORACLE_AUTO;
  r.cases = bad;
  CHECK(flashcheck_audit(&r, &res) == 2);
  CHECK(std::string(res.error).find('\n') == std::string::npos);
  flashcheck_result_free(&res);
  std::filesystem::remove_all(out);
}

TEST_CASE("flashcheck_run parses a command line into the same request", "[cpu]") {
  std::string report;
  const flashcheck_subject s = subject_of(plugin_kernel(PLUGIN_OK), &report);
  char error[512];
  const char* ok[] = {"check", "--law", "reference", "--cases", "2", "--seed", "1", "--no-progress"};
  CHECK(flashcheck_run(&s, 8, ok, error, sizeof error) == 0);
  CHECK(contains(report, "every law holds"));
  const char* bad[] = {"check", "--oracle", "tpu"};
  CHECK(flashcheck_run(&s, 3, bad, error, sizeof error) == 2);
  CHECK(contains(error, "--oracle"));
  CHECK(flashcheck_run(nullptr, 3, bad, error, sizeof error) == 2);
  CHECK(contains(error, "NULL"));
}
