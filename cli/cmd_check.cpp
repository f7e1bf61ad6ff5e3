// `flashcheck check --kernel NAME | --plugin lib.so [--cases N] [--seed S] [--law ID]`: the property
// suite on one kernel. Exit 0 every law held, 1 a law failed (its minimal counterexample and a replay
// line are printed), 2 bad usage. `--reproduce TOKEN` (with --law) replays exactly one minimal case;
// `--case FILE` one regression file. Regression files in --regressions DIR (default the source
// tree's properties/regressions) are replayed beside the random cases (both run, both reported);
// --save-regressions writes each new minimal counterexample there (and a variant law's problem
// beside it); --json-out FILE writes every law's result. A plugin runs in a
// worker process (cli/plugin_options.hpp); `--shrink-faults N` stops shrinking once N candidates have
// crashed, hung or broken the CUDA context (the counterexample then may not be minimal).
// `--inputs FILE` runs every law that applies to that one input (exit 2 when none does).
// Exit 3: no law failed, but one is inconclusive (too few accepted cases, or a replay that did not
// reproduce): --fail-on-inconclusive makes that exit 1, --allow-inconclusive exit 0. A progress line
// per law goes to stderr once a law has run 2 s (rewritten in place every second on a terminal, a
// plain line every 10 s otherwise; --no-progress: none).
// `--kill-matrix [--kernels A,B] [--json]` runs every law on every mutant whose device is present (or
// on the kernels named) and prints which law kills which (exit 1 when a mutant survives every law or
// a correct kernel is killed).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include <atomic>
#include <csignal>
#include <cstring>
#include <iterator>
#include <optional>
#include <sstream>
#include <sys/prctl.h>
#include <thread>
#include <unistd.h>

#include "cli/check_jobs.hpp"
#include "cli/command.hpp"
#include "cli/options.hpp"
#include "cli/plugin_options.hpp"
#include "cli/requests.hpp"
#include "io/atomic_file.hpp"
#include "io/errors.hpp"
#include "kernels/registry.hpp"
#include "properties/kill_matrix.hpp"
#include "properties/runner.hpp"

namespace fc::cli {
namespace {

// The case running now, for a time-out from outside (timeout(1), a CI job's limit: SIGTERM, SIGINT,
// SIGHUP, SIGXCPU): the handler writes "cut during law L on case SHAPE" to stderr, then dies of the
// signal as it would have. Two buffers, swapped atomically: the handler never reads a half-written
// line. Installed for the suite's run over the default dispositions only (a signal the process
// ignores or handles itself, as Python handles SIGINT, keeps its handler), then restored.
class CurrentCase {
 public:
  static void set(const std::string& law, const Problem& p) {
    const int next = 1 - which_.load();
    const std::string line = fmt::format("flashcheck check: cut during law {} on case {}\n", law, props::shape_line(p));
    const size_t n = std::min(line.size(), sizeof(lines_[0]));
    std::memcpy(lines_[next], line.data(), n);
    sizes_[next] = n;
    which_.store(next);
  }
  struct Installed {
    Installed() {
      struct sigaction act {};
      act.sa_handler = handle;
      sigemptyset(&act.sa_mask);
      for (size_t i = 0; i < std::size(kSignals); ++i) {
        sigaction(kSignals[i], nullptr, &previous_[i]);
        if (!(previous_[i].sa_flags & SA_SIGINFO) && previous_[i].sa_handler == SIG_DFL)
          sigaction(kSignals[i], &act, nullptr);
      }
    }
    ~Installed() {
      for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
      sizes_[0] = sizes_[1] = 0;
    }
    Installed(const Installed&) = delete;
    Installed& operator=(const Installed&) = delete;
  };

