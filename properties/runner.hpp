// Running laws over a kernel: regression cases first (like Hypothesis's example database), then
// RapidCheck's random cases with shrinking, driven through rc::detail::checkProperty ourselves so
// that a failure yields a replay token that works (RapidCheck's `reproduce` is silently ignored
// under its Catch2 wrapper, which never sets a test id). A coverage health check asks a real share
// of the budget for every regime a law claims: a regime that fell short is topped up with cases
// drawn from it alone, and a generator that still cannot show it fails the law.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "properties/laws.hpp"

namespace fc::props {

struct RunOptions {
  int cases = 100;              // random cases per law (RapidCheck maxSuccess)
  uint64_t seed = 1;            // RapidCheck seed
  std::string reproduce;        // replay exactly one (minimal) case: the token of a replay line
  std::string case_file;        // replay one regression file (any law named with it runs on it)
  std::string regressions_dir;  // replayed before random cases; "" = none
  bool save_failures = false;   // write each minimal counterexample into regressions_dir
  std::string replay_prefix;    // the command that selects the kernel in replay lines; "" = "flashcheck
                                // check --kernel NAME" (a plugin: --plugin PATH; Python: its own)
  // Shrinking a failure whose candidates fault (docs/laws.md, "Faults while shrinking"): once this
  // many candidates have faulted, the rest are not run and the smallest failing case so far is
  // reported, with a line saying that it may not be minimal. >= 1.
  int shrink_faults = 8;
  // Evaluations that faulted so far (a crash, a time-out, a broken CUDA context: each costs an
  // isolated kernel's worker a restart), e.g. a plugin Subject's faults(); empty: none can fault.
  std::function<int64_t()> faults;
};

struct LawResult {
  bool applies = true;         // false: the law cannot judge this kernel (not_applicable says why)
  std::string not_applicable;  // why not ("" when it applies)
  bool ok = true;
  int cases = 0;               // cases that passed
  int declined = 0;            // generated cases the kernel's supports() declined (not run)
  int discarded = 0;           // generated cases outside the law's domain (NotApplicable)
  std::string message;         // why the law failed
  std::string counterexample;  // the minimal case, printed
  std::string replay;          // one command line replaying exactly that case
  std::string saved;           // regression file written, if any
  int shrink_stopped = 0;      // > 0: shrinking stopped after this many faulting candidates
  std::map<Regime, int> coverage;
  std::map<std::string, int> paths;  // cases per shape path reached (shape_paths: decode, multi_tile, ...)
};

// The default regressions folder (properties/regressions in the source tree).
std::string default_regressions_dir();

// The share of the budget every claimed regime must reach: cases / (2 x claimed regimes), >= 1.
int coverage_share(int cases, int regimes);

LawResult run_law(const Law& law, const Kernel& k, const RunOptions& opt);

// The law on one input file (`check --inputs`): the file's tensors, mask and scale, and its law
// metadata (fc.* keys of a regression file) when present, else the kernel's first two configs.
// A law outside its domain on this input comes back with applies = false and the reason.
// `option` is how the replay line names the file ("--inputs" or "--case").
// `prefix` starts it (replay_prefix; "" = "flashcheck check --kernel NAME").
LawResult run_law_on_file(const Law& law, const Kernel& k, const std::string& file,
                          const std::string& option = "--inputs", const std::string& prefix = "");

// Every applicable law (or only `law_id`); prints one line per law and, on failure, the
// counterexample and replay line. True when every law held.
// `results`, when given, receives (law id, result) for every law, applicable or not.
bool run_suite(const Kernel& k, const RunOptions& opt, std::ostream& log, const std::string& law_id = "",
               std::vector<std::pair<std::string, LawResult>>* results = nullptr);

// Every law (or only `law_id`) on one input file. Returns 0 when every law that applies held, 1
// when one failed, 2 when none applies (each prints why): never "0 cases, every law holds".
int run_suite_on_file(const Kernel& k, const std::string& file, std::ostream& log, const std::string& law_id = "",
                      const std::string& option = "--inputs", const std::string& prefix = "");

// Prints a law's outcome: its line and, on failure, the message, counterexample and replay line.
void print_result(const Law& law, const LawResult& r, std::ostream& log);

std::string replay_line(const std::string& kernel, const std::string& law, const std::string& token);
// The prefix of a kernel's replay lines under opt ("flashcheck check --kernel NAME" by default).
std::string replay_prefix(const Kernel& k, const RunOptions& opt);

}  // namespace fc::props
