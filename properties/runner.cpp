#include "properties/runner.hpp"

#include <fmt/format.h>
#include <rapidcheck.h>

#include <exception>
#include <filesystem>
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

std::string test_id(const Kernel& k, const Law& law) { return k.info.name + "/" + law.id; }

// The law on one case; exceptions are failures, not crashes.
std::string check_case(const Law& law, const Kernel& k, const Case& c) {
  try {
    return law.check(k, c);
  } catch (const std::exception& e) {
    return fmt::format("threw: {}\n", e.what());
  }
}

// Replay the regression folder (or one file). Returns a failed result, or nothing.
bool replay_files(const Law& law, const Kernel& k, const RunOptions& opt, LawResult& res) {
  std::vector<std::string> files;
  if (!opt.case_file.empty())
    files.push_back(opt.case_file);
  else if (!opt.regressions_dir.empty() && std::filesystem::is_directory(opt.regressions_dir))
    for (const auto& e : std::filesystem::directory_iterator(opt.regressions_dir))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    std::string law_id;
    Case c = read_case(f, &law_id);  // a broken regression file is bad input: it throws
    if (law_id != law.id || !claims(k, c.in.p)) continue;
    if (c.in.has_d_o() && !(law.backward && k.info.backward)) c.in.d_o = HostTensor();
    const std::string msg = check_case(law, k, c);
    ++res.cases;
    if (msg.empty()) continue;
    res.ok = false, res.message = msg, res.counterexample = describe(c);
    res.replay = fmt::format("{} --law {} --case {}", replay_prefix(k, opt), law.id, f);
    return true;
  }
  return false;
}

}  // namespace

std::string default_regressions_dir() {
#ifdef FC_SOURCE_DIR
  return std::string(FC_SOURCE_DIR) + "/properties/regressions";
#else
  return "properties/regressions";
#endif
}

std::string replay_line(const std::string& kernel, const std::string& law, const std::string& token) {
  return fmt::format("flashcheck check --kernel {} --law {} --reproduce {}", kernel, law, token);
}

std::string replay_prefix(const Kernel& k, const RunOptions& opt) {
  return opt.replay_prefix.empty() ? "flashcheck check --kernel " + k.info.name : opt.replay_prefix;
}

LawResult run_law(const Law& law, const Kernel& k, const RunOptions& opt) {
  LawResult res;
  if (!law_applies(law, k)) return res.applies = false, res;
  if (opt.reproduce.empty() && replay_files(law, k, opt, res)) return res;
  if (!opt.case_file.empty()) return res;  // one file replayed, nothing random

  const GenSpec spec = spec_for(law, k);
  Case minimal;  // the last failing case RapidCheck evaluates is the minimal one after shrinking
  auto property = [&] {
    const Case c = *gen_case(spec);
    const bool claimed = claims(k, c.in.p);
    if (!claimed) ++res.declined;
    RC_PRE(claimed);
    ++res.coverage[classify(c)];
    const std::string msg = check_case(law, k, c);
    if (!msg.empty()) {
      minimal = c;
      RC_FAIL(msg);
    }
  };
  rc::detail::TestMetadata meta;
  meta.id = test_id(k, law);
  meta.description = law.sentence;
  rc::detail::TestParams params;
  params.seed = opt.seed;
  params.maxSuccess = opt.cases;
  params.maxSize = 100;
  std::unordered_map<std::string, rc::detail::Reproduce> repro;
  if (!opt.reproduce.empty()) {
    repro = rc::detail::configFromString("reproduce=" + opt.reproduce).reproduce;
    if (!repro.count(meta.id))
      throw std::invalid_argument(fmt::format("the replay token is not for {} (kernel/law)", meta.id));
  }
  QuietListener listener;
  const rc::detail::TestResult result =
      rc::detail::checkProperty(rc::detail::toProperty(property), meta, params, listener, repro);

  rc::detail::SuccessResult ok;
  rc::detail::FailureResult fail;
  rc::detail::GaveUpResult gave_up;
  rc::detail::Error error;
  if (result.match(ok)) {
    res.cases += ok.numSuccess;
    if (!opt.reproduce.empty()) return res;  // one replayed case: no coverage to speak of
    for (Regime r : claimed_regimes(law, k))
      if (!res.coverage.count(r)) {
        res.ok = false;
        res.message =
            fmt::format("coverage: {} cases never reached the {} regime this law claims\n", res.cases, regime_name(r));
      }
    return res;
  }
  res.ok = false;
  if (result.match(fail)) {
    res.cases += fail.numSuccess;
    // RapidCheck prefixes our message with "file:line:\nRC_FAIL(msg)\n\n": keep the message.
    const auto body = fail.description.find("RC_FAIL(msg)\n\n");
    res.message = body == std::string::npos ? fail.description : fail.description.substr(body + 14);
    res.counterexample = describe(minimal);
    rc::detail::Configuration cfg;
    cfg.reproduce[meta.id] = fail.reproduce;
    std::string token = rc::detail::configToMinimalString(cfg);
    const auto at = token.find("reproduce=");
    token = at == std::string::npos ? token : token.substr(at + 10);
    token = token.substr(0, token.find(' '));
    res.replay = fmt::format("{} --law {} --reproduce {}", replay_prefix(k, opt), law.id, token);
    if (opt.save_failures && !opt.regressions_dir.empty())
      res.saved = write_case(opt.regressions_dir, law.id, k.info.name, minimal);
  } else if (result.match(gave_up) && gave_up.numSuccess == 0 && res.declined > 0) {
    // Not a failure: the kernel's supports() declined every case this law generated.
    res.ok = true, res.applies = false;
    res.message =
        fmt::format("no supported case: the kernel declined all {} cases generated for this law", res.declined);
  } else if (result.match(gave_up)) {
    res.message = fmt::format("gave up after {} cases ({} declined by the kernel): {}\n", gave_up.numSuccess,
                              res.declined, gave_up.description);
  } else if (result.match(error)) {
    res.message = fmt::format("RapidCheck error: {}\n", error.description);
  }
  return res;
}

bool run_suite(const Kernel& k, const RunOptions& opt, std::ostream& log, const std::string& law_id,
               std::vector<std::pair<std::string, LawResult>>* results) {
  bool all = true;
  for (const Law& law : laws()) {
    if (!law_id.empty() && law.id != law_id) continue;
    const LawResult r = run_law(law, k, opt);
    if (results) results->emplace_back(law.id, r);
    if (!r.applies) {
      log << fmt::format("  n/a   {:<15} {}\n", law.id, r.message.empty() ? law.sentence : r.message);
      continue;
    }
    log << fmt::format("  {}  {:<15} {} ({} cases)\n", r.ok ? "PASS" : "FAIL", law.id, law.sentence, r.cases);
    if (r.ok) continue;
    all = false;
    log << r.message;
    if (!r.counterexample.empty()) log << "  minimal counterexample:\n" << r.counterexample;
    if (!r.replay.empty()) log << "  replay: " << r.replay << "\n";
    if (!r.saved.empty()) log << "  saved: " << r.saved << "\n";
  }
  return all;
}

}  // namespace fc::props