 private:
  static constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGXCPU};
  static void handle(int sig) {
    const int w = which_.load();
    if (sizes_[w] > 0) {
      const ssize_t written = write(STDERR_FILENO, lines_[w], sizes_[w]);
      (void)written;
    }
    for (size_t i = 0; i < std::size(kSignals); ++i)
      if (kSignals[i] == sig) sigaction(sig, &previous_[i], nullptr);  // the disposition before this one
    std::raise(sig);
  }
  static inline char lines_[2][512] = {};
  static inline std::atomic<size_t> sizes_[2] = {0, 0};
  static inline std::atomic<int> which_{0};
  static inline struct sigaction previous_[std::size(kSignals)] = {};
};

nlohmann::json failure_json(const props::Failure& f) {
  return {{"file", f.source}, {"message", f.message}, {"counterexample", f.counterexample}, {"replay", f.replay}};
}

// One law's object of check's JSON (and of a law process's record: cli/check_jobs.hpp).
nlohmann::json law_json(const std::string& id, const props::LawResult& r) {
  const props::Law* law = props::find_law(id);
  nlohmann::json problems = nlohmann::json::array();
  for (const auto& [role, in] : r.evidence.problems) problems.push_back({{"role", role}, {"problem", props::describe(in)}});
  nlohmann::json regressions = nlohmann::json::array();
  for (const props::Failure& f : r.regression_failures) regressions.push_back(failure_json(f));
  nlohmann::json one = {{"id", id},
                        {"sentence", law ? law->sentence : ""},
                        {"status", props::law_status(r)},
                        {"cases", r.cases},
                        {"regression_cases", r.regression_cases},
                        {"declined", r.declined},
                        {"paths", r.paths},
                        {"discarded", r.discarded},
                        {"seconds", r.seconds},
                        {"message", r.applies ? r.message : r.not_applicable},
                        {"hint", r.hint},
                        {"failed_on", !r.applies || r.ok || r.inconclusive ? ""
                                      : r.random_failed                    ? "random"
                                                                           : "regression"},
                        {"counterexample", r.counterexample},
                        {"problems", problems},
                        {"transform", r.evidence.transform},
                        {"replay", r.replay},
                        {"saved", r.saved},
                        {"saved_problems", r.saved_problems},
                        {"regression_failures", regressions}};
  if (r.repeats > 0) one["repeats"] = {{"run", r.repeats}, {"failed", r.repeats_failed}};
  return one;
}

std::string results_json(const Kernel& k, const props::RunOptions& opt, const nlohmann::json& laws, bool ok) {
  return nlohmann::json{{"kernel", k.info.name}, {"device", k.info.device},    {"description", k.info.description},
                        {"seed", opt.seed},      {"cases_per_law", opt.cases}, {"ok", ok},
                        {"laws", laws}}
      .dump(2);
}

// --list-laws: the law table's ids, in the order check runs them, with what each needs. The one list
// of law ids: the Python package's (python/flashcheck/laws.py) and the docs' tables are generated from
// it by scripts/law_table.py, and the test law_table_up_to_date fails when they differ.
void print_laws(bool json, std::ostream& out) {
  nlohmann::json all = nlohmann::json::array();
  for (const props::Law& law : props::laws()) {
    nlohmann::json regimes = nlohmann::json::array(), dtypes = nlohmann::json::array();
    for (props::Regime r : law.regimes) regimes.push_back(props::regime_name(r));
    for (DType t : law.only_dtypes) dtypes.push_back(dtype_name(t));
    all.push_back({{"id", law.id},
                   {"sentence", law.sentence},
                   {"regimes", regimes},
                   {"backward", law.backward},
                   {"needs_backward", law.needs_backward},
                   {"variants", variant_names(law.needs_variants)},
                   {"only_dtypes", dtypes}});
  }
  if (json) {
    out << all.dump(1) << "\n";
    return;
  }
  for (const nlohmann::json& law : all)
    out << fmt::format("{:<17} {}\n", law["id"].get<std::string>(), law["sentence"].get<std::string>());
}

// --kill-matrix: every law on every mutant whose device is present (or on `names`).
int run_kill_matrix(const std::vector<std::string>& names, int cases, uint64_t seed, const std::string& regressions,
                    bool json, std::ostream& out) {
  std::vector<const Kernel*> kernels;
  for (const std::string& name : names) {
    const Kernel* k = find_kernel(name);
    if (!k) throw UsageError(fmt::format("unknown kernel \"{}\" (see `flashcheck kernels`)", name));
    if (!device_present(k->info.device))
      throw UsageError(fmt::format("kernel \"{}\" needs a {} device, and none is present", name, k->info.device));
    kernels.push_back(k);
  }
  props::RunOptions opt;
  opt.cases = cases;
  opt.seed = seed;
  opt.regressions_dir = regressions;
  const props::KillMatrix m = props::kill_matrix(kernels, opt, &std::cerr);
  if (json)
    props::print_json(m, out);
  else
    props::print_markdown(m, out);
  // A mutant no law kills, or a correct kernel a law kills, is the suite failing.
  bool ok = true;
  for (const props::KillRow& r : m.rows)
    ok = ok && (std::count(r.cells.begin(), r.cells.end(), props::Cell::Killed) > 0) == r.mutant;
  return ok ? kExitPass : kExitFail;
}

void add_check_options(CLI::App* sub, CheckRequest& o, const ExternalKernel* ext) {
  if (!ext) {
    CLI::Option* kernel = sub->add_option("--kernel", o.kernel, "kernel name (see `flashcheck kernels`)");
    CLI::Option* plugin = add_plugin_options(sub, o.plugin, PluginOptions::Run);
    add_size_options(sub, o.plugin);
    kernel->excludes(plugin);
  } else {
    add_plugin_options(sub, o.plugin, PluginOptions::Embedded);
    add_size_options(sub, o.plugin);
  }
  sub->add_option("--cases", o.cases, "random cases per law")->check(decimal_unsigned())->check(CLI::Range(1, 1000000));
  sub->add_option("--seed", o.seed, "RapidCheck seed (default: random, printed)")->check(decimal_unsigned());
  sub->add_option("--shrink-faults", o.shrink_faults,
                  "shrinking stops after this many candidates crash, hang or break the CUDA context (default 8)")
      ->check(decimal_unsigned())
      ->check(CLI::Range(1, 1000000));
  sub->add_option("--law", o.law, "run only this law (ids: see the output)");
  sub->add_option("--reproduce", o.reproduce, "replay token printed by a failure (needs --law)");
  sub->add_option("--case", o.case_file, "replay one regression file (needs --law)");
  sub->add_option("--inputs", o.inputs, "run every law that applies to this one input file (safetensors)");
  sub->add_option("--regressions", o.regressions, "regression folder, replayed beside the random cases");
  sub->add_flag("--save-regressions", o.save, "save each minimal counterexample to the regression folder");
  sub->add_option("--json-out", o.json_out, "also write every law's result to this file (JSON)");
  add_oracle_option(sub, o.oracle);
  CLI::Option* fail_inc =
      sub->add_flag("--fail-on-inconclusive", o.fail_inconclusive, "an inconclusive law fails the run (exit 1, not 3)");
  sub->add_flag("--allow-inconclusive", o.allow_inconclusive,
                "an inconclusive law does not fail the run (exit 0, not 3)")
      ->excludes(fail_inc);
  sub->add_option("--replay-repeats", o.replay_repeats,
                  "a --reproduce case that passes is run this many more times (default 10)")
      ->check(decimal_unsigned())
      ->check(CLI::Range(0, 100000));
  sub->add_flag("--no-progress", o.no_progress, "no progress lines on stderr");
  if (!ext) {
    sub->add_option("--jobs", o.jobs,
                    "laws run at once, each in a process of its own (default 1; 0: one per hardware thread)")
        ->check(decimal_unsigned())
        ->check(CLI::Range(0, 1024));
    // A law's process of --jobs writes its result here (cli/check_jobs.hpp); not for users.
    sub->add_option("--law-record", o.law_record)->group("");
    sub->add_flag("--kill-matrix", o.kill_matrix, "every law on every mutant (or --kernels): which law kills which");
    sub->add_option("--kernels", o.kernels, "kernels for --kill-matrix (default: every mutant whose device is present)")
        ->delimiter(',');
    sub->add_flag("--list-laws", o.list_laws, "print every law's id and sentence, in the order check runs them");
    sub->add_flag("--json", o.json, "--kill-matrix or --list-laws as JSON");
  }
}

// The combinations of flags `check` refuses (all but --kill-matrix's, checked first).
void check_usage(const CheckRequest& o, const ExternalKernel* ext) {
  if (!o.kernels.empty() || o.json)
    throw UsageError("--kernels and --json go with --kill-matrix (--json also with --list-laws)");
  if (!o.inputs.empty() && (!o.reproduce.empty() || !o.case_file.empty()))
    throw UsageError("--inputs takes neither --reproduce nor --case");
  if (!ext && o.kernel.empty() && o.plugin.path.empty())
    throw UsageError("check needs --kernel NAME or --plugin PATH (or --kill-matrix)");
  if (!o.law.empty() && !props::find_law(o.law)) throw UsageError(fmt::format("unknown law \"{}\"", o.law));
  if ((!o.reproduce.empty() || !o.case_file.empty()) && o.law.empty())
    throw UsageError("--reproduce and --case need --law");
  // A folder named on the command line must exist: a typo must not silently replay nothing. (The
  // default, the source tree's folder, may be absent from an installed copy.)
  if (!o.regressions.empty() && !std::filesystem::is_directory(o.regressions))
    throw UsageError(fmt::format("--regressions {}: no such folder", io::quoted(o.regressions)));
}

// The kernel `check` runs: the embedding program's plugin, a plugin named by --plugin (its worker kept
// in `subject`) or a registry kernel. Sets the replay prefix of a plugin's failures.
const Kernel* open_check_kernel(const CheckRequest& o, const ExternalKernel* ext,
                                std::unique_ptr<plugin::PluginKernel>& subject, props::RunOptions& opt) {
  if (ext) {
    try {
      subject = ext->open(o.plugin);
    } catch (const plugin::LoadError& e) {
      throw UsageError(e.what());
    }
    opt.replay_prefix = ext->replay_for("check");
    return &subject->kernel();
  }
  if (!o.plugin.path.empty()) {
    subject = open_plugin(o.plugin);
    opt.replay_prefix = plugin_replay_prefix(o.plugin, *subject);
    return &subject->kernel();
  }
  if (o.plugin.max_n > 0 || o.plugin.max_batch > 0 || o.plugin.max_heads > 0 || o.plugin.shape_buckets)
    throw UsageError(
        "--max-n, --max-batch, --max-heads and --shape-buckets shape a plugin's or Python kernel's cases, not "
        "--kernel's");
  const Kernel* k = find_kernel(o.kernel);
  if (!k) throw UsageError(fmt::format("unknown kernel \"{}\" (see `flashcheck kernels`)", o.kernel));
  if (!device_present(k->info.device))
    throw UsageError(fmt::format("kernel \"{}\" needs a {} device, and none is present", o.kernel, k->info.device));
  return k;
}

// --case: a case that would be skipped must not pass as "replayed".
void check_case_file(const CheckRequest& o, const Kernel& k) {
  std::string case_law;
  const props::Case c = props::read_case(o.case_file, &case_law);
  if (case_law != o.law)
    throw UsageError(fmt::format("{}: the case is for law {}, not {} (--inputs runs every law on any input file)",
                                 o.case_file, io::quoted(case_law), io::quoted(o.law)));
  if (!claims(k, c.in.p))
    throw UsageError(fmt::format("{}: kernel {} does not claim this case's problem", o.case_file, k.info.name));
}

// --inputs: every law that applies to one input file.
int run_check_inputs(const CheckRequest& o, const Kernel& k, const std::string& replay_prefix, std::ostream& out) {
  out << fmt::format("flashcheck check: kernel {} ({}), the laws on {}\n", k.info.name,
                     k.info.mutant ? "mutant" : k.info.device, o.inputs);
  const int code = props::run_suite_on_file(k, o.inputs, out, o.law, "--inputs", replay_prefix);
  if (code == 2)
    throw UsageError(
        fmt::format("no law {}applies to {} on kernel {}", o.law.empty() ? "" : o.law + " ", o.inputs, k.info.name));
  out << (code == 0 ? "every applicable law holds\n" : "a law failed\n");
  out.flush();
  return code == 0 ? kExitPass : kExitFail;
}

// The failed and inconclusive laws among check's JSON objects (law_json), by status.
struct Tally {
  int failed = 0, inconclusive = 0;
};
Tally tally_of(const nlohmann::json& laws) {
  Tally t;
  for (const nlohmann::json& law : laws) {
    t.failed += law.at("status") == "fail";
    t.inconclusive += law.at("status") == "inconclusive";
  }
  return t;
}

// The laws' verdicts of a suite's run, as check's JSON and as the C API's entries.
Outcome outcome_of(const Kernel& k, const props::RunOptions& opt, const nlohmann::json& laws, int code) {
  const Tally t = tally_of(laws);
  Outcome res;
  res.code = code;
  res.json = results_json(k, opt, laws, t.failed == 0 && t.inconclusive == 0) + "\n";
  for (const nlohmann::json& law : laws)
    res.laws.push_back({law.at("id"), law.at("status"), law.at("message"), law.at("cases"), law.at("regression_cases"),
                        law.at("declined")});
  return res;
}

// The suite's options from the request: cases, seed, replay, regressions, progress.
props::RunOptions suite_options(const CheckRequest& o, props::RunOptions opt) {
  opt.cases = o.cases;
  opt.seed = o.seed_given ? o.seed : std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
  opt.reproduce = o.reproduce;
  opt.case_file = o.case_file;
  opt.regressions_dir = o.regressions.empty() ? props::default_regressions_dir() : o.regressions;
  opt.save_failures = o.save;
  opt.shrink_faults = o.shrink_faults;
  opt.replay_repeats = o.replay_repeats;
  if (!o.no_progress) {
    opt.progress = &std::cerr;
    opt.progress_tty = isatty(STDERR_FILENO) == 1;
    opt.progress_every_s = opt.progress_tty ? 1 : 10;
  }
  opt.on_case = [](const std::string& law, const Problem& p) { CurrentCase::set(law, p); };
  return opt;
}

// The last line of the report: the verdict.
void print_verdict(const Tally& t, int code, std::ostream& out) {
  if (t.failed == 0 && t.inconclusive == 0)
    out << "every law holds\n";
  else if (t.failed > 0)
    out << (t.inconclusive > 0 ? fmt::format("a law failed ({} inconclusive)\n", t.inconclusive) : "a law failed\n");
  else
    out << fmt::format("no law failed; {} inconclusive{}\n", t.inconclusive,
                       code == kExitPass ? " (--allow-inconclusive)" : "");
}

// --jobs: the laws that apply in processes of their own (cli/check_jobs.hpp), those that do not here;
// each law's text goes to `out` in the suite's order. Returns the laws' JSON objects and adds the law
// processes' worker restarts to `restarts`.
nlohmann::json run_suite_in_processes(const CheckRequest& o, const Kernel& k, const props::RunOptions& opt,
                                      std::ostream& out, int& restarts) {
  std::vector<std::string> ids;
  for (const props::Law& law : props::laws())
    if (props::law_applies(law, k)) ids.push_back(law.id);
  const int jobs = o.jobs > 0 ? o.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<LawRecord> records = run_laws_in_processes(ids, jobs, opt.seed, opt.progress, opt.progress_after_s);
  nlohmann::json laws = nlohmann::json::array();
  size_t next = 0;
  for (const props::Law& law : props::laws()) {
    if (next < ids.size() && ids[next] == law.id) {
      const LawRecord& r = records[next++];
      out << r.block;
      laws.push_back(r.entry);
      restarts += r.restarts;
      continue;
    }
    const props::LawResult r = props::run_law(law, k, opt);
    props::print_result(law, r, out);
    laws.push_back(law_json(law.id, r));
  }
  return laws;
}

// --list-laws and --kill-matrix: no kernel of the request's, no laws' results.
Outcome run_check_listing(const CheckRequest& o, std::ostream& out) {
  Outcome res;
  if (o.list_laws) {
    if (o.kill_matrix || !o.kernels.empty() || !o.kernel.empty() || !o.plugin.path.empty() || !o.law.empty() ||
        !o.reproduce.empty() || !o.case_file.empty() || !o.inputs.empty())
      throw UsageError("--list-laws takes --json only");
    print_laws(o.json, out);
    return res;
  }
  if (!o.kernel.empty() || !o.plugin.path.empty() || !o.law.empty() || !o.reproduce.empty() || !o.case_file.empty() ||
      !o.inputs.empty())
    throw UsageError("--kill-matrix takes --kernels, --cases, --seed, --regressions and --json only");
  const std::string regressions = o.regressions.empty() ? props::default_regressions_dir() : o.regressions;
  res.code = run_kill_matrix(o.kernels, o.cases, o.seed_given ? o.seed : 1, regressions, o.json, out);
  return res;
}

}  // namespace

