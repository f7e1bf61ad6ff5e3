#include "properties/runner.hpp"

#include <fmt/format.h>
#include <rapidcheck.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <ostream>

#include "properties/execute.hpp"

namespace fc::props {
namespace {

// RapidCheck reports progress to a listener; we read its final result instead.
struct QuietListener : rc::detail::TestListener {
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

// Property ids: "kernel/law" for the main run, "kernel/law@regime" for a coverage top-up.
std::string test_id(const Kernel& k, const Law& law) { return k.info.name + "/" + law.id; }

struct Outcome {
  bool applies = true;  // false: the case is outside the law's domain (message says why)
  std::string message;  // applies and non-empty: the law failed
};

// The law on one case; exceptions are failures, not crashes.
Outcome check_case(const Law& law, const Kernel& k, const Case& c) {
  try {
    return {true, law.check(k, c)};
  } catch (const NotApplicable& e) {
    return {false, e.what()};
  } catch (const std::exception& e) {
    return {true, fmt::format("threw: {}\n", e.what())};
  }
}

// Replay the regression folder. Returns true (and fills res) on a failure.
bool replay_files(const Law& law, const Kernel& k, const RunOptions& opt, LawResult& res) {
  std::vector<std::string> files;
  if (!opt.regressions_dir.empty() && std::filesystem::is_directory(opt.regressions_dir))
    for (const auto& e : std::filesystem::directory_iterator(opt.regressions_dir))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    std::string law_id;
    Case c = read_case(f, &law_id);  // a broken regression file is bad input: it throws
    if (law_id != law.id || !claims(k, c.in.p)) continue;
    if (c.in.has_d_o() && !(law.backward && k.info.backward)) c.in.d_o = HostTensor();
    const Outcome o = check_case(law, k, c);
    if (!o.applies) continue;
    ++res.cases;
    if (o.message.empty()) continue;
    res.ok = false, res.message = o.message, res.counterexample = describe(c);
    res.replay = fmt::format("{} --law {} --case {}", replay_prefix(k, opt), law.id, f);
    return true;
  }
  return false;
}

// A law that builds its one case from the seed (Law::check_once): no regressions, no shrinking; the
// replay line names the seed.
LawResult run_once(const Law& law, const Kernel& k, const RunOptions& opt) {
  LawResult res;
  try {
    res.message = law.check_once(k, opt.seed);
  } catch (const NotApplicable& e) {
    res.applies = false, res.not_applicable = e.what();
    return res;
  } catch (const std::exception& e) {
    res.message = fmt::format("threw: {}\n", e.what());
  }
  res.cases = 1;
  if (res.message.empty()) return res;
  res.ok = false;
  res.counterexample = "the case is the law's own, built from the seed\n";
  res.replay = fmt::format("{} --law {} --seed {}", replay_prefix(k, opt), law.id, opt.seed);
  return res;
}

// What a RapidCheck run has seen of a failure: the smallest failing case so far and its message, and
// the faulting candidates shrinking has met (RunOptions::shrink_faults).
struct Shrinking {
  bool failed = false;
  Case minimal;          // the last failing case RapidCheck evaluates is the minimal one after shrinking
  std::string message;   // the law's message on it
  int faulted = 0;       // candidates whose evaluation faulted since the law failed
  bool stopped = false;  // a candidate went unrun: the fault budget was spent
  size_t skip = 0;       // a replay: the shrink path's steps still to walk (their cases are not run)
};

// k, whose calls after one of them faulted (faults() rose during it: a crash, a time-out, a broken
// CUDA context) are not run until *tripped is cleared, at the next case: the case has failed
// already, and each further call would cost the worker another restart or time-out. (A fault in
// supports() is left to the forward it is kept for, which reports it.)
Kernel stop_after_fault(const Kernel& k, const std::function<int64_t()>& faults, bool* tripped) {
  auto guard = [faults, tripped](const auto& call, const Inputs& in, const Config& cfg, Outputs& out) {
    if (*tripped)
      throw std::runtime_error(
          "not run: an earlier call on this case faulted (a crash, a time-out or a broken "
          "CUDA context)");
    const int64_t before = faults();
    try {
      call(in, cfg, out);
    } catch (...) {
      *tripped = faults() > before;
      throw;
    }
    *tripped = faults() > before;
  };
  Kernel g = k;
  g.forward = [guard, f = k.forward](const Inputs& in, const Config& cfg, Outputs& out) { guard(f, in, cfg, out); };
  if (k.backward)
    g.backward = [guard, f = k.backward](const Inputs& in, const Config& cfg, Outputs& out) { guard(f, in, cfg, out); };
  return g;
}

// One RapidCheck run of the law over `spec` under property id `id`. Returns false when it failed
// (res holds the message, minimal case and replay line) or RapidCheck gave up or erred.
// RapidCheck runs the property again on a case it has accepted as failing (to find its shrinks,
// and once more to report it): the smallest failing case's verdict is kept, not asked for again, so
// a faulting kernel is not restarted for it and a law that fails only at times (determinism) keeps
// its message. A replay walks the token's shrink path, running the property on every step: only the
// last case is run.
bool random_run(const Law& law, const Kernel& k, const GenSpec& spec, const std::string& id, uint64_t seed, int cases,
                const std::unordered_map<std::string, rc::detail::Reproduce>& repro, const RunOptions& opt,
                LawResult& res) {
  Shrinking sh;
  if (const auto it = repro.find(id); it != repro.end()) sh.skip = it->second.shrinkPath.size();
  auto faults = [&] { return opt.faults ? opt.faults() : int64_t(0); };
  bool tripped = false;  // a call on the current case faulted
  const Kernel guarded = opt.faults ? stop_after_fault(k, opt.faults, &tripped) : k;
  auto property = [&] {
    const Case c = *gen_case(spec);
    if (sh.skip > 0) {
      --sh.skip;
      RC_DISCARD("a step of the replayed shrink path");
    }
    if (sh.failed && same_case(c, sh.minimal)) RC_FAIL(sh.message);
    if (sh.failed && sh.faulted >= opt.shrink_faults) {
      sh.stopped = true;
      RC_DISCARD("shrinking's fault budget is spent");
    }
    const int64_t faults_before = faults();
    const bool claimed = claims(k, c.in.p);
    tripped = false;
    const Outcome o = claimed ? check_case(law, guarded, c) : Outcome{};
    if (sh.failed && faults() > faults_before) ++sh.faulted;
    if (!claimed) {
      ++res.declined;
      RC_DISCARD("the kernel declines the problem");
    }
    if (!o.applies) {
      ++res.discarded;
      RC_DISCARD(o.message);
    }
    ++res.coverage[classify(c)];
    for (uint32_t bits = shape_paths(c.in.p, c.cfg.block_n), x = 0; x < uint32_t(ShapePath::kCount); ++x)
      if (bits >> x & 1u) ++res.paths[shape_path_name(ShapePath(x))];
    if (!o.message.empty()) {
      sh.failed = true, sh.minimal = c, sh.message = o.message;
      RC_FAIL(o.message);
    }
  };
  rc::detail::TestMetadata meta;
  meta.id = id;
  meta.description = law.sentence;
  rc::detail::TestParams params;
  params.seed = seed;
  params.maxSuccess = cases;
  params.maxSize = 100;
  QuietListener listener;
  const rc::detail::TestResult result =
      rc::detail::checkProperty(rc::detail::toProperty(property), meta, params, listener, repro);
  rc::detail::SuccessResult ok;
  rc::detail::FailureResult fail;
  rc::detail::GaveUpResult gave_up;
  rc::detail::Error error;
  if (result.match(ok)) return res.cases += ok.numSuccess, true;
  res.ok = false;
  if (result.match(fail)) {
    res.cases += fail.numSuccess;
    if (sh.failed) {
      res.message = sh.message;
    } else {  // RapidCheck's own failure (the generator threw): "file:line:\nRC_FAIL(...)\n\n" dropped
      const auto rc_at = fail.description.find("RC_FAIL(");
      const auto body = rc_at == std::string::npos ? rc_at : fail.description.find(")\n\n", rc_at);
      res.message = body == std::string::npos ? fail.description : fail.description.substr(body + 3);
    }
    if (sh.stopped) {
      res.shrink_stopped = sh.faulted;
      res.message += fmt::format(
          "shrinking stopped after {} faulting candidates (--shrink-faults {}): the counterexample may not be "
          "minimal\n",
          sh.faulted, opt.shrink_faults);
    }
    res.counterexample = describe(sh.minimal);
    rc::detail::Configuration cfg;
    cfg.reproduce[meta.id] = fail.reproduce;
    std::string token = rc::detail::configToMinimalString(cfg);
    const auto at = token.find("reproduce=");
    token = at == std::string::npos ? token : token.substr(at + 10);
    token = token.substr(0, token.find(' '));
    res.replay = fmt::format("{} --law {} --reproduce {}", replay_prefix(k, opt), law.id, token);
    if (opt.save_failures && !opt.regressions_dir.empty())
      res.saved = write_case(opt.regressions_dir, law.id, k.info.name, sh.minimal);
  } else if (result.match(gave_up)) {
    res.cases += gave_up.numSuccess;
    res.message = fmt::format("gave up after {} cases ({} declined by the kernel, {} outside the law): {}\n",
                              gave_up.numSuccess, res.declined, res.discarded, gave_up.description);
  } else if (result.match(error)) {
    res.message = fmt::format("RapidCheck error: {}\n", error.description);
  }
  return false;
}

// Tops up every claimed regime that got less than its share, with cases drawn from it alone (up to
// five rounds of twice the deficit, each with its own seed: a small shape may not show its regime,
// n_k = 1 cannot tie); a regime still short fails the law.
void top_up_coverage(const Law& law, const Kernel& k, const GenSpec& spec, const RunOptions& opt, LawResult& res) {
  const std::vector<Regime> claimed = claimed_regimes(law, k);
  const int need = coverage_share(opt.cases, int(claimed.size()));
  for (Regime r : claimed) {
    int drawn = 0;
    const LawResult before = res;
    for (int round = 0; round < 5 && res.ok && res.coverage[r] < need; ++round) {
      GenSpec only = spec;
      only.regimes = {r};
      const int deficit = 2 * (need - res.coverage[r]) + 2;
      drawn += deficit;
      const uint64_t seed = opt.seed ^ (0x9e3779b97f4a7c15ULL * uint64_t(int(r) * 4 + round + 1));
      random_run(law, k, only, test_id(k, law) + "@" + regime_name(r), seed, deficit, {}, opt, res);
    }
    // supports() declined every problem of the regime (rows longer than the kernel takes): the
    // kernel does not claim it, as run_law says of a law whose every problem is declined.
    if (!res.ok && res.coverage[r] == 0 && res.cases == before.cases && res.declined > before.declined &&
        res.discarded == before.discarded && res.counterexample.empty()) {
      const int declined = res.declined;
      res = before, res.declined = declined;
      continue;
    }
    if (!res.ok) return;
    if (res.coverage[r] < need) {
      res.ok = false;
      res.message = fmt::format(
          "coverage: {} of {} claimed-regime cases show the {} regime, which needs {} ({} top-up cases drawn "
          "from it alone)\n",
          res.coverage[r], opt.cases, regime_name(r), need, drawn);
      return;
    }
  }
}

}  // namespace

std::string default_regressions_dir() {
#ifdef FC_SOURCE_DIR
  return std::string(FC_SOURCE_DIR) + "/properties/regressions";
#else
  return "properties/regressions";
#endif
}

int coverage_share(int cases, int regimes) { return std::max(1, cases / (2 * std::max(1, regimes))); }

std::string replay_line(const std::string& kernel, const std::string& law, const std::string& token) {
  return fmt::format("flashcheck check --kernel {} --law {} --reproduce {}", kernel, law, token);
}

std::string replay_prefix(const Kernel& k, const RunOptions& opt) {
  return opt.replay_prefix.empty() ? "flashcheck check --kernel " + k.info.name : opt.replay_prefix;
}

LawResult run_law(const Law& law, const Kernel& k, const RunOptions& opt) {
  LawResult res;
  if (!law_applies(law, k)) {
    res.applies = false;
    res.not_applicable = "the kernel does not claim what the law needs";
    return res;
  }
  if (law.check_once) {  // its own case from the seed: no files, no random cases
    if (!opt.case_file.empty() || !opt.reproduce.empty()) {
      res.applies = false;
      res.not_applicable = "the law builds its one case from the seed (--seed replays it)";
      return res;
    }
    return run_once(law, k, opt);
  }
  if (!opt.case_file.empty()) return run_law_on_file(law, k, opt.case_file, "--case", replay_prefix(k, opt));
  if (opt.reproduce.empty() && replay_files(law, k, opt, res)) return res;

  GenSpec spec = spec_for(law, k);
  if (!opt.reproduce.empty()) {  // one minimal case: the token names its property (and regime)
    const auto repro = rc::detail::configFromString("reproduce=" + opt.reproduce).reproduce;
    for (const auto& [id, r] : repro) {
      const std::string base = test_id(k, law);
      if (id != base && id.rfind(base + "@", 0) != 0) continue;
      Regime only{};
      if (id != base) {
        if (!parse_regime(id.substr(base.size() + 1), &only))
          throw std::invalid_argument("the replay token names an unknown regime");
        spec.regimes = {only};
      }
      random_run(law, k, spec, id, opt.seed, opt.cases, repro, opt, res);
      return res;
    }
    throw std::invalid_argument(fmt::format("the replay token is not for {} (kernel/law)", test_id(k, law)));
  }
  const bool ran = random_run(law, k, spec, test_id(k, law), opt.seed, opt.cases, {}, opt, res);
  if (!ran && res.cases == 0 && res.declined > 0 && res.discarded == 0 && res.counterexample.empty()) {
    // Every generated problem was declined by supports() (e.g. a Hopper kernel on another GPU).
    res = LawResult{};
    res.applies = false;
    res.not_applicable = "the kernel's supports() declined every generated problem";
    return res;
  }
  if (ran) top_up_coverage(law, k, spec, opt, res);
  return res;
}

}  // namespace fc::props
