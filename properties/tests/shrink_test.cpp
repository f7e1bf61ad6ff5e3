// Shrinking through the runner: a failure first met in the GPU-sized rows shrinks to the shortest
// failing row; a kernel whose failing candidates fault (each a worker restart, simulated here by a
// fault counter) is shrunk within RunOptions::shrink_faults, never runs a case twice, and its replay
// token runs one case; a law that fails only at times (determinism) keeps its failing run's message.
#include "tests/catch.hpp"

#include <fmt/format.h>

#include <regex>
#include <set>
#include <stdexcept>
#include <string>

#include "properties/runner.hpp"

namespace {

using namespace fc::props;

std::string token_of(const std::string& replay) { return replay.substr(replay.rfind(' ') + 1); }

// The faults of a kernel, as an isolated worker counts them (RunOptions::faults).
struct FaultLog {
  int64_t count = 0;
  std::set<std::string> inputs;  // each faulting call's problem and q, k, v bits
};

std::string key_of(const fc::Inputs& in) {
  const fc::Problem& p = in.p;
  auto bits = [](const fc::HostTensor& t) { return std::string(t.bytes.begin(), t.bytes.end()); };
  return fmt::format("{} {} {} {} {} {} {} {} {} {}|", p.batch, p.heads_q, p.heads_kv, p.n_q, p.n_k, p.d, p.d_v,
                     int(p.dtype), int(p.mask), p.scale) +
         bits(in.q) + "|" + bits(in.k) + "|" + bits(in.v);
}

// cpu_naive dressed as the CUDA example plugin (examples/plugin_cuda): a CUDA device (so the
// generator draws GPU-sized rows), its dtypes, the default tile, no backward, the d_v variant only.
// Its forward faults for n_k > 3, as the plugin's FC_FAULT=ILLEGAL does.
fc::Kernel illegal_on_cpu(FaultLog* log) {
  const fc::Kernel* base = fc::find_kernel("cpu_naive");
  REQUIRE(base != nullptr);
  fc::Kernel k = *base;
  k.info.name = "example_cuda_illegal_on_cpu";
  k.info.device = "cuda";
  k.info.dtypes = {fc::DType::F16, fc::DType::BF16, fc::DType::F32};
  k.info.backward = false;
  k.backward = nullptr;
  k.info.variants = fc::Variants{.d_v = true};
  k.forward = [f = base->forward, log](const fc::Inputs& in, const fc::Config& cfg, fc::Outputs& out) {
    if (in.p.n_k > 3) {
      ++log->count;
      log->inputs.insert(key_of(in));
      throw std::runtime_error("an illegal memory access was encountered (simulated)");
    }
    f(in, cfg, out);
  };
  return k;
}

RunOptions options(const FaultLog& log, int shrink_faults) {
  RunOptions opt;
  opt.cases = 20, opt.seed = 5, opt.shrink_faults = shrink_faults;
  opt.regressions_dir = "";
  opt.faults = [&log] { return log.count; };
  return opt;
}

}  // namespace

TEST_CASE("a fault met in the GPU-sized rows shrinks to the shortest faulting row, each case run once", "[cpu]") {
  FaultLog log;
  const fc::Kernel k = illegal_on_cpu(&log);
  const LawResult r = run_law(*find_law("reference"), k, options(log, 1000));
  CAPTURE(r.message, r.counterexample);
  REQUIRE_FALSE(r.ok);
  CHECK(r.message.find("illegal memory access") != std::string::npos);
  CHECK(r.shrink_stopped == 0);
  CHECK(r.counterexample.find("batch=1 heads_q=1 heads_kv=1 n_q=1 n_k=4 d=1 ") != std::string::npos);
  // RapidCheck looks at an accepted case again (for its shrinks, and to report it): the runner keeps
  // its verdict instead of running it, so every fault is a case of its own.
  CHECK(size_t(log.count) == log.inputs.size());
}

