// Verdicts an author can act on: a law that cannot draw enough accepted cases is inconclusive (its
// own status and exit code, with a hint naming what would open it), n/a names what is missing, a
// replay that does not reproduce reports nondeterminism, regression files and random cases are both
// run and reported, a variant's counterexample is the variant problem (printed and saved), and a law
// that runs long prints progress lines.
#include "tests/catch.hpp"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <sstream>
#include <string>

#include "io/attention_io.hpp"
#include "properties/runner.hpp"

namespace {

using namespace fc::props;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// cpu_tiled that takes only lengths that are multiples of m (as a kernel that needs whole tiles).
fc::Kernel multiples_of(int m) {
  fc::Kernel k = *fc::find_kernel("cpu_tiled");
  k.info.name = "test_multiples_of_" + std::to_string(m);
  auto base = k.supports;
  k.supports = [base, m](const fc::Problem& p) { return base(p) && p.n_q % m == 0 && p.n_k % m == 0; };
  return k;
}

// cpu_tiled whose forward corrupts o on every fourth call (calls 3, 7, ...) while `racy` is set: a
// failure that comes and goes, like a race's.
std::atomic<int> flaky_calls{0};
std::atomic<bool> racy{true};
fc::Kernel flaky() {
  fc::Kernel k = *fc::find_kernel("cpu_tiled");
  k.info.name = "test_flaky";
  k.info.variants = {};  // dense problems only: one forward call per reference case
  auto f = k.forward;
  k.forward = [f](const fc::Inputs& in, const fc::Config& cfg, fc::Outputs& out) {
    f(in, cfg, out);
    if (flaky_calls.fetch_add(1) % 4 == 3 && racy) out.o.set(0, out.o.get(0) + 1);
  };
  return k;
}

std::string token_of(const std::string& replay) { return replay.substr(replay.rfind(' ') + 1); }

}  // namespace

TEST_CASE("a law whose cases the kernel almost all declines is inconclusive, never a failure", "[cpu]") {
  const fc::Kernel k = multiples_of(4);
  RunOptions opt;
  opt.cases = 20;
  const LawResult r = run_law(*find_law("reference"), k, opt);
  REQUIRE(r.applies);
  CHECK(r.inconclusive);
  CHECK_FALSE(r.ok);
  CHECK(std::string(law_status(r)) == "inconclusive");
  CHECK(r.counterexample.empty());
  CHECK(r.declined > 10 * r.cases);
  CHECK(contains(r.message, "inconclusive: "));
  // The hint names the lengths declined and the declaration that would open the law.
  CHECK(contains(r.hint, "the kernel declined "));
  CHECK(contains(r.hint, "with the lengths of an accepted one (declined n_q "));
  CHECK(contains(r.hint, ": declare the length constraints the kernel takes in "));
  CHECK_FALSE(contains(r.hint, "head dim of an accepted one"));
  std::ostringstream log;
  print_result(*find_law("reference"), r, log);
  CHECK(contains(log.str(), "INCONCLUSIVE  reference"));
  CHECK(contains(log.str(), "to open it: the kernel declined "));
  // Its own exit code (3), unless the run says it fails (1) or passes (0); a failure outranks it.
  std::vector<std::pair<std::string, LawResult>> results = {{"reference", r}};
  CHECK(suite_exit_code(results, OnInconclusive::Exit3) == 3);
  CHECK(suite_exit_code(results, OnInconclusive::Fail) == 1);
  CHECK(suite_exit_code(results, OnInconclusive::Pass) == 0);
  LawResult failed;
  failed.ok = false;
  results.emplace_back("x", failed);
  CHECK(suite_exit_code(results, OnInconclusive::Pass) == 1);
  CHECK(suite_exit_code({{"reference", LawResult{}}}, OnInconclusive::Exit3) == 0);
}

