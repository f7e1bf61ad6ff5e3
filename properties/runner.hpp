// Running laws over a kernel: regression cases first (like Hypothesis's example database), then
// RapidCheck's random cases with shrinking, driven through rc::detail::checkProperty ourselves so
// that a failure yields a replay token that works (RapidCheck's `reproduce` is silently ignored
// under its Catch2 wrapper, which never sets a test id). A coverage health check fails a law whose
// budget never reached a regime it claims.
#pragma once

#include <cstdint>
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
  std::string case_file;        // replay one regression file
  std::string regressions_dir;  // replayed before random cases; "" = none
  bool save_failures = false;   // write each minimal counterexample into regressions_dir
  std::string replay_prefix;    // the command that selects the kernel in replay lines; "" = "flashcheck
                                // check --kernel NAME" (a plugin: --plugin PATH; Python: its own)
};

struct LawResult {
  bool applies = true;  // false: the kernel does not claim what the law needs
  bool ok = true;
  int cases = 0;               // cases that passed
  std::string message;         // why the law failed
  std::string counterexample;  // the minimal case, printed
  std::string replay;          // one command line replaying exactly that case
  std::string saved;           // regression file written, if any
  std::map<Regime, int> coverage;
  int declined = 0;  // generated cases the kernel's supports() declined (not run, not failures)
};

// The default regressions folder (properties/regressions in the source tree).
std::string default_regressions_dir();

LawResult run_law(const Law& law, const Kernel& k, const RunOptions& opt);

// Every applicable law (or only `law_id`); prints one line per law and, on failure, the
// counterexample and replay line. True when every law held.
// `results`, when given, receives (law id, result) for every law, applicable or not.
bool run_suite(const Kernel& k, const RunOptions& opt, std::ostream& log, const std::string& law_id = "",
               std::vector<std::pair<std::string, LawResult>>* results = nullptr);

std::string replay_line(const std::string& kernel, const std::string& law, const std::string& token);
// The prefix of a kernel's replay lines under opt ("flashcheck check --kernel NAME" by default).
std::string replay_prefix(const Kernel& k, const RunOptions& opt);

}  // namespace fc::props