TEST_CASE("a case's calls after one faulted are not run", "[cpu]") {
  FaultLog log;
  const fc::Kernel k = illegal_on_cpu(&log);
  // determinism runs the same inputs twice: the second run of a faulting case is not made.
  const LawResult r = run_law(*find_law("determinism"), k, options(log, 1000));
  CAPTURE(r.message, r.counterexample);
  REQUIRE_FALSE(r.ok);
  CHECK(r.message.find("illegal memory access") != std::string::npos);
  CHECK(r.message.find("not run: an earlier call on this case faulted") != std::string::npos);
  CHECK(r.counterexample.find("batch=1 heads_q=1 heads_kv=1 n_q=1 n_k=4 d=1 ") != std::string::npos);
  CHECK(size_t(log.count) == log.inputs.size());
}

TEST_CASE("shrinking stops after its fault budget, says so, and the token replays the reported case", "[cpu]") {
  FaultLog log;
  const fc::Kernel k = illegal_on_cpu(&log);
  const RunOptions opt = options(log, 3);
  const LawResult r = run_law(*find_law("reference"), k, opt);
  CAPTURE(r.message, r.counterexample);
  REQUIRE_FALSE(r.ok);
  CHECK(r.shrink_stopped == 3);
  CHECK(r.message.find("illegal memory access") != std::string::npos);
  CHECK(r.message.find("shrinking stopped after 3 faulting candidates (--shrink-faults 3): the counterexample may "
                       "not be minimal") != std::string::npos);
  CHECK(log.count == 1 + 3);                                    // the failure, then three faulting candidates
  CHECK(r.counterexample.find("n_k=4 ") == std::string::npos);  // three steps stop short of the minimum
  // The token runs one case, the reported one, whatever the seed: one fault.
  RunOptions again = opt;
  again.reproduce = token_of(r.replay);
  again.seed = 99;
  log.count = 0;
  const LawResult replayed = run_law(*find_law("reference"), k, again);
  CHECK_FALSE(replayed.ok);
  CHECK(replayed.counterexample == r.counterexample);
  CHECK(log.count == 1);
  CHECK(replayed.shrink_stopped == 0);
}

TEST_CASE("without a fault counter shrinking is not limited", "[cpu]") {
  FaultLog log;
  const fc::Kernel k = illegal_on_cpu(&log);
  RunOptions opt = options(log, 1);
  opt.faults = nullptr;  // a kernel that cannot fault: its throws are ordinary failures
  const LawResult r = run_law(*find_law("reference"), k, opt);
  CAPTURE(r.message, r.counterexample);
  REQUIRE_FALSE(r.ok);
  CHECK(r.shrink_stopped == 0);
  CHECK(r.counterexample.find("batch=1 heads_q=1 heads_kv=1 n_q=1 n_k=4 d=1 ") != std::string::npos);
}

// A backward that is not repeatable in one output, at times (as atomics are): cpu_naive whose d_v
// differs in one element on its second call only. The determinism law fails on that call, and no
// run after it differs: RapidCheck's second look at the failing case passes, and the report still
// names the output, the element and both values.
TEST_CASE("determinism names the output that differed, its element and both values", "[cpu]") {
  const fc::Kernel* base = fc::find_kernel("cpu_naive");
  REQUIRE(base != nullptr);
  fc::Kernel k = *base;
  k.info.name = "cpu_naive_once_flaky_d_v";
  int calls = 0;
  k.backward = [f = base->backward, &calls](const fc::Inputs& in, const fc::Config& cfg, fc::Outputs& out) {
    f(in, cfg, out);
    if (++calls == 2) out.d_v.set(0, out.d_v.get(0) == 0 ? 1.0 : 2 * out.d_v.get(0));
  };
  RunOptions opt;
  opt.cases = 20, opt.seed = 3;
  opt.regressions_dir = "";
  const LawResult r = run_law(*find_law("determinism"), k, opt);
  CAPTURE(r.message, r.counterexample);
  REQUIRE_FALSE(r.ok);
  CHECK(calls > 2);  // shrinking ran the kernel again, and it agreed with itself
  std::smatch m;
  REQUIRE(
      std::regex_search(r.message, m, std::regex(R"(^d_v\[b=0,h=0,j=0,c=0\]: (\S+) then (\S+) on the same inputs)")));
  const double first = std::stod(m[1]), second = std::stod(m[2]);
  CHECK(second == (first == 0 ? 1.0 : 2 * first));
}