TEST_CASE("the inconclusive hint names the property the kernel turns down", "[cpu]") {
  fc::Problem p;
  p.d = 8, p.scale = 1;
  auto draws = [&](const std::vector<int>& declined, const std::vector<int>& accepted) {
    DrawStats s;
    for (int n : declined) p.n_q = p.n_k = n, s.add(p, true);
    for (int n : accepted) p.n_q = p.n_k = n, s.add(p, false);
    return s;
  };
  // Lengths: each declined problem is taken with an accepted one's lengths, and with nothing else of it.
  DrawStats s = draws({1, 3, 5, 17, 1}, {32});
  probe_declines(multiples_of(16), s);
  CHECK(s.probed == 5);
  CHECK(s.blockers == std::map<std::string, int>{{"lengths", 5}});
  const std::string h = inconclusive_hint(s, 100);
  CHECK(contains(h,
                 "the kernel declined 5 of the 6 cases drawn; of the 5 declined problems asked again, the kernel "
                 "takes 5 of 5 with the lengths of an accepted one (declined n_q 1 (2x), 3 (1x), 5 (1x), 17 (1x); "
                 "accepted n_q 32 (1x); declined n_k 1 (2x)"));
  CHECK(contains(h,
                 ": declare the length constraints the kernel takes in plugin.h's declarations or Python's "
                 "Kernel(...), so that the suite draws only those, or narrow the sizes drawn from the command line"));
  // A head dim: the same problems, a kernel that takes only d = 64.
  fc::Kernel d64 = *fc::find_kernel("cpu_tiled");
  d64.supports = [](const fc::Problem& q) { return q.d == 64; };
  DrawStats sd = draws({1, 3}, {});
  p.d = 64, p.n_q = p.n_k = 3;
  sd.add(p, false);
  probe_declines(d64, sd);
  CHECK(sd.blockers == std::map<std::string, int>{{"head dim", 2}});
  CHECK(contains(inconclusive_hint(sd, 100), "with the head dim of an accepted one (declined d 8 (2x); accepted d 64"));
  CHECK(contains(inconclusive_hint(sd, 100), "declare the head dims the kernel takes"));
  // Nothing accepted: nothing to compare with; the hint gives the ranges drawn.
  p.d = 8;
  DrawStats none = draws({1, 3, 17}, {});
  probe_declines(multiples_of(16), none);
  CHECK(none.probed == 0);
  CHECK(contains(inconclusive_hint(none, 100), "none was accepted (drawn: n_q 1..17, n_k 1..17, d 8, dtype F32"));
  // Cases outside the law, not declines: the hint says so and what widens the law's domain.
  DrawStats out = draws({}, {32, 32});
  out.discarded = 2;
  out.discard_reasons["the dot products are not exact (grid values)"] = 2;
  const std::string h2 = inconclusive_hint(out, 100);
  CHECK(contains(h2, "2 of the accepted cases were outside the law (most often: the dot products are not exact"));
  CHECK_FALSE(contains(h2, "declined"));
}

TEST_CASE("n/a names what the kernel does not declare", "[cpu]") {
  // Every law on every kernel: law_lacks is empty exactly where the law applies.
  for (const fc::Kernel& k : fc::registry())
    for (const Law& law : laws()) {
      INFO(k.info.name << " " << law.id);
      CHECK(law_lacks(law, k).empty() == law_applies(law, k));
    }
  fc::Kernel one = *fc::find_kernel("cpu_tiled");
  one.info.any_tile = false;
  one.info.configs.resize(1);
  CHECK(contains(law_lacks(*find_law("block_size"), one), "needs two configurations with distinct tiles"));
  const LawResult r = run_law(*find_law("block_size"), one, RunOptions{});
  CHECK_FALSE(r.applies);
  CHECK(contains(r.not_applicable, "declare the kernel's configurations"));
  fc::Kernel no_bwd = one;
  no_bwd.info.backward = false;
  no_bwd.backward = nullptr;
  for (const Law& law : laws())
    if (law.needs_backward) CHECK(law_lacks(law, no_bwd) == "needs a backward, and the kernel declares none");
  // Without exactness claims block_size still needs shared scores; the permutation laws apply to every
  // kernel (a differential bound under a declared arithmetic, each run's certified bound without one).
  fc::Kernel inexact = *fc::find_kernel("cpu_tiled");
  inexact.info.exact = {};
  CHECK(contains(law_lacks(*find_law("block_size"), inexact), "declare the kernel's arithmetic"));
  for (fc::Kernel* kp : {&one, &inexact}) {
    fc::Kernel bare = *kp;
    bare.info.arithmetic = nullptr;
    for (const fc::Kernel* k : std::initializer_list<const fc::Kernel*>{kp, &bare})
      for (const char* id : {"kv_permutation", "q_permutation"}) {
        INFO(id);
        CHECK(law_lacks(*find_law(id), *k).empty());
        CHECK(law_applies(*find_law(id), *k));
      }
  }
}

