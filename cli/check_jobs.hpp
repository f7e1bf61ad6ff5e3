// `check --jobs N`: the laws of one suite in N processes at once. RapidCheck keeps its run's state in
// process-wide statics (rc::detail::ImplicitParam), so laws cannot share a process's threads; each law
// runs in a process of its own instead: this program again, with the user's command line, `--law ID`,
// the suite's seed and a file for its result. A law's cases depend on the seed and the law alone, so
// the verdicts, counterexamples and replay lines are those of `--jobs 1`; what differs is that every
// law meets a kernel (and a plugin worker) that no earlier law has called (docs/laws.md, "Laws in
// parallel").
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/registry.hpp"
#include "properties/runner.hpp"

namespace fc::cli {

// The command line as main() received it (argv[0] included): what a law's process is started with.
void set_command_line(int argc, char** argv);

// One law's outcome as its process wrote it (and as the parent prints and reports it).
struct LawRecord {
  std::string id;
  std::string block;      // print_result's text: the law's line and, on failure, its details
  nlohmann::json entry;   // the law's object of check's JSON (law_json)
  int restarts = 0;       // the plugin worker's restarts in that process
};

// What a law's process writes to the file named by the hidden option --law-record (and nothing else).
void write_law_record(const std::string& path, const LawRecord& r);

// Runs `ids` (laws that apply to the kernel, in the suite's order), at most `jobs` at once, each in a
// process of its own started with the command line given to set_command_line, less --jobs, --seed,
// --json-out, --law and --no-progress, plus `--law ID --seed seed --no-progress --law-record FILE`.
// Records come back in the order of `ids`. A process that ends without its record (a crash, an
// error) throws std::runtime_error naming the law and the last line it wrote to stderr. `progress`:
// a line per law that finishes once the run has taken progress_after_s (nullptr: none).
std::vector<LawRecord> run_laws_in_processes(const std::vector<std::string>& ids, int jobs, uint64_t seed,
                                             std::ostream* progress, double progress_after_s);

}  // namespace fc::cli
