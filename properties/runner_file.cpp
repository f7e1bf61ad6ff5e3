// The suites: every law on a kernel's random cases (run_suite), or on one input file (`flashcheck
// check --inputs FILE`: the case the file describes, every law that applies to it, "n/a" and the
// reason for the others), and how a law's result prints.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>

#include "properties/runner.hpp"

namespace fc::props {
namespace {

// The kernel's i-th config (its default when it offers fewer).
Config config_at(const Kernel& k, size_t i) { return i < k.info.configs.size() ? k.info.configs[i] : Config{}; }

// A law that claims the Poison regime needs a poisoned element: the file's (fc.poison_*), or, for a
// plain input file, a NaN at the first element of q, of k and of v in turn.
std::vector<Case> poisoned_cases(const Case& c, bool file_has_poison) {
  if (file_has_poison) return {c};
  std::vector<Case> out;
  for (int32_t t = 0; t < 3; ++t) {
    Case p = c;
    p.regime = Regime::Poison;
    p.poison_tensor = t, p.poison_index = 0, p.poison_value = std::numeric_limits<double>::quiet_NaN();
    out.push_back(p);
  }
  return out;
}

}  // namespace

LawResult run_law_on_file(const Law& law, const Kernel& k, const std::string& file, const std::string& option,
                          const std::string& prefix) {
  LawResult res;
  auto not_applicable = [&](const std::string& why) {
    res.applies = false, res.not_applicable = why;
    return res;
  };
  if (!law_applies(law, k)) return not_applicable(law_lacks(law, k));
  if (law.check_once) return not_applicable("the law builds its one case from the seed, not from a file");
  std::map<std::string, std::string> meta;
  Case c = read_case(file, nullptr, &meta);  // a malformed file is bad input: it throws
  if (!meta.count("fc.block_m")) c.cfg = config_at(k, 0), c.cfg2 = config_at(k, 1);
  if (c.in.has_d_o() && !(law.backward && k.info.backward)) c.in.d_o = HostTensor();
  if (const std::string why = case_outside_law(law, k, c); !why.empty()) return not_applicable(why);
  const bool poison = std::find(law.regimes.begin(), law.regimes.end(), Regime::Poison) != law.regimes.end();
  std::string why_not;
  const bool file_poison = meta.count("fc.poison_value") && !std::isfinite(c.poison_value);
  for (const Case& one : poison ? poisoned_cases(c, file_poison) : std::vector<Case>{c}) {
    std::string message;
    clear_evidence();
    try {
      message = law.check(k, one);
    } catch (const NotApplicable& e) {
      why_not = e.what();
      continue;
    } catch (const std::exception& e) {
      message = fmt::format("threw: {}\n", e.what());
    }
    ++res.cases;
    if (message.empty()) continue;
    res.ok = false, res.message = message, res.evidence = noted_evidence();
    res.counterexample = describe(one);
    for (const auto& [role, in] : res.evidence.problems)
      res.counterexample += fmt::format("  the {} the kernel ran:\n{}", role, describe(in));
    for (const std::string& t : res.evidence.transform) res.counterexample += "  transform: " + t + "\n";
    res.replay = fmt::format("{} --law {} {} {}", prefix.empty() ? "flashcheck check --kernel " + k.info.name : prefix,
                             law.id, option, file);
    return res;
  }
  if (res.cases == 0) return not_applicable(why_not);
  return res;
}

int run_suite_on_file(const Kernel& k, const std::string& file, std::ostream& log, const std::string& law_id,
                      const std::string& option, const std::string& prefix) {
  int judged = 0;
  bool all = true;
  for (const Law& law : laws()) {
    if (!law_id.empty() && law.id != law_id) continue;
    const LawResult r = run_law_on_file(law, k, file, option, prefix);
    print_result(law, r, log);
    judged += r.applies;
    all = all && r.ok;
  }
  if (judged == 0) return 2;
  return all ? 0 : 1;
}

void print_result(const Law& law, const LawResult& r, std::ostream& log) {
  if (!r.applies) {
    log << fmt::format("  n/a   {:<15} {} ({})\n", law.id, law.sentence, r.not_applicable);
    return;
  }
  std::string files;  // "; 6 regression files, 2 failing;" (cases counts the files that passed)
  if (r.regression_cases > 0)
    files = fmt::format("; {} regression file{}{};", r.regression_cases, r.regression_cases == 1 ? "" : "s",
                        r.regression_failures.empty() ? "" : fmt::format(", {} failing", r.regression_failures.size()));
  log << fmt::format("  {}  {:<15} {} ({} case{}{} {:.1f} s)\n",
                     r.inconclusive ? "INCONCLUSIVE"
                     : r.ok         ? "PASS"
                                    : "FAIL",
                     law.id, law.sentence, r.cases, r.cases == 1 ? "" : "s", files.empty() ? "," : files, r.seconds);
  if (r.ok) return;
  if (r.inconclusive) {
    log << "  " << r.message;
    if (!r.hint.empty()) log << "  to open it: " << r.hint << "\n";
    if (!r.replay.empty()) log << "  replay: " << r.replay << "\n";
    return;
  }
  if (r.random_failed) {
    log << (r.regression_failures.empty() ? "" : "  random cases: ") << r.message;
    if (!r.counterexample.empty()) log << "  minimal counterexample:\n" << r.counterexample;
    if (!r.replay.empty()) log << "  replay: " << r.replay << "\n";
    if (!r.saved.empty()) log << "  saved: " << r.saved << "\n";
    for (const std::string& f : r.saved_problems) log << "  saved beside it: " << f << "\n";
  } else if (!r.regression_failures.empty()) {
    log << "  random cases: every one held\n";
  } else {  // a file's case (--case, --inputs) or the law's own case
    log << r.message;
    if (!r.counterexample.empty()) log << "  minimal counterexample:\n" << r.counterexample;
    if (!r.replay.empty()) log << "  replay: " << r.replay << "\n";
  }
  // The first failing files in full; the rest by their first line (every one is in --json-out).
  constexpr size_t kFull = 3;
  for (size_t i = 0; i < r.regression_failures.size(); ++i) {
    const Failure& f = r.regression_failures[i];
    if (i < kFull) {
      log << "  regression file " << f.source << " fails: " << f.message;
      log << "  its case:\n" << f.counterexample;
    } else {
      log << "  regression file " << f.source << " fails: " << f.message.substr(0, f.message.find('\n')) << "\n";
    }
    log << "  replay: " << f.replay << "\n";
  }
}

int suite_exit_code(const std::vector<std::pair<std::string, LawResult>>& results, OnInconclusive on) {
  bool failed = false, inconclusive = false;
  for (const auto& [id, r] : results) {
    failed |= r.applies && !r.ok && !r.inconclusive;
    inconclusive |= r.inconclusive;
  }
  return suite_exit_code(failed, inconclusive, on);
}

int suite_exit_code(bool failed, bool inconclusive, OnInconclusive on) {
  if (failed) return 1;
  if (!inconclusive) return 0;
  return on == OnInconclusive::Fail ? 1 : on == OnInconclusive::Pass ? 0 : 3;
}

bool run_suite(const Kernel& k, const RunOptions& opt, std::ostream& log, const std::string& law_id,
               std::vector<std::pair<std::string, LawResult>>* results) {
  bool all = true;
  for (const Law& law : laws()) {
    if (!law_id.empty() && law.id != law_id) continue;
    const LawResult r = run_law(law, k, opt);
    if (results) results->emplace_back(law.id, r);
    print_result(law, r, log);
    all = all && r.ok;
  }
  return all;
}

}  // namespace fc::props
