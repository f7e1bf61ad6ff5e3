#include "properties/runner.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <rapidcheck.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <ostream>

#include "io/attention_io.hpp"
#include "io/safetensors.hpp"
#include "reference/gpu/oracle_select.hpp"
#include "verdict/verdict.hpp"

namespace fc::props {
namespace {

thread_local Evidence t_evidence;  // what the running check noted (evidence.hpp)

// Where a kernel declares what it takes and how it computes: the hints' wording names it once.
constexpr const char* kDeclarations = "plugin.h's declarations or Python's Kernel(...)";

template <class V, class X>
bool holds_value(const V& v, X x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

double now_s(const RunOptions& opt) {
  if (opt.clock) return opt.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string shape_line(const Problem& p) {
  std::string s = fmt::format("batch={} heads={}/{} n_q={} n_k={} d={} {} {}", p.batch, p.heads_q, p.heads_kv, p.n_q,
                              p.n_k, p.d, dtype_name(p.dtype), mask_name(p.mask));
  if (p.varlen) s += " varlen";
  if (is_paged(p)) s += " paged";
  return s;
}

namespace {

// The progress line of one law (RunOptions::progress): nothing before progress_after_s, then at most
// one line every progress_every_s; on a TTY the line is rewritten in place and cleared at the end.
class LawProgress {
 public:
  LawProgress(const Law& law, const RunOptions& opt) : law_(law), opt_(opt), start_(now_s(opt)) {}
  ~LawProgress() {
    if (shown_ && opt_.progress_tty) *opt_.progress << "\r\x1b[K" << std::flush;
  }
  LawProgress(const LawProgress&) = delete;
  LawProgress& operator=(const LawProgress&) = delete;
  double elapsed() const { return now_s(opt_) - start_; }
  // Before a case on problem p runs; `res` counts the cases so far.
  void tick(const LawResult& res, const Problem& p) {
    if (opt_.on_case) opt_.on_case(law_.id, p);
    if (!opt_.progress) return;
    const double t = elapsed();
    if (t < opt_.progress_after_s || (shown_ && t - last_ < opt_.progress_every_s)) return;
    const int run = res.cases + res.declined + res.discarded;
    const std::string line = fmt::format(
        "  ... {}: {} cases so far ({} passed, {} declined, {} outside the law), {:.1f} cases/s, {:.0f} s; "
        "now {}",
        law_.id, run, res.cases, res.declined, res.discarded, t > 0 ? run / t : 0.0, t, shape_line(p));
    if (opt_.progress_tty)
      *opt_.progress << "\r\x1b[K" << line << std::flush;
    else
      *opt_.progress << line << "\n" << std::flush;
    shown_ = true, last_ = t;
  }

 private:
  const Law& law_;
  const RunOptions& opt_;
  double start_, last_ = 0;
  bool shown_ = false;
};

// The evidence's printout: each problem the kernel failed on that is not the case's own, and the
// transform's parameters.
std::string describe_evidence(const Evidence& e) {
  std::string s;
  for (const auto& [role, in] : e.problems) s += fmt::format("  the {} the kernel ran:\n{}", role, describe(in));
  for (const std::string& t : e.transform) s += "  transform: " + t + "\n";
  return s;
}

// The regression file of a failure and, next to it, every noted problem that the file is not: a law
// that judges variant problems as they are (Law::judges_variants) saves its variant problem as the
// case (it replays as is); the others save the case the variant or transform is drawn from (it
// replays the law) and the drawn problem beside it (<file stem>.<role>.safetensors, for running the
// kernel on it alone). Returns the paths, the regression file first.
std::vector<std::string> save_failure(const Law& law, const Kernel& k, const std::string& dir, const Case& minimal,
                                      const Evidence& e) {
  Case saved = minimal;
  std::vector<std::pair<std::string, Inputs>> beside;
  for (const auto& [role, in] : e.problems) {
    if (law.judges_variants && role == "variant problem")
      saved.in = in;
    else
      beside.emplace_back(role, in);
  }
  std::map<std::string, std::string> extra;
  std::string transform;
  for (const std::string& t : e.transform) transform += (transform.empty() ? "" : "; ") + t;
  if (!transform.empty()) extra["fc.transform"] = transform;
  std::vector<std::string> paths = {write_case(dir, law.id, k.info.name, saved, extra)};
  const std::string stem = paths[0].substr(0, paths[0].size() - std::string(".safetensors").size());
  for (const auto& [role, in] : beside) {
    std::string slug = role;
    std::replace(slug.begin(), slug.end(), ' ', '_');
    io::TensorFile f = io::inputs_file(in);
    f.metadata["fc.problem_of"] = std::filesystem::path(paths[0]).filename().string();
    f.metadata["fc.role"] = role;
    if (!transform.empty()) f.metadata["fc.transform"] = transform;
    const std::string path = stem + "." + slug + ".safetensors";
    io::write_safetensors(path, f);
    paths.push_back(path);
  }
  return paths;
}

// RapidCheck reports progress to a listener; we read its final result instead.
struct QuietListener : rc::detail::TestListener {
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

// Property ids: "kernel/law" for the main run, "kernel/law@regime" for a coverage top-up.
std::string test_id(const Kernel& k, const Law& law) { return k.info.name + "/" + law.id; }

struct CaseOutcome {
  bool applies = true;  // false: the case is outside the law's domain (message says why)
  std::string message;  // applies and non-empty: the law failed
};

// The law on one case; exceptions are failures, not crashes, except `--oracle gpu` meeting a case the
// GPU oracle cannot take (ref::OracleUnavailable): bad usage, not the kernel's fault, so it stops the
// run (exit 2, one line).
CaseOutcome check_case(const Law& law, const Kernel& k, const Case& c) {
  clear_evidence();
  try {
    return {true, law.check(k, c)};
  } catch (const NotApplicable& e) {
    return {false, e.what()};
  } catch (const ref::OracleUnavailable&) {
    throw;
  } catch (const std::exception& e) {
    return {true, fmt::format("threw: {}\n", e.what())};
  }
}

// Replays the regression folder: every file for this law whose problem the kernel claims. Each
// failure is kept (all run: a failing file does not hide the others, nor the random cases).
void replay_files(const Law& law, const Kernel& k, const RunOptions& opt, LawResult& res, LawProgress& prog) {
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
    prog.tick(res, c.in.p);
    const CaseOutcome o = check_case(law, k, c);
    if (!o.applies) continue;
    ++res.regression_cases;
    if (o.message.empty()) {
      ++res.cases;
      continue;
    }
    res.regression_failures.push_back({f, o.message, describe(c) + describe_evidence(noted_evidence()),
                                       fmt::format("{} --law {} --case {}", replay_prefix(k, opt), law.id, f)});
  }
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
  } catch (const ref::OracleUnavailable&) {
    throw;
  } catch (const std::exception& e) {
    res.message = fmt::format("threw: {}\n", e.what());
  }
  res.cases = law.once_cases;
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
  Evidence evidence;     // what the law noted on the minimal case
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
                LawResult& res, LawProgress& prog) {
  Shrinking sh;
  const auto replayed = repro.find(id);
  const bool replaying = replayed != repro.end();
  if (replaying) sh.skip = replayed->second.shrinkPath.size();
  std::string replay_not_run;  // a replay whose case did not run: why
  auto faults = [&] { return opt.faults ? opt.faults() : int64_t(0); };
  bool tripped = false;  // a call on the current case faulted
  const Kernel guarded = opt.faults ? stop_after_fault(k, opt.faults, &tripped) : k;
  std::string unavailable;  // an OracleUnavailable met inside RapidCheck: rethrown once it returns
  auto property = [&] {
    if (!unavailable.empty()) RC_DISCARD("the oracle is unavailable");
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
    if (!sh.failed) res.draws.add(c.in.p, !claimed);
    prog.tick(res, c.in.p);
    tripped = false;
    CaseOutcome o;
    try {
      o = claimed ? check_case(law, guarded, c) : CaseOutcome{};
    } catch (const ref::OracleUnavailable& e) {
      unavailable = e.what();
      RC_DISCARD("the oracle is unavailable");
    }
    Evidence ev;  // copied only from a failing run (a variant problem may be large)
    if (o.applies && !o.message.empty()) ev = t_evidence;
    if (sh.failed && faults() > faults_before) ++sh.faulted;
    if (!claimed) {
      ++res.declined;
      if (replaying) replay_not_run = "the kernel's supports() declines the replayed case's problem";
      RC_DISCARD("the kernel declines the problem");
    }
    if (!o.applies) {
      ++res.discarded;
      if (!sh.failed) ++res.draws.discarded, ++res.draws.discard_reasons[o.message.substr(0, o.message.find('\n'))];
      if (replaying) replay_not_run = "the replayed case is outside the law: " + o.message;
      RC_DISCARD(o.message);
    }
    // A replay whose case passes is run again: a failure that comes and goes is nondeterminism.
    if (replaying && o.message.empty()) {
      std::string first;
      for (int r = 0; r < opt.replay_repeats; ++r) {
        tripped = false;
        const CaseOutcome again = check_case(law, guarded, c);
        ++res.repeats;
        if (!again.applies || again.message.empty()) continue;
        if (++res.repeats_failed == 1) first = again.message, ev = t_evidence;
      }
      if (res.repeats_failed > 0)
        o.message = fmt::format(
            "nondeterministic: {} of {} repeats fail (the replayed case passed on its first run); "
            "the first failing repeat:\n{}",
            res.repeats_failed, res.repeats, first);
    }
    ++res.coverage[classify(c)];
    for (uint32_t bits = shape_paths(c.in.p, c.cfg.block_n), x = 0; x < uint32_t(ShapePath::kCount); ++x)
      if (bits >> x & 1u) ++res.paths[shape_path_name(ShapePath(x))];
    if (!o.message.empty()) {
      sh.failed = true, sh.minimal = c, sh.message = o.message, sh.evidence = std::move(ev);
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
  if (!unavailable.empty()) throw ref::OracleUnavailable(unavailable);
  rc::detail::SuccessResult ok;
  rc::detail::FailureResult fail;
  rc::detail::GaveUpResult gave_up;
  rc::detail::Error error;
  if (result.match(ok)) return res.cases += ok.numSuccess, true;
  res.ok = false;
  if (result.match(fail)) {
    res.cases += fail.numSuccess;
    res.random_failed = true;
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
    res.counterexample = describe(sh.minimal) + describe_evidence(sh.evidence);
    res.evidence = sh.evidence;
    rc::detail::Configuration cfg;
    cfg.reproduce[meta.id] = fail.reproduce;
    std::string token = rc::detail::configToMinimalString(cfg);
    const auto at = token.find("reproduce=");
    token = at == std::string::npos ? token : token.substr(at + 10);
    token = token.substr(0, token.find(' '));
    res.replay = fmt::format("{} --law {} --reproduce {}", replay_prefix(k, opt), law.id, token);
    if (opt.save_failures && !opt.regressions_dir.empty()) {
      res.saved_problems = save_failure(law, k, opt.regressions_dir, sh.minimal, sh.evidence);
      res.saved = res.saved_problems.front();
      res.saved_problems.erase(res.saved_problems.begin());
    }
  } else if (replaying) {  // the replayed case did not fail: RapidCheck says "not a failure"
    res.inconclusive = true;
    if (!replay_not_run.empty()) {
      res.message = fmt::format("the replay did not run its case: {}\n", replay_not_run);
      res.hint =
          "the kernel or the law changed since the token was printed: run the law's random cases (without "
          "--reproduce)";
    } else {
      res.message =
          fmt::format("did not reproduce: the replayed case passed on its run and on {} repeats\n", res.repeats);
      res.hint = fmt::format(
          "a fault that fails less often than 1 run in {} (a race), or a kernel that changed since the token was "
          "printed: raise --replay-repeats, or run the law's random cases (without --reproduce)",
          res.repeats + 1);
    }
  } else if (result.match(gave_up)) {
    res.cases += gave_up.numSuccess;
    res.inconclusive = true;
    res.message = fmt::format(
        "inconclusive: {} accepted case{} of the {} asked for ({} drawn: {} declined by the kernel, {} outside the "
        "law)\n",
        gave_up.numSuccess, gave_up.numSuccess == 1 ? "" : "s", cases, res.draws.drawn, res.declined, res.discarded);
    probe_declines(k, res.draws);
    res.hint = inconclusive_hint(res.draws, cases);
  } else if (result.match(error)) {
    res.message = fmt::format("RapidCheck error: {}\n", error.description);
  }
  return false;
}

// Tops up every claimed regime that got less than its share, with cases drawn from it alone (up to
// five rounds of twice the deficit, each with its own seed: a small shape may not show its regime,
// n_k = 1 cannot tie); a regime still short fails the law.
void top_up_coverage(const Law& law, const Kernel& k, const GenSpec& spec, const RunOptions& opt, LawResult& res,
                     LawProgress& prog) {
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
      random_run(law, k, only, test_id(k, law) + "@" + regime_name(r), seed, deficit, {}, opt, res, prog);
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
    if (res.coverage[r] < need && res.declined - before.declined > drawn / 2) {
      // The kernel declined most of the regime's cases: too few to judge, not a generator's fault.
      res.ok = false, res.inconclusive = true;
      res.message = fmt::format(
          "inconclusive: {} of {} claimed-regime cases show the {} regime, which needs {}; the kernel declined {} of "
          "the {} top-up cases drawn from it alone\n",
          res.coverage[r], opt.cases, regime_name(r), need, res.declined - before.declined, drawn);
      probe_declines(k, res.draws);
      res.hint = inconclusive_hint(res.draws, opt.cases);
      return;
    }
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

namespace {

LawResult run_law_timed(const Law& law, const Kernel& k, const RunOptions& opt, LawProgress& prog) {
  LawResult res;
  if (!law_applies(law, k)) {
    res.applies = false;
    res.not_applicable = law_lacks(law, k);
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
      random_run(law, k, spec, id, opt.seed, opt.cases, repro, opt, res, prog);
      return res;
    }
    throw std::invalid_argument(fmt::format("the replay token is not for {} (kernel/law)", test_id(k, law)));
  }
  LawResult files;  // the regression files' cases, reported beside the random ones
  replay_files(law, k, opt, files, prog);
  res.cases = files.cases, res.regression_cases = files.regression_cases;
  const bool ran = random_run(law, k, spec, test_id(k, law), opt.seed, opt.cases, {}, opt, res, prog);
  if (ran) top_up_coverage(law, k, spec, opt, res, prog);
  if (!files.regression_failures.empty()) {
    res.regression_failures = files.regression_failures;
    if (res.inconclusive)  // a failing file decides the law; the random cases' shortfall is a note
      res.regression_failures.front().message += "(the random cases were " + res.message + ")";
    res.ok = false, res.inconclusive = false;
    if (!res.random_failed) {
      const Failure& f = res.regression_failures.front();
      res.message = f.message, res.counterexample = f.counterexample, res.replay = f.replay;
    }
  }
  return res;
}

}  // namespace

LawResult run_law(const Law& law, const Kernel& k, const RunOptions& opt) {
  LawProgress prog(law, opt);
  LawResult res = run_law_timed(law, k, opt, prog);
  res.seconds = prog.elapsed();
  return res;
}

const char* law_status(const LawResult& r) {
  if (!r.applies) return "n/a";
  if (r.inconclusive) return "inconclusive";
  return r.ok ? "pass" : "fail";
}

void note_problem(const std::string& role, const Inputs& in) {
  for (auto& [r, x] : t_evidence.problems)
    if (r == role) {
      x = in;
      return;
    }
  t_evidence.problems.emplace_back(role, in);
}
void note_transform(const std::string& line) { t_evidence.transform.push_back(line); }
const Evidence& noted_evidence() { return t_evidence; }
void clear_evidence() { t_evidence = Evidence{}; }

namespace {
template <class T>
std::string list_of(const std::vector<T>& v, size_t max) {
  std::string s = "[";
  for (size_t i = 0; i < std::min(v.size(), max); ++i) s += fmt::format("{}{}", i ? " " : "", v[i]);
  if (v.size() > max) s += fmt::format(" ... ({} in all)", v.size());
  return s + "]";
}
}  // namespace
std::string list_values(const std::vector<int64_t>& v, size_t max) { return list_of(v, max); }
std::string list_values(const std::vector<double>& v, size_t max) { return list_of(v, max); }

void DrawStats::add(const Problem& p, bool declined_it) {
  ++drawn;
  (declined_it ? ++declined : ++accepted);
  auto& m = declined_it ? declined_values : accepted_values;
  ++m["n_q"][p.n_q], ++m["n_k"][p.n_k], ++m["d"][p.d], ++m["dtype"][int64_t(p.dtype)];
  ++m["mask"][int64_t(p.mask)], ++m["batch"][p.batch], ++m["heads_q"][p.heads_q], ++m["heads_kv"][p.heads_kv];
  std::vector<Problem>& sample = declined_it ? declined_sample : accepted_sample;
  if (sample.size() < kSample) sample.push_back(p);
}

namespace {

// The properties probe_declines copies, each with the axes it names and the declaration that sets it.
struct Property {
  const char* name;
  std::vector<const char*> axes;
  const char* declaration;
  void (*copy)(const Problem& from, Problem& to);
};
const std::vector<Property>& copied_properties() {
  static const std::vector<Property> list = {
      {"lengths",
       {"n_q", "n_k"},
       "length constraints",
       [](const Problem& a, Problem& b) { b.n_q = a.n_q, b.n_k = a.n_k; }},
      {"head dim", {"d"}, "head dims", [](const Problem& a, Problem& b) { b.d = a.d, b.d_v = a.d_v; }},
      {"dtype", {"dtype"}, "dtypes", [](const Problem& a, Problem& b) { b.dtype = a.dtype; }},
      {"mask", {"mask"}, "masks", [](const Problem& a, Problem& b) { b.mask = a.mask; }},
      {"batch", {"batch"}, "batch sizes", [](const Problem& a, Problem& b) { b.batch = a.batch; }},
      {"heads",
       {"heads_q", "heads_kv"},
       "head counts (GQA ratios)",
       [](const Problem& a, Problem& b) { b.heads_q = a.heads_q, b.heads_kv = a.heads_kv; }},
  };
  return list;
}

std::string axis_value(const std::string& axis, int64_t v) {
  if (axis == "dtype") return dtype_name(DType(v));
  if (axis == "mask") return mask_name(Mask(v));
  return std::to_string(v);
}

// "n_q 1 (40x), 3 (12x), ... (17 values)": an axis's most frequent values.
std::string top_values(const std::string& axis, const std::map<int64_t, int>& m, size_t shown = 6) {
  std::vector<std::pair<int, int64_t>> v;
  for (const auto& [x, n] : m) v.emplace_back(n, x);
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string s = axis + " ";
  for (size_t i = 0; i < std::min(v.size(), shown); ++i)
    s += fmt::format("{}{} ({}x)", i ? ", " : "", axis_value(axis, v[i].second), v[i].first);
  if (v.size() > shown) s += fmt::format(", ... ({} values)", v.size());
  return s;
}

// "n_q 1..45": an axis's range drawn (or its values, for a dtype or mask).
std::string range_of(const std::string& axis, const std::map<int64_t, int>& m) {
  if (m.empty()) return axis;
  if (axis == "dtype" || axis == "mask") {
    std::vector<std::string> names;
    for (const auto& [x, n] : m) names.push_back(axis_value(axis, x));
    return fmt::format("{} {}", axis, fmt::join(names, " "));
  }
  const int64_t lo = m.begin()->first, hi = m.rbegin()->first;
  return lo == hi ? fmt::format("{} {}", axis, lo) : fmt::format("{} {}..{}", axis, lo, hi);
}

}  // namespace

void probe_declines(const Kernel& k, DrawStats& s) {
  s.probed = 0, s.blockers.clear();
  if (s.accepted_sample.empty()) return;
  for (const Problem& no : s.declined_sample) {
    ++s.probed;
    for (const Property& prop : copied_properties())
      for (const Problem& yes : s.accepted_sample) {
        Problem p = no;
        prop.copy(yes, p);
        if (!claims(k, p)) continue;
        ++s.blockers[prop.name];
        break;
      }
  }
}

std::string inconclusive_hint(const DrawStats& s, int wanted) {
  std::string hint;
  if (s.declined > 0) {
    hint = fmt::format("the kernel declined {} of the {} cases drawn", s.declined, s.drawn);
    std::vector<std::string> opened, declare;
    std::vector<std::string> shown;  // the declined values of the axes that matter
    for (const Property& prop : copied_properties()) {
      const auto it = s.blockers.find(prop.name);
      if (it == s.blockers.end()) continue;
      opened.push_back(fmt::format("{} of {} with the {} of an accepted one", it->second, s.probed, prop.name));
      declare.push_back(prop.declaration);
      for (const char* axis : prop.axes) {
        std::string line = "declined " + top_values(axis, s.declined_values.at(axis));
        if (const auto acc = s.accepted_values.find(axis); acc != s.accepted_values.end())
          line += "; accepted " + top_values(axis, acc->second, 4);
        shown.push_back(line);
      }
    }
    if (!opened.empty()) {
      hint += fmt::format("; of the {} declined problems asked again, the kernel takes {} ({})", s.probed,
                          fmt::join(opened, ", "), fmt::join(shown, "; "));
    } else if (s.probed > 0) {
      hint += fmt::format(
          "; no one property of an accepted problem (lengths, head dim, dtype, mask, batch, heads) "
          "makes a declined one accepted (drawn: {}, {}, {})",
          range_of("n_q", s.declined_values.at("n_q")), range_of("n_k", s.declined_values.at("n_k")),
          range_of("d", s.declined_values.at("d")));
    } else {
      std::vector<std::string> drawn;
      for (const char* axis : {"n_q", "n_k", "d", "dtype", "mask", "batch", "heads_q", "heads_kv"})
        if (const auto it = s.declined_values.find(axis); it != s.declined_values.end())
          drawn.push_back(range_of(axis, it->second));
      hint += fmt::format("; none was accepted (drawn: {})", fmt::join(drawn, ", "));
    }
    hint += fmt::format(
        ": declare the {} the kernel takes in {}, so that the suite draws only those, or narrow the sizes drawn from "
        "the command line",
        declare.empty() ? std::string("lengths, head dims, dtypes and masks")
                        : fmt::format("{}", fmt::join(declare, ", ")),
        kDeclarations);
  }
  if (s.discarded > 0 && s.discarded * 2 >= s.accepted) {
    std::pair<std::string, int> top{"", 0};
    for (const auto& [why, n] : s.discard_reasons)
      if (n > top.second) top = {why, n};
    hint += fmt::format("{}{} of the accepted cases were outside the law (most often: {}); {}",
                        hint.empty() ? "" : "; ", s.discarded, top.first,
                        "declaring the kernel's arithmetic (exact scores, tiles) or dtypes widens the law's domain");
  }
  if (hint.empty())
    hint = fmt::format("RapidCheck could not draw {} cases; raise --cases or report the law's generator", wanted);
  return hint;
}

std::string law_lacks(const Law& law, const Kernel& k) {
  const KernelInfo& i = k.info;
  if (law.merge && i.kind != KernelKind::Merge) return "a law of merge-state kernels";
  if (!law.merge && i.kind == KernelKind::Merge) return "a law of attention kernels";
  if (law.needs_splits && split_pairs(i).empty())
    return fmt::format("needs a split-KV configuration (splits >= 2) and its unsplit twin; declare them in {}",
                       kDeclarations);
  if (law.needs_backward && !i.backward) return "needs a backward, and the kernel declares none";
  if (law.needs_lse && !i.writes_lse) return "reads lse, and the kernel declares that it writes none";
  if (!covers(i.variants, law.needs_variants)) {
    std::vector<std::string> missing;
    const std::vector<std::string> need = variant_names(law.needs_variants);
    const std::vector<std::string> have = variant_names(i.variants);
    for (const std::string& v : need)
      if (!holds_value(have, v)) missing.push_back(v);
    return fmt::format("needs the variant{} {}; declare {} in {}", missing.size() == 1 ? "" : "s",
                       fmt::join(missing, ", "), missing.size() == 1 ? "it" : "them", kDeclarations);
  }
  if (law.mask_none_only && !holds_value(i.masks, Mask::None))
    return "holds only without a mask, and the kernel declares no unmasked problem";
  if (law.needs_causal && std::none_of(i.masks.begin(), i.masks.end(), [](Mask m) { return m != Mask::None; }))
    return "needs a causal mask, and the kernel declares none";
  if (law.needs_tiles && !i.any_tile && i.configs.size() < 2)
    return fmt::format("needs two configurations with distinct tiles; declare the kernel's configurations in {}",
                       kDeclarations);
  if (law.needs_large_offsets && !i.large_offsets)
    return "needs tensors past 2^31 elements, and the kernel does not declare 64-bit offsets (large_offsets)";
  if (law.device_only && i.device == "cpu")
    return "builds a case of GPU scale (scratch past 2^31 elements), for kernels that run on a device only";
  if (!law.only_dtypes.empty() && spec_for(law, k).dtypes.empty() && spec_for(law, k).mixed_dtypes.empty()) {
    std::vector<std::string> names;
    for (DType t : law.only_dtypes) names.push_back(dtype_name(t));
    return fmt::format("is defined for {} only, and the kernel takes none of them", fmt::join(names, ", "));
  }
  if (law.needs_exact)
    if (const std::string why = law.needs_exact(i); !why.empty())
      return fmt::format("{}; declare the kernel's arithmetic in {}", why, kDeclarations);
  if (law.needs_baseline) {
    const Kernel* base = find_kernel("cpu_naive");
    if (!base) return "needs the same-precision baseline cpu_naive, which this build lacks";
    if (base->info.name == i.name) return "compares a kernel with cpu_naive, and this kernel is cpu_naive";
  }
  if (claimed_regimes(law, k).empty()) return "none of the law's value regimes suits the kernel's dtypes and masks";
  return "";
}

}  // namespace fc::props