Outcome run_check(const CheckRequest& o, const ExternalKernel* ext) {
  validate(o);
  std::ostream& out = ext && ext->out ? *ext->out : std::cout;
  apply_oracle(o.oracle);
  if (o.list_laws || o.kill_matrix) return run_check_listing(o, out);
  check_usage(o, ext);
  std::unique_ptr<plugin::PluginKernel> subject;
  props::RunOptions opt;
  const Kernel* k = open_check_kernel(o, ext, subject, opt);
  if (!o.case_file.empty()) check_case_file(o, *k);
  if (!o.json_out.empty()) io::check_output_path(o.json_out);
  if (!o.inputs.empty()) return Outcome{run_check_inputs(o, *k, opt.replay_prefix, out), "", {}};
  opt = suite_options(o, opt);
  // A law's process of --jobs ends with the check that started it (a time-out or ^C there).
  if (!o.law_record.empty()) prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (subject) opt.faults = [&subject] { return int64_t(subject->faults()); };
  out << fmt::format("flashcheck check: kernel {} ({}), {} cases per law, seed {}\n", k->info.name,
                     k->info.mutant ? "mutant" : k->info.device, opt.cases, opt.seed);
  if (subject) out << fmt::format("  {}; {}\n", k->info.description, subject->notes());
  nlohmann::json laws = nlohmann::json::array();
  int restarts = 0;
  if (o.jobs != 1 && o.law.empty() && o.reproduce.empty() && o.case_file.empty() && !ext) {
    laws = run_suite_in_processes(o, *k, opt, out, restarts);
  } else {
    std::vector<std::pair<std::string, props::LawResult>> results;
    std::optional<CurrentCase::Installed> signals(std::in_place);
    std::ostringstream block;
    props::run_suite(*k, opt, o.law_record.empty() ? out : block, o.law, &results);
    signals.reset();
    for (const auto& [id, r] : results) laws.push_back(law_json(id, r));
    if (!o.law_record.empty()) {
      out << block.str();
      write_law_record(o.law_record, {o.law, block.str(), laws.at(0), subject ? subject->restarts() : 0});
    }
  }
  if (subject) restarts += subject->restarts();
  const Tally t = tally_of(laws);
  static_assert(kExitInconclusive == 3 && kExitFail == 1 && kExitPass == 0, "props::suite_exit_code's codes");
  const int code = props::suite_exit_code(t.failed > 0, t.inconclusive > 0,
                                          o.fail_inconclusive    ? props::OnInconclusive::Fail
                                          : o.allow_inconclusive ? props::OnInconclusive::Pass
                                                                 : props::OnInconclusive::Exit3);
  Outcome res = outcome_of(*k, opt, laws, code);
  if (!o.json_out.empty()) io::write_file_atomic(o.json_out, res.json);
  if (restarts > 0) out << fmt::format("the worker was restarted {} times after faults\n", restarts);
  print_verdict(t, code, out);
  out.flush();
  return res;
}

