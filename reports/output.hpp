// Writing a report's files: DIR/report.json, report.md, report.html and run.json (the run's
// metadata: time, host, commit, jobs — everything that may differ between two runs of the same
// sweep), each replaced atomically (io/atomic_file.hpp), so an interrupted run leaves the previous
// report readable. JUnit XML goes wherever --junit says.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace fc::report {

struct RunInfo {
  std::string command;  // e.g. "flashcheck audit --quick"
  int jobs = 1;
  double elapsed_s = 0;
  // Where the wall time went (`compare`: files, oracle, bound, baseline, metrics), seconds by stage:
  // run.json's `stages_s` when not empty.
  std::vector<std::pair<std::string, double>> stages;
};

// Refuses an unusable DIR (or junit path) up front, before minutes of work: exit 2 material. An
// output that is one of `inputs` (the files the command reads) is refused too.
void check_output_paths(const std::string& dir, const std::string& junit, const std::vector<std::string>& inputs = {});
// Writes the files; returns their paths.
std::vector<std::string> write_outputs(const std::string& dir, const std::string& junit, const nlohmann::json& report,
                                       const RunInfo& info, const std::vector<std::string>& inputs = {});
// The run metadata object (run.json).
nlohmann::json run_metadata(const RunInfo& info);

}  // namespace fc::report
