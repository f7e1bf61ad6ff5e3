// The typed layer under every front end of `check` and `audit`: the CLI (cli/main.cpp) parses its
// argv into a CheckRequest or AuditRequest, the C API (capi/) copies its request structs
// (<flashcheck/flashcheck.h>) into them, and both call run_check or run_audit, which validate the
// request (the ranges and names the CLI's parser also checks: UsageError, one line) and return the
// exit code with the results.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/plugin_options.hpp"
#include "properties/runner.hpp"

namespace fc::cli {

// `flashcheck check`'s options (cli/cmd_check.cpp says what each does).
struct CheckRequest {
  std::string kernel, law, reproduce, case_file, inputs, json_out;
  std::string regressions;  // "": the source tree's properties/regressions (absent from an install: none)
  std::vector<std::string> kernels;
  int cases = 100, shrink_faults = props::RunOptions{}.shrink_faults,
      replay_repeats = props::RunOptions{}.replay_repeats;
  uint64_t seed = 0;
  bool seed_given = false;  // false: a random seed, printed
  bool save = false, kill_matrix = false, list_laws = false, json = false, fail_inconclusive = false,
       allow_inconclusive = false, no_progress = false;
  PluginArgs plugin;
  std::string oracle = "auto";  // cpu | gpu | auto
  int jobs = 1;                 // laws at once, each in a process of its own (0: one per hardware thread)
  std::string law_record;       // a law process of --jobs: its result's file (cli/check_jobs.hpp)
};

// `flashcheck audit`'s options (cli/cmd_audit.cpp).
struct AuditRequest {
  std::vector<std::string> kernels, dtypes, regimes, cases;
  bool quick = false, accumulation = false, as_json = false;
  uint64_t seed = 1;
  std::string out = "reports/out", junit, shard, save_case;
  int jobs = 0;  // 0: the hardware threads
  std::string oracle = "auto";
  PluginArgs plugin;  // --plugin lib.so: a kernel of the user's, audited like a registry kernel
};

// One law's verdict, as check's JSON has it.
struct LawOutcome {
  std::string id, status, message;  // status: pass | fail | inconclusive | n/a
  int64_t cases = 0, regression_cases = 0, declined = 0;
};

struct Outcome {
  int code = kExitPass;
  std::string json;  // check: every law's result (--json-out's document); audit: report.json; "" when none
  std::vector<LawOutcome> laws;
};

// `ext`: the kernel of the program embedding flashcheck (nullptr: the request's --kernel or --plugin).
// Bad usage throws UsageError (or io::FileError).
Outcome run_check(const CheckRequest& r, const ExternalKernel* ext);
Outcome run_audit(const AuditRequest& r, const ExternalKernel* ext);

// The ranges and names the CLI's parser checks, for a request built without it (UsageError).
void validate(const CheckRequest& r);
void validate(const AuditRequest& r);

}  // namespace fc::cli