void validate(const CheckRequest& o) {
  auto in = [](const char* what, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) throw UsageError(fmt::format("{} {}: expected {} to {}", what, v, lo, hi));
  };
  in("--cases", o.cases, 1, 1000000);
  in("--shrink-faults", o.shrink_faults, 1, 1000000);
  in("--replay-repeats", o.replay_repeats, 0, 100000);
  in("--jobs", o.jobs, 0, 1024);
  if (!o.law_record.empty() && o.law.empty()) throw UsageError("--law-record needs --law");
  validate(o.plugin);
  if (o.fail_inconclusive && o.allow_inconclusive)
    throw UsageError("--fail-on-inconclusive and --allow-inconclusive exclude each other");
  if (o.oracle != "auto" && o.oracle != "cpu" && o.oracle != "gpu")
    throw UsageError(fmt::format("--oracle {}: expected cpu, gpu or auto", io::quoted(o.oracle)));
}

Action setup_check(CLI::App& app, const ExternalKernel* ext) {
  auto o = std::make_shared<CheckRequest>();
  CLI::App* sub = app.add_subcommand("check", "run the property suite (every law of docs/laws.md) on one kernel");
  add_check_options(sub, *o, ext);
  return [o, sub, ext]() -> int {
    o->seed_given = sub->count("--seed") > 0;
    if (sub->count("--regressions") > 0 && o->regressions.empty()) throw UsageError("--regressions: an empty path");
    return run_check(*o, ext).code;
  };
}

Action register_check_command(CLI::App& app) { return setup_check(app, nullptr); }

}  // namespace fc::cli
