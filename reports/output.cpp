#include "reports/output.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <thread>

#include "io/atomic_file.hpp"
#include "io/errors.hpp"
#include "reports/render.hpp"
#include "reports/report.hpp"

namespace fc::report {

extern const char kBuildCommit[];  // build_info.cpp (build_info.cmake)

namespace {
std::string in_dir(const std::string& dir, const char* name) { return (std::filesystem::path(dir) / name).string(); }
}  // namespace

void check_output_paths(const std::string& dir, const std::string& junit, const std::vector<std::string>& inputs) {
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (!std::filesystem::is_directory(dir, ec))
      throw io::FileError(io::FileFault::Io, dir, "cannot create the output folder");
    for (const char* name : {"report.json", "report.md", "report.html", "run.json"})
      io::check_output_path(in_dir(dir, name), inputs);
  }
  if (!junit.empty()) io::check_output_path(junit, inputs);
}

nlohmann::json run_metadata(const RunInfo& info) {
  char host[256] = "unknown";
  if (gethostname(host, sizeof host) != 0) std::snprintf(host, sizeof host, "unknown");
  host[sizeof host - 1] = 0;
  const std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  nlohmann::json r = {{"schema", "flashcheck-run"},
                      {"version", 1},
                      {"report", "report.json"},
                      {"command", info.command},
                      {"finished_utc", std::string(when)},
                      {"elapsed_s", std::round(info.elapsed_s * 10) / 10},
                      {"host", std::string(host)},
                      {"hardware_threads", std::thread::hardware_concurrency()},
                      {"jobs", info.jobs},
                      {"commit", std::string(kBuildCommit)}};
  if (!info.stages.empty()) {
    nlohmann::json st = nlohmann::json::object();
    for (const auto& [name, s] : info.stages) st[name] = std::round(s * 100) / 100;
    r["stages_s"] = st;
  }
  return r;
}

std::vector<std::string> write_outputs(const std::string& dir, const std::string& junit, const nlohmann::json& report,
                                       const RunInfo& info, const std::vector<std::string>& inputs) {
  std::vector<std::string> wrote;
  if (!dir.empty()) {
    // The renderings first and report.json last: a reader polling report.json sees a finished set.
    std::vector<std::pair<const char*, std::string>> files = {{"report.md", render_markdown(report)}};
    if (report.value("kind", "") != "fuzz") files.push_back({"report.html", render_html(report)});  // cells only
    files.push_back({"run.json", run_metadata(info).dump(2) + "\n"});
    files.push_back({"report.json", dump(report)});
    for (const auto& [name, bytes] : files) {
      io::write_file_atomic(in_dir(dir, name), bytes, inputs);
      wrote.push_back(in_dir(dir, name));
    }
  }
  if (!junit.empty()) {
    io::write_file_atomic(junit, render_junit(report), inputs);
    wrote.push_back(junit);
  }
  return wrote;
}

}  // namespace fc::report
