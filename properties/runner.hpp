// Running laws over a kernel: regression cases (like Hypothesis's example database) and RapidCheck's
// random cases with shrinking, both run and both reported, driven through rc::detail::checkProperty ourselves so
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

#include "properties/evidence.hpp"
#include "properties/laws.hpp"

namespace fc::props {

struct RunOptions {
  int cases = 100;              // random cases per law (RapidCheck maxSuccess)
  uint64_t seed = 1;            // RapidCheck seed
  std::string reproduce;        // replay exactly one (minimal) case: the token of a replay line
  std::string case_file;        // replay one regression file (any law named with it runs on it)
  std::string regressions_dir;  // replayed beside the random cases (both run); "" = none
  bool save_failures = false;   // write each minimal counterexample into regressions_dir
  std::string replay_prefix;    // the command that selects the kernel in replay lines; "" = "flashcheck
                                // check --kernel NAME" (a plugin: --plugin PATH; Python: its own)
  // Shrinking a failure whose candidates fault (docs/laws.md, "Faults while shrinking"): once this
  // many candidates have faulted, the rest are not run and the smallest failing case so far is
  // reported, with a line saying that it may not be minimal. >= 1.
  int shrink_faults = 8;
  // Evaluations that faulted so far (a crash, a time-out, a broken CUDA context: each costs an
  // isolated kernel's worker a restart), e.g. a PluginKernel's faults(); empty: none can fault.
  std::function<int64_t()> faults;
  // A replay (reproduce) whose case passes is run this many more times: "nondeterministic: k of n
  // repeats fail" when some fail, inconclusive ("did not reproduce") when none does.
  int replay_repeats = 10;
  // Progress (docs/laws.md, "Progress and time"): a line per law on `progress` once a law has run
  // progress_after_s seconds, then every progress_every_s (a TTY: one line rewritten in place, cleared
  // when the law ends). nullptr: none. `clock` (seconds, monotonic): steady_clock when empty.
  std::ostream* progress = nullptr;
  bool progress_tty = false;
  double progress_after_s = 2, progress_every_s = 10;
  std::function<double()> clock;
  // Called before every case runs (the law's id, the case's problem): e.g. to name the case a
  // time-out from outside cuts (cmd_check's signal handler).
  std::function<void(const std::string& law, const Problem& p)> on_case;
};

// A failure on one source of cases: the random cases (source "random") or one regression file (its path).
struct Failure {
  std::string source;
  std::string message, counterexample, replay;
};

// What a law's draw met (the cases it generated, those the kernel declined and those outside the law),
// for an inconclusive law's hint: the values drawn per axis and a sample of declined and accepted
// problems, on which probe_declines asks the kernel which property of an accepted problem a
// declined one lacks.
struct DrawStats {
  int drawn = 0, declined = 0, discarded = 0, accepted = 0;
  std::map<std::string, std::map<int64_t, int>> declined_values, accepted_values;  // axis -> value -> count
  std::map<std::string, int> discard_reasons;                                      // NotApplicable's messages
  std::vector<Problem> declined_sample, accepted_sample;                           // the first kSample of each
  int probed = 0;                       // declined problems probe_declines asked about
  std::map<std::string, int> blockers;  // property -> probed problems it alone opens
  static constexpr size_t kSample = 16;
  void add(const Problem& p, bool declined_it);
};

// For each sampled declined problem: the properties (lengths, head dim, dtype, mask, batch, heads)
// of a sampled accepted one that, copied alone, make the kernel claim it (claims(): its declarations
// and supports()). At most kSample x 6 x kSample calls; none when nothing was accepted.
void probe_declines(const Kernel& k, DrawStats& s);

// An inconclusive law's reason and what would open it (the declaration or the option): the one place
// its wording lives. `wanted`: the cases the law asked for.
std::string inconclusive_hint(const DrawStats& s, int wanted);
// Why law cannot judge kernel k, naming what is missing ("" when law_applies(law, k)): the claim
// (a backward, a mask, two configurations, a variant, an exactness property) and where it is declared.
std::string law_lacks(const Law& law, const Kernel& k);

struct LawResult {
  bool applies = true;         // false: the law cannot judge this kernel (not_applicable says why)
  std::string not_applicable;  // why not ("" when it applies)
  bool ok = true;              // false: failed, or inconclusive
  bool inconclusive = false;   // too few accepted cases to judge (never a failure): message and hint say why
  std::string hint;            // inconclusive: the declaration or option that would open the law
  int cases = 0;               // cases that passed (regression files and random cases)
  int regression_cases = 0;    // regression files run (passed or failed)
  bool random_failed = false;  // the random cases failed (message.. replay are theirs); else a regression file's
  int declined = 0;            // generated cases the kernel's supports() declined (not run)
  int discarded = 0;           // generated cases outside the law's domain (NotApplicable)
  std::string message;         // why the law failed
  std::string counterexample;  // the minimal case, printed
  std::string replay;          // one command line replaying exactly that case
  std::string saved;           // regression file written, if any
  std::vector<std::string> saved_problems;  // beside it: the noted problems the file is not (save_failure)
  int shrink_stopped = 0;                   // > 0: shrinking stopped after this many faulting candidates
  std::map<Regime, int> coverage;
  std::vector<Failure> regression_failures;  // every regression file that failed (the first also fills message..)
  Evidence evidence;                         // the failing case's variant problem and transform, when the law noted any
  int repeats = 0, repeats_failed = 0;       // a replay whose case passed once: the repeats run and how many failed
  double seconds = 0;                        // the law's wall time
  DrawStats draws;
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
// counterexample and replay line. True when every law held (none failed, none inconclusive).
// `results`, when given, receives (law id, result) for every law, applicable or not.
bool run_suite(const Kernel& k, const RunOptions& opt, std::ostream& log, const std::string& law_id = "",
               std::vector<std::pair<std::string, LawResult>>* results = nullptr);

// What an inconclusive law does to `check`'s exit code: 3 (its own), 1 (--fail-on-inconclusive) or 0
// (--allow-inconclusive).
enum class OnInconclusive { Exit3, Fail, Pass };
// `check`'s exit code over its laws' results (docs/interfaces.md): 1 when a law failed; else 3 when
// one is inconclusive (or 1 or 0, as `on` says); else 0.
int suite_exit_code(const std::vector<std::pair<std::string, LawResult>>& results, OnInconclusive on);
// The same from whether a law failed and whether one is inconclusive.
int suite_exit_code(bool failed, bool inconclusive, OnInconclusive on);

// Every law (or only `law_id`) on one input file. Returns 0 when every law that applies held, 1
// when one failed, 2 when none applies (each prints why): never "0 cases, every law holds".
int run_suite_on_file(const Kernel& k, const std::string& file, std::ostream& log, const std::string& law_id = "",
                      const std::string& option = "--inputs", const std::string& prefix = "");

// Prints a law's outcome: its line (status, cases, wall time) and, on failure, the message,
// counterexample, variant problem and transform, replay line, and each failing regression file;
// inconclusive: why and the hint.
void print_result(const Law& law, const LawResult& r, std::ostream& log);

// A result's status word (the check JSON's "status"): pass, fail, inconclusive or n/a.
const char* law_status(const LawResult& r);
// A problem's shape on one line (batch, heads, lengths, d, dtype, mask, varlen/paged): the progress line's.
std::string shape_line(const Problem& p);

std::string replay_line(const std::string& kernel, const std::string& law, const std::string& token);
// The prefix of a kernel's replay lines under opt ("flashcheck check --kernel NAME" by default).
std::string replay_prefix(const Kernel& k, const RunOptions& opt);

}  // namespace fc::props