TEST_CASE("the permutation laws without exactness claims: a correct kernel passes under either criterion", "[cpu]") {
  // cpu_tiled's arithmetic declared but no exactness (the differential bound of shared scores, gradients
  // by the order tolerance), and nothing declared at all (each run within its certified bound).
  fc::Kernel inexact = *fc::find_kernel("cpu_tiled");
  inexact.info.exact = {};
  fc::Kernel bare = inexact;
  bare.info.arithmetic = nullptr;
  RunOptions opt;
  opt.seed = 11;
  for (const fc::Kernel* k : {&inexact, &bare})
    for (const char* id : {"kv_permutation", "q_permutation"}) {
      INFO(k->info.name << " " << id << (k->info.arithmetic ? " (arithmetic declared)" : " (nothing declared)"));
      const LawResult r = run_law(*find_law(id), *k, opt);
      CHECK(r.applies);
      CHECK(r.ok);
      CHECK(r.cases >= 100);
    }
}

TEST_CASE("a replay that fails only on some runs reports nondeterminism", "[cpu]") {
  const fc::Kernel k = flaky();
  const Law& law = *find_law("reference");
  RunOptions opt;
  opt.seed = 7;
  flaky_calls = 0, racy = true;
  const LawResult first = run_law(law, k, opt);
  REQUIRE_FALSE(first.ok);
  REQUIRE(contains(first.replay, "--reproduce "));
  // The replay's own run is call 0 (passes); its ten repeats are calls 1..10, of which 3 and 7 fail.
  opt.reproduce = token_of(first.replay);
  flaky_calls = 0;
  const LawResult again = run_law(law, k, opt);
  CHECK_FALSE(again.ok);
  CHECK_FALSE(again.inconclusive);
  CHECK(again.repeats == 10);
  CHECK(again.repeats_failed == 2);
  CHECK(contains(again.message, "nondeterministic: 2 of 10 repeats fail"));
  CHECK(std::string(law_status(again)) == "fail");
  // A replay that passes every time did not reproduce: inconclusive, with what to do.
  racy = false;
  const LawResult gone = run_law(law, k, opt);
  CHECK(gone.inconclusive);
  CHECK(gone.repeats == 10);
  CHECK(gone.repeats_failed == 0);
  CHECK(contains(gone.message, "did not reproduce: the replayed case passed on its run and on 10 repeats"));
  CHECK(contains(gone.hint, "--replay-repeats"));
  racy = true;
}

TEST_CASE("the racy mutant's determinism counterexample replays as a failure", "[cpu]") {
  // mutant_racy_dq sums d_q's tiles in another order on every other call: the law's two runs differ
  // on every replay, so the replay's own run fails and no repeat is needed.
  const fc::Kernel& k = *fc::find_kernel("mutant_racy_dq");
  RunOptions opt;
  const LawResult first = run_law(*find_law("determinism"), k, opt);
  REQUIRE_FALSE(first.ok);
  opt.reproduce = token_of(first.replay);
  const LawResult again = run_law(*find_law("determinism"), k, opt);
  CHECK_FALSE(again.ok);
  CHECK_FALSE(again.inconclusive);
  CHECK(again.repeats == 0);
  CHECK(contains(again.message, "on the same inputs"));
}

