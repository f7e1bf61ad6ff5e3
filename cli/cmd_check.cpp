// `flashcheck check --kernel NAME [--cases N] [--seed S] [--law ID]`: the property suite on one
// kernel. Exit 0 every law held, 1 a law failed (its minimal counterexample and a replay line are
// printed), 2 bad usage. `--reproduce TOKEN` (with --law) replays exactly one minimal case;
// `--case FILE` one regression file (with --law). `--inputs FILE` runs every law that applies to
// that one input (exit 2 when none does). Regression files in --regressions DIR (default the source
// tree's properties/regressions) are replayed before the random cases; --save-regressions writes
// each new minimal counterexample there. `--kill-matrix [--kernels A,B] [--json]` runs every law on
// every mutant (or on the kernels named) and prints which law kills which.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <random>

#include "cli/command.hpp"
#include "kernels/registry.hpp"
#include "properties/kill_matrix.hpp"
#include "properties/runner.hpp"

namespace fc::cli {

namespace {

struct Options {
  std::string kernel, law, reproduce, case_file, inputs, regressions = props::default_regressions_dir();
  std::vector<std::string> kernels;
  int cases = 100;
  uint64_t seed = 0;
  bool save = false, kill_matrix = false, json = false;
};

// --kill-matrix: every law on every mutant whose device is present (or on --kernels).
int run_kill_matrix(const Options& o, uint64_t seed) {
  if (!o.kernel.empty() || !o.law.empty() || !o.reproduce.empty() || !o.case_file.empty() || !o.inputs.empty())
    throw UsageError("--kill-matrix takes --kernels, --cases, --seed and --json only");
  std::vector<const Kernel*> kernels;
  for (const std::string& name : o.kernels) {
    const Kernel* k = find_kernel(name);
    if (!k) throw UsageError(fmt::format("unknown kernel \"{}\" (see `flashcheck kernels`)", name));
    if (!device_present(k->info.device))
      throw UsageError(fmt::format("kernel \"{}\" needs a {} device, and none is present", name, k->info.device));
    kernels.push_back(k);
  }
  props::RunOptions opt;
  opt.cases = o.cases;
  opt.seed = seed;
  opt.regressions_dir = o.regressions;
  const props::KillMatrix m = props::kill_matrix(kernels, opt, &std::cerr);
  if (o.json)
    props::print_json(m, std::cout);
  else
    props::print_markdown(m, std::cout);
  // A mutant no law kills, or a correct kernel a law kills, is the suite failing.
  bool ok = true;
  for (const props::KillRow& r : m.rows) {
    const bool killed = std::count(r.cells.begin(), r.cells.end(), props::Cell::Killed) > 0;
    ok = ok && killed == r.mutant;
  }
  return ok ? kExitPass : kExitFail;
}

}  // namespace

Run register_check_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("check", "run the property suite (every law of DESIGN §5) on one kernel");
  sub->add_option("--kernel", o->kernel, "kernel name (see `flashcheck kernels`)");
  sub->add_option("--cases", o->cases, "random cases per law")->check(CLI::Range(1, 1000000));
  CLI::Option* seed = sub->add_option("--seed", o->seed, "RapidCheck seed (default: random, printed)");
  sub->add_option("--law", o->law, "run only this law (ids: see the output)");
  sub->add_option("--reproduce", o->reproduce, "replay token printed by a failure (needs --law)");
  sub->add_option("--case", o->case_file, "replay one regression file (needs --law)");
  sub->add_option("--inputs", o->inputs, "run every law that applies to this one input file (safetensors)");
  sub->add_option("--regressions", o->regressions, "regression folder replayed before random cases");
  sub->add_flag("--save-regressions", o->save, "save each minimal counterexample to the regression folder");
  sub->add_flag("--kill-matrix", o->kill_matrix, "every law on every mutant (or --kernels): which law kills which");
  sub->add_option("--kernels", o->kernels, "kernels for --kill-matrix (default: every mutant whose device is present)")
      ->delimiter(',');
  sub->add_flag("--json", o->json, "--kill-matrix as JSON");

  return [o, seed]() -> int {
    if (o->kill_matrix) return run_kill_matrix(*o, seed->count() ? o->seed : 1);
    if (!o->kernels.empty() || o->json) throw UsageError("--kernels and --json go with --kill-matrix");
    if (o->kernel.empty()) throw UsageError("--kernel is required (or --kill-matrix)");
    const Kernel* k = find_kernel(o->kernel);
    if (!k) throw UsageError(fmt::format("unknown kernel \"{}\" (see `flashcheck kernels`)", o->kernel));
    if (!device_present(k->info.device))
      throw UsageError(fmt::format("kernel \"{}\" needs a {} device, and none is present", o->kernel, k->info.device));
    if (!o->law.empty() && !props::find_law(o->law)) throw UsageError(fmt::format("unknown law \"{}\"", o->law));
    if ((!o->reproduce.empty() || !o->case_file.empty()) && o->law.empty())
      throw UsageError("--reproduce and --case need --law");
    if (!o->inputs.empty() && (!o->reproduce.empty() || !o->case_file.empty()))
      throw UsageError("--inputs takes neither --reproduce nor --case");
    if (!o->inputs.empty() || !o->case_file.empty()) {  // one file: the laws that apply to it
      const std::string& file = o->inputs.empty() ? o->case_file : o->inputs;
      std::cout << fmt::format("flashcheck check: kernel {} ({}), laws on the input {}\n", k->info.name,
                               k->info.mutant ? "mutant" : k->info.device, file);
      const int code = props::run_suite_on_file(*k, file, std::cout, o->law, o->inputs.empty() ? "--case" : "--inputs");
      if (code == 2)
        throw UsageError(
            fmt::format("no law {}applies to {} on kernel {}", o->law.empty() ? "" : o->law + " ", file, k->info.name));
      std::cout << (code == 0 ? "every applicable law holds\n" : "a law failed\n");
      return code == 0 ? kExitPass : kExitFail;
    }
    props::RunOptions opt;
    opt.cases = o->cases;
    opt.seed = seed->count() ? o->seed : std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
    opt.reproduce = o->reproduce;
    opt.case_file = o->case_file;
    opt.regressions_dir = o->regressions;
    opt.save_failures = o->save;
    std::cout << fmt::format("flashcheck check: kernel {} ({}), {} cases per law, seed {}\n", k->info.name,
                             k->info.mutant ? "mutant" : k->info.device, opt.cases, opt.seed);
    const bool ok = props::run_suite(*k, opt, std::cout, o->law);
    std::cout << (ok ? "every law holds\n" : "a law failed\n");
    return ok ? kExitPass : kExitFail;
  };
}

}  // namespace fc::cli
