#include "fuzz/campaign.hpp"

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <ostream>
#include <thread>

#include "fuzz/judge.hpp"
#include "fuzz/threads.hpp"
#include "reference/gpu/oracle_select.hpp"

namespace fc::fuzz {

using props::Regime;
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kRecordedPerBatch = 3;  // failing cases kept (listed and saved) per batch; all are counted

// Cases of one shape stacked along the batch dimension (each case has batch 1).
Inputs pack(const std::vector<props::Case>& cases) {
  Inputs in = cases[0].in;
  in.p.batch = int32_t(cases.size());
  for (HostTensor* t : {&in.q, &in.k, &in.v, &in.d_o}) {
    if (t->shape.empty()) continue;
    t->shape[0] = in.p.batch;
    const size_t each = t->bytes.size();  // every case's tensor has case 0's shape
    t->bytes.clear();
    t->bytes.reserve(cases.size() * each);
  }
  for (const props::Case& c : cases)
    for (auto [dst, src] : {std::pair{&in.q, &c.in.q}, std::pair{&in.k, &c.in.k}, std::pair{&in.v, &c.in.v},
                            std::pair{&in.d_o, &c.in.d_o}})
      dst->bytes.insert(dst->bytes.end(), src->bytes.begin(), src->bytes.end());
  return in;
}

// Case i's share of a packed tensor (batch is the outermost dimension).
HostTensor slice(const HostTensor& t, int64_t i, int64_t count) {
  HostTensor s;
  if (t.shape.empty()) return s;
  s.dtype = t.dtype;
  s.shape = t.shape;
  s.shape[0] = 1;
  const size_t n = t.bytes.size() / size_t(count);
  s.bytes.assign(t.bytes.begin() + ptrdiff_t(n * size_t(i)), t.bytes.begin() + ptrdiff_t(n * size_t(i + 1)));
  return s;
}

verdict::Run slice(const verdict::Run& r, int64_t i, int64_t count) {
  verdict::Run s;
  s.error = r.error;
  for (auto [dst, src] :
       {std::pair{&s.out.o, &r.out.o}, std::pair{&s.out.lse, &r.out.lse}, std::pair{&s.out.d_q, &r.out.d_q},
        std::pair{&s.out.d_k, &r.out.d_k}, std::pair{&s.out.d_v, &r.out.d_v}})
    *dst = slice(*src, i, count);
  return s;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// The law whose replay (`check --case`) reproduces a failed check on c.
std::string replay_law(const std::string& check, const props::Case& c) {
  if (check == "blast_radius") return "nan_blast";
  for (Regime r : {Regime::Huge, Regime::FarBelow, Regime::Fp16Max, Regime::SubnormalP, Regime::Subnormal})
    if (c.regime == r) return "extreme";
  return "reference";
}

// A blast-radius failure with several poisoned positions, narrowed to one that fails on its own (the
// nan_blast law poisons one position of otherwise clean inputs); unchanged when none does.
props::Case single_poison(const Kernel& k, const props::Case& c) {
  props::Case clean = c;
  clean_inputs(clean.in);
  int tried = 0;
  for (int32_t which = 0; which < 3; ++which) {
    const HostTensor& t = which == 0 ? c.in.q : which == 1 ? c.in.k : c.in.v;
    for (int64_t i = 0; i < t.numel() && tried < 16; ++i) {
      const double x = t.get(i);
      if (std::isfinite(x) && std::fabs(x) < 0x1p500) continue;
      ++tried;
      props::Case one = clean;
      (which == 0 ? one.in.q : which == 1 ? one.in.k : one.in.v).set(i, x);
      one.regime = Regime::Poison, one.poison_tensor = which, one.poison_index = i, one.poison_value = x;
      const bool bwd = one.in.has_d_o() && k.info.backward;
      if (!judge_run(k, one, verdict::execute(k, one.in, one.cfg, bwd), nullptr).ok()) {
        one.in = clean.in;  // nan_blast applies the poison itself, to these clean inputs
        return one;
      }
    }
  }
  return c;
}

struct BatchResult {
  json item;
  json failures = json::array();
  int64_t cases = 0, failed = 0;
  std::map<std::string, int64_t> checks;
};

// Calls of a kernel that runs one call at a time while batches are in flight (run_campaign): a plugin
// (its worker process), a mutant (planted state, and a CUDA mutant's fault may poison the context for
// every thread). The built-in kernels run side by side: the CPU ones are pure functions of their
// inputs, the CUDA ones run each call on the calling thread's stream with buffers of its own
// (kernels/cuda/device_buffer.hpp).
std::mutex g_one_call;
bool one_call_at_a_time(const Kernel& k) { return k.info.mutant || k.info.external; }

verdict::Run execute_locked(const Kernel& k, const Inputs& in, const Config& cfg, bool bwd, bool lock) {
  std::unique_lock<std::mutex> held(g_one_call, std::defer_lock);
  if (lock) held.lock();
  return verdict::execute(k, in, cfg, bwd);
}

// Batch b: its cases decoded, packed into one call of k (and one on the cleaned inputs where any is
// non-finite), each judged. `threads` share the per-case loops; `lock`: the calls take g_one_call.
BatchResult run_batch(const Kernel& k, const CampaignOptions& o, uint64_t b, int threads, bool lock) {
  BatchResult res;
  const uint64_t batch_seed = ByteSource::mix(o.seed ^ ByteSource::mix(b + 1));
  ByteSource shape_src(batch_seed);
  ShapeLimits lim = o.limits;
  lim.max_batch = 1;
  const props::Case skeleton = decode_shape(shape_src, k, lim);
  const Problem& p = skeleton.in.p;
  std::vector<props::Case> cases(size_t(o.batch), skeleton);
  on_threads(threads, o.batch, [&](int64_t i) {
    ByteSource src(ByteSource::mix(batch_seed ^ ByteSource::mix(uint64_t(i) + 0x5eed)));
    decode_values(src, cases[size_t(i)], o.values);
  });
  Problem packed_p = p;
  packed_p.batch = o.batch;
  res.item = problem_item(b, p);
  res.item["config"] = fmt::format("{}x{}{}", skeleton.cfg.block_m, skeleton.cfg.block_n,
                                   skeleton.cfg.order == LoopOrder::FA1 ? "/FA1" : "");
  res.item["backward"] = skeleton.in.has_d_o();
  if (!claims(k, packed_p)) {
    res.item["cases"] = 0;
    res.item["declined"] = true;  // the kernel does not take this shape: nothing ran, nothing counted
    return res;
  }
  const bool bwd = skeleton.in.has_d_o() && k.info.backward;
  const Inputs packed = pack(cases);
  const verdict::Run run = execute_locked(k, packed, skeleton.cfg, bwd, lock);
  verdict::Run clean_run;
  bool any_dirty = false;
  {
    // The cleaned cases packed: cleaning is element by element, so the packed inputs cleaned.
    Inputs clean = packed;
    any_dirty = clean_inputs(clean);
    if (any_dirty) clean_run = execute_locked(k, clean, skeleton.cfg, bwd, lock);
  }
  std::vector<Judgement> verdicts(cases.size());
  on_threads(threads, o.batch, [&](int64_t i) {
    const verdict::Run mine = slice(run, i, o.batch), clean = any_dirty ? slice(clean_run, i, o.batch) : verdict::Run{};
    verdicts[size_t(i)] = judge_run(k, cases[size_t(i)], mine, any_dirty ? &clean : nullptr);
  });
  for (const Judgement& j : verdicts)
    if (!j.unavailable.empty()) throw ref::OracleUnavailable(j.unavailable);
  for (int64_t i = 0; i < o.batch; ++i) {
    const Judgement& j = verdicts[size_t(i)];
    ++res.checks[j.check];
    if (j.ok()) continue;
    if (res.failed++ >= kRecordedPerBatch) continue;
    props::Case c = cases[size_t(i)];
    if (j.check == "blast_radius") c = single_poison(k, c);
    const std::string law = replay_law(j.check, c);
    json f = {{"seq", b}, {"sub", i}, {"check", j.check}, {"law", law}, {"message", first_line(j.failure)}};
    if (!o.out.empty()) {
      const std::string name = fmt::format("fuzz-{}-{}-{}-{}.safetensors", k.info.name, o.seed, b, i);
      save_failure(o.out + "/cases", law, k, c,
                   {{"fc.fuzz.seed", std::to_string(o.seed)},
                    {"fc.fuzz.batch", std::to_string(b)},
                    {"fc.fuzz.case", std::to_string(i)},
                    {"fc.fuzz.check", j.check},
                    {"fc.fuzz.failure", first_line(j.failure)},
                    {"fc.fuzz.file", name}});
      f["file"] = "cases/" + name;
      const std::string prefix = o.replay_prefix.empty() ? "flashcheck check --kernel " + k.info.name : o.replay_prefix;
      f["replay"] = fmt::format("{} --law {} --case cases/{}", prefix, law, name);
    }
    res.failures.push_back(f);
  }
  res.cases = o.batch;
  res.item["cases"] = o.batch;
  res.item["failures"] = res.failed;
  res.item["checks"] = res.checks;
  return res;
}

}  // namespace

std::string save_failure(const std::string& dir, const std::string& law, const Kernel& k, const props::Case& c,
                         const std::map<std::string, std::string>& extra) {
  auto it = extra.find("fc.fuzz.file");
  return props::write_case(dir, law, k.info.name, c, extra, it == extra.end() ? "" : it->second);
}

json problem_item(uint64_t seq, const Problem& p) {
  return {{"seq", seq},
          {"dtype", dtype_name(p.dtype)},
          {"mask", mask_name(p.mask)},
          {"heads_q", p.heads_q},
          {"heads_kv", p.heads_kv},
          {"n_q", p.n_q},
          {"n_k", p.n_k},
          {"d", p.d},
          {"scale", fmt::format("{}", p.scale)}};
}

json fuzz_report_envelope(const CampaignOptions& o, json options) {
  json r = {{"schema", "flashcheck-report"},
            {"version", 1},
            {"kind", "fuzz"},
            {"options", std::move(options)},
            {"batches", json::array()},
            {"failures", json::array()}};
  if (o.shard_count > 1) r["shard"] = {{"index", o.shard_index}, {"count", o.shard_count}};
  return r;
}

json run_campaign(const Kernel& k, const CampaignOptions& o, std::ostream& log) {
  if (o.big) return run_big_campaign(k, o, log);
  const int threads = o.threads > 0 ? o.threads : ref::worker_threads();
  json values = json::array();
  for (Values v : o.values) values.push_back(values_name(v));
  json r = fuzz_report_envelope(o, {{"kernel", k.info.name},
                                    {"seed", o.seed},
                                    {"batch", o.batch},
                                    {"cases", o.cases},
                                    {"values", values},
                                    {"max_n", o.limits.max_n},
                                    {"max_d", o.limits.max_d},
                                    {"big", false}});
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const uint64_t total_batches = o.cases ? (o.cases + uint64_t(o.batch) - 1) / uint64_t(o.batch) : UINT64_MAX;
  // This shard's i-th batch (UINT64_MAX past the last): every shard_count-th from shard_index, or
  // only_batch alone when it is this shard's.
  auto batch_at = [&](uint64_t i) -> uint64_t {
    if (o.only_batch >= 0) {
      const auto only = uint64_t(o.only_batch);
      const bool mine = only >= uint64_t(o.shard_index) && (only - uint64_t(o.shard_index)) % uint64_t(o.shard_count) == 0;
      return i == 0 && mine && only < total_batches ? only : UINT64_MAX;
    }
    const uint64_t b = uint64_t(o.shard_index) + i * uint64_t(o.shard_count);
    return b < total_batches && b >= i ? b : UINT64_MAX;  // b >= i: no wrap-around
  };
  int64_t cases = 0, failures = 0;
  double last_log = 0, last_checkpoint = 0;
  auto take = [&](BatchResult& res) {  // in batch order
    cases += res.cases, failures += res.failed;
    r["batches"].push_back(std::move(res.item));
    for (json& f : res.failures) r["failures"].push_back(std::move(f));
    if (o.checkpoint && elapsed() - last_checkpoint >= 30) {
      last_checkpoint = elapsed();
      json partial = r;
      report::finalize_fuzz_report(partial);
      o.checkpoint(partial);
    }
    if (elapsed() - last_log >= 10) {
      last_log = elapsed();
      log << fmt::format("  {:.0f} s: {} cases ({:.0f}/min), {} failed\n", last_log, cases, cases * 60 / last_log,
                         failures);
      log.flush();
    }
  };
  const bool lock = one_call_at_a_time(k);
  if (threads <= 1 || batch_at(1) == UINT64_MAX) {  // one batch at a time, its cases on the threads
    for (uint64_t i = 0, b; (b = batch_at(i)) != UINT64_MAX; ++i) {
      if (o.seconds > 0 && elapsed() >= o.seconds) break;
      BatchResult res = run_batch(k, o, b, threads, lock);
      take(res);
    }
  } else {
    // Batches in flight, one per thread, each whole on its thread (a batch's verdicts do not depend on
    // the threads that judge it): the serial parts of a batch (packing, the kernel's call, cleaning)
    // overlap. Batches start in order and every started one finishes, so the report holds a prefix
    // of the shard's batches, in order, as one batch at a time would.
    std::mutex m;
    std::condition_variable cv;
    std::map<uint64_t, BatchResult> done;  // finished, not yet taken; by position in the shard
    uint64_t next = 0, running = 0;
    bool stop = false;
    std::exception_ptr failure;
    auto worker = [&] {
      const ref::SerialScope serial(true);
      for (;;) {
        uint64_t i = 0, b = 0;
        {
          std::lock_guard<std::mutex> g(m);
          if (stop || (o.seconds > 0 && elapsed() >= o.seconds) || (b = batch_at(next)) == UINT64_MAX) {
            stop = true;
            cv.notify_all();
            return;
          }
          i = next++, ++running;
        }
        try {
          BatchResult res = run_batch(k, o, b, 1, lock);
          std::lock_guard<std::mutex> g(m);
          done.emplace(i, std::move(res)), --running;
        } catch (...) {
          std::lock_guard<std::mutex> g(m);
          if (!failure) failure = std::current_exception();
          stop = true, --running;
        }
        cv.notify_all();
      }
    };
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
    for (uint64_t taken = 0;;) {
      std::unique_lock<std::mutex> g(m);
      cv.wait(g, [&] { return done.count(taken) || (stop && running == 0) || failure; });
      if (failure) break;
      auto it = done.find(taken);
      if (it == done.end()) break;  // stopped, and every started batch is taken
      BatchResult res = std::move(it->second);
      done.erase(it);
      g.unlock();
      take(res);
      ++taken;
    }
    for (std::thread& t : pool) t.join();
    if (failure) std::rethrow_exception(failure);
  }
  report::finalize_fuzz_report(r);
  const double s = elapsed();
  log << fmt::format("flashcheck fuzz: {} cases in {:.1f} s ({:.0f} cases/min, {} threads), {} failed\n", cases, s,
                     s > 0 ? cases * 60 / s : 0.0, threads, failures);
  return r;
}

}  // namespace fc::fuzz