TEST_CASE("regression files and random cases both run and both report their failures", "[cpu]") {
  const std::string dir = (std::filesystem::temp_directory_path() / "fc_verdicts_regressions").string();
  std::filesystem::remove_all(dir);
  const fc::Kernel& k = *fc::find_kernel("mutant_scale_twice");
  const Law& law = *find_law("reference");
  RunOptions opt;
  opt.regressions_dir = dir;
  opt.save_failures = true;
  const LawResult saved = run_law(law, k, opt);
  REQUIRE_FALSE(saved.saved.empty());
  CHECK(saved.regression_cases == 0);
  RunOptions again;
  again.regressions_dir = dir;
  again.seed = 99;
  const LawResult r = run_law(law, k, again);
  CHECK_FALSE(r.ok);
  CHECK(r.regression_cases == 1);
  REQUIRE(r.regression_failures.size() == 1);
  CHECK(r.regression_failures[0].source == saved.saved);
  CHECK(contains(r.regression_failures[0].replay, "--case " + saved.saved));
  CHECK(r.random_failed);  // the failing file did not stop the random cases
  CHECK(contains(r.replay, "--reproduce "));
  std::ostringstream log;
  print_result(law, r, log);
  CHECK(contains(log.str(), "; 1 regression file, 1 failing; "));
  CHECK(contains(log.str(), "  random cases: "));
  CHECK(contains(log.str(), "  regression file " + saved.saved + " fails: "));
  // Past three failing files, each prints one line and its replay line (the JSON keeps them whole).
  const Case one = read_case(saved.saved, nullptr);
  for (int i = 0; i < 4; ++i)
    write_case(dir, "reference", k.info.name, one, {}, "copy" + std::to_string(i) + ".safetensors");
  const LawResult many = run_law(law, k, again);
  REQUIRE(many.regression_failures.size() == 5);
  std::ostringstream many_log;
  print_result(law, many, many_log);
  const std::string m = many_log.str();
  size_t files = 0, cases = 0;
  for (size_t at = m.find("  regression file "); at != std::string::npos; at = m.find("  regression file ", at + 1))
    ++files;
  for (size_t at = m.find("  its case:"); at != std::string::npos; at = m.find("  its case:", at + 1)) ++cases;
  CHECK(files == 5);
  CHECK(cases == 3);
  for (int i = 0; i < 4; ++i) std::filesystem::remove(dir + "/copy" + std::to_string(i) + ".safetensors");
  // A correct kernel passes the file and the random cases, and the count says which was which.
  const LawResult ok = run_law(law, *fc::find_kernel("cpu_tiled"), again);
  CHECK(ok.ok);
  CHECK(ok.regression_cases == 1);
  CHECK(ok.cases > ok.regression_cases);
  CHECK(r.cases < ok.cases);  // the failing file is run, not counted as passed
  std::filesystem::remove_all(dir);
}

TEST_CASE("a variant law's counterexample is the variant problem, printed and saved", "[cpu]") {
  const std::string dir = (std::filesystem::temp_directory_path() / "fc_verdicts_variants").string();
  std::filesystem::remove_all(dir);
  RunOptions opt;
  opt.regressions_dir = dir;
  opt.save_failures = true;
  // A dense law drawing variant problems: the file saved is the failing variant problem itself.
  const fc::Kernel& capless = *fc::find_kernel("mutant_softcap_dropped");
  const LawResult r = run_law(*find_law("reference"), capless, opt);
  REQUIRE_FALSE(r.ok);
  REQUIRE(r.evidence.problems.size() == 1);
  CHECK(r.evidence.problems[0].first == "variant problem");
  CHECK(r.evidence.problems[0].second.p.softcap > 0);
  CHECK(contains(r.counterexample, "the variant problem the kernel ran:"));
  CHECK(contains(r.counterexample, "softcap="));
  CHECK(contains(r.counterexample, "transform: variant problem drawn from the case: "));
  std::string law_id;
  std::map<std::string, std::string> meta;
  const Case back = read_case(r.saved, &law_id, &meta);
  CHECK(law_id == "reference");
  CHECK(back.in.p.softcap == r.evidence.problems[0].second.p.softcap);
  CHECK(contains(meta.at("fc.transform"), "softcap"));
  // It replays as it is: the mutant fails it, a correct kernel passes it.
  RunOptions file;
  file.case_file = r.saved;
  CHECK_FALSE(run_law(*find_law("reference"), capless, file).ok);
  CHECK(run_law(*find_law("reference"), *fc::find_kernel("cpu_tiled"), file).ok);
  // A variant law: the file replays the law (the dense case), the varlen batch is saved beside it.
  const LawResult v = run_law(*find_law("varlen_split"), *fc::find_kernel("mutant_varlen_max_alignment"), opt);
  REQUIRE_FALSE(v.ok);
  REQUIRE(v.saved_problems.size() == 1);
  const fc::Inputs batch = fc::io::read_inputs(v.saved_problems[0]);
  CHECK(batch.p.varlen);
  CHECK_FALSE(read_case(v.saved, nullptr).in.p.varlen);
  CHECK(contains(v.counterexample, "the varlen batch the kernel ran:"));
  CHECK(contains(v.counterexample, "cu_seqlens_q ="));
  CHECK(contains(v.counterexample, "transform: sequence lengths "));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a metamorphic law's counterexample prints its transform", "[cpu]") {
  // kv_permutation on a kernel that reads keys by position: the permutations are printed.
  const LawResult kv = run_law(*find_law("kv_permutation"), *fc::find_kernel("mutant_drop_last_tile"), RunOptions{});
  REQUIRE(kv.applies);
  REQUIRE_FALSE(kv.ok);
  CHECK(contains(kv.counterexample, "transform: keys of (batch 0, kv head 0) permuted "));
}

TEST_CASE("a law that runs past 2 s prints progress lines, at most one per interval", "[cpu]") {
  const fc::Kernel& k = *fc::find_kernel("cpu_tiled");
  const Law& law = *find_law("lse_bracket");
  double t = 0;
  RunOptions opt;
  opt.cases = 30;
  opt.clock = [&t] { return t += 0.25; };  // each reading a quarter second later
  std::ostringstream plain;
  opt.progress = &plain;
  opt.progress_every_s = 2;
  const LawResult r = run_law(law, k, opt);
  CHECK(r.ok);
  const std::string s = plain.str();
  REQUIRE(contains(s, "  ... lse_bracket: "));
  CHECK(contains(s, " cases/s, "));
  CHECK(contains(s, "; now batch="));
  CHECK_FALSE(contains(s, "\r"));
  // No line before 2 s, then one per 2 s at most: the wall time bounds the count.
  const auto lines = size_t(std::count(s.begin(), s.end(), '\n'));
  CHECK(lines >= 1);
  CHECK(double(lines) <= (r.seconds - 2) / 2 + 1);
  CHECK(r.seconds > 2);
  // A terminal's line is rewritten in place and cleared when the law ends.
  std::ostringstream tty;
  opt.progress = &tty, opt.progress_tty = true, t = 0;
  run_law(law, k, opt);
  CHECK(contains(tty.str(), "\r\x1b[K  ... lse_bracket: "));
  CHECK(tty.str().size() >= 4);
  CHECK(tty.str().substr(tty.str().size() - 4) == "\r\x1b[K");
  // A law done within 2 s prints nothing.
  std::ostringstream quick;
  opt.progress = &quick, opt.progress_tty = false;
  opt.clock = [] { return 0.0; };
  run_law(law, k, opt);
  CHECK(quick.str().empty());
}
