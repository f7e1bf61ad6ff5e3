// Big shapes: one case per batch, sequences up to big_max_n, head counts that take the element count
// of q (and, for some cases, of k and v) past 2^31, where 32-bit offsets overflow. The oracle that can
// afford it is the certified one on single rows: forward rows are independent, and so is d_q's row
// (d_q_i needs row i's P, dP and D only), so each checked row is its own problem of one query and its
// visible keys. d_k and d_v sum over every row and are not checked here.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ostream>
#include <vector>

#include "fuzz/big_fill.hpp"
#include "fuzz/campaign.hpp"
#include "fuzz/judge.hpp"
#include "fuzz/threads.hpp"
#include "reference/parallel.hpp"
#include "verdict/verdict.hpp"

namespace fc::fuzz {
namespace {

using nlohmann::json;
using props::Regime;

constexpr double k2to31 = 2147483648.0;

// One row (b, h, i) of `in` as its own problem: q row i, the visible prefix of its kv head's keys.
props::Case row_case(const props::Case& c, int64_t b, int32_t h, int64_t i) {
  const Problem& p = c.in.p;
  props::Case r;
  r.cfg = c.cfg;
  r.in.p = Problem{1,   1,       1,          1,      int32_t(std::max<int64_t>(1, n_visible(p.mask, i, p.n_q, p.n_k))),
                   p.d, p.dtype, Mask::None, p.scale};
  const size_t e = size_t(dtype_size(p.dtype)), row = size_t(p.d) * e;
  auto take = [&](const HostTensor& src, int64_t offset, int64_t rows, std::vector<int64_t> shape) {
    HostTensor t(p.dtype, std::move(shape));
    std::memcpy(t.bytes.data(), src.bytes.data() + size_t(offset) * e, size_t(rows) * row);
    return t;
  };
  const int64_t oq = offset_q(p, b, h, i), okv = offset_kv(p, b, kv_head(p, h), 0);
  r.in.q = take(c.in.q, oq, 1, shape_q(r.in.p));
  r.in.k = take(c.in.k, okv, r.in.p.n_k, shape_kv(r.in.p));
  r.in.v = take(c.in.v, okv, r.in.p.n_k, shape_kv(r.in.p));
  if (c.in.has_d_o()) r.in.d_o = take(c.in.d_o, oq, 1, shape_q(r.in.p));
  return r;
}

// The kernel's outputs for that row, as the row problem's outputs (d_k, d_v left out).
Outputs row_outputs(const Outputs& out, const Problem& p, int64_t b, int32_t h, int64_t i) {
  Outputs r;
  auto take = [&](const HostTensor& src, int64_t offset, int64_t count, std::vector<int64_t> shape) {
    HostTensor t(src.dtype, std::move(shape));
    const size_t es = size_t(dtype_size(src.dtype));
    std::memcpy(t.bytes.data(), src.bytes.data() + size_t(offset) * es, size_t(count) * es);
    return t;
  };
  r.o = take(out.o, offset_q(p, b, h, i), p.d, {1, 1, 1, p.d});
  r.lse = take(out.lse, offset_lse(p, b, h, i), 1, {1, 1, 1});
  if (out.has_grads()) r.d_q = take(out.d_q, offset_q(p, b, h, i), p.d, {1, 1, 1, p.d});
  return r;
}

// A big case drawn from src: the shape (heads past 2^31 elements of q when the budget allows), the
// tile, whether the backward runs, and the magnitude of q and k; tensors allocated, not filled.
struct BigCase {
  props::Case c;
  bool bwd = false;
  double q_mag = 1;
};

BigCase draw_big_case(ByteSource& src, const Kernel& k, const CampaignOptions& o) {
  BigCase big;
  Problem& p = big.c.in.p;
  const KernelInfo& info = k.info;
  p.dtype = info.dtypes.empty() ? DType::F32 : src.pick(info.dtypes.data(), info.dtypes.size());
  p.mask = info.masks.empty() ? Mask::None : src.pick(info.masks.data(), info.masks.size());
  static const int32_t kD[] = {64, 128};
  p.d = info.head_dims.empty() ? src.pick(kD, 2) : src.pick(info.head_dims.data(), info.head_dims.size());
  const int32_t n_max = std::max(1, o.big_max_n);
  p.n_k = int32_t(std::max<int64_t>(1, n_max - src.range(0, 1) * (n_max / 2) - src.range(0, 2)));
  p.n_q = src.flip() ? p.n_k : int32_t(std::max<int64_t>(1, p.n_k - src.range(0, 3) * (p.n_k / 4)));
  // Heads: past 2^31 elements of q when the element budget allows, k and v too for some cases.
  const double per_head = double(p.n_q) * p.d, budget = double(o.big_max_elements);
  const int32_t past = int32_t(std::ceil(k2to31 / per_head)) + 1;
  const bool cross = double(past) * per_head <= budget;
  p.heads_q = cross ? past : int32_t(std::clamp<double>(budget / per_head, 1, 4));
  p.heads_kv = (cross && src.flip() && info.gqa) ? 1 : p.heads_q;
  if (!info.gqa) p.heads_kv = p.heads_q;
  // k and v hold at most q's element count: with heads_kv = heads_q they cross 2^31 together with q
  // (n_k = n_q), with one kv head they stay small; longer keys would only add host time and memory.
  p.n_k = int32_t(std::min<int64_t>(p.n_k, int64_t(p.heads_q) * p.n_q / p.heads_kv));
  p.batch = 1;
  p.scale = default_scale(p.d) * std::ldexp(1.0, int(src.range(-2, 2)));
  big.c.cfg = info.configs.empty() ? Config{} : src.pick(info.configs.data(), info.configs.size());
  big.q_mag = std::ldexp(1.0, int(src.range(-2, 6)));  // scores to ~2^12 d scale
  big.c.in.q = HostTensor(p.dtype, shape_q(p));        // (1, heads_q, n_q, d)
  big.c.in.k = HostTensor(p.dtype, shape_kv(p));       // (1, heads_kv, n_k, d)
  big.c.in.v = HostTensor(p.dtype, shape_kv(p));       // (1, heads_kv, n_k, d)
  big.bwd = info.backward && bool(k.backward) && src.flip();
  if (big.bwd) big.c.in.d_o = HostTensor(p.dtype, shape_q(p));  // (1, heads_q, n_q, d)
  return big;
}

// The rows checked: the first, the last, those holding q's elements 2^31 and 2^32 (and k's), random ones.
std::vector<int64_t> rows_to_check(const Problem& p, ByteSource& src, int count) {
  std::vector<int64_t> rows = {0, numel_lse(p) - 1};
  for (double at : {k2to31, 2 * k2to31})
    if (at < double(numel_q(p))) rows.push_back(int64_t(at) / p.d), rows.push_back(int64_t(at) / p.d - 1);
  while (int(rows.size()) < count) rows.push_back(src.range(0, numel_lse(p) - 1));
  return rows;
}

// One row of the kernel's run judged as its own problem; "" when it holds.
std::string judge_row(const Kernel& k, const props::Case& c, const verdict::Run& run, int64_t row) {
  const Problem& p = c.in.p;
  const int64_t i = row % p.n_q;
  const int32_t h = int32_t(row / p.n_q % p.heads_q);
  if (!run.error.empty()) return run.error;
  verdict::Run mine;
  mine.out = row_outputs(run.out, p, 0, h, i);
  if (n_visible(p.mask, i, p.n_q, p.n_k) == 0) {  // the contract, whatever the oracle says
    const bool ok = mine.out.lse.get(0) == -INFINITY && mine.out.o.bytes == HostTensor(p.dtype, {1, 1, 1, p.d}).bytes;
    return ok ? "" : fmt::format("row {} sees no key but o/lse are not 0/-inf", row);
  }
  return judge_run(k, row_case(c, 0, h, i), mine, nullptr).failure;
}

}  // namespace

json run_big_campaign(const Kernel& k, const CampaignOptions& o, std::ostream& log) {
  const int threads = o.threads > 0 ? o.threads : ref::worker_threads();
  json r = fuzz_report_envelope(o, {{"kernel", k.info.name},
                                    {"seed", o.seed},
                                    {"cases", o.cases},
                                    {"big", true},
                                    {"big_max_n", o.big_max_n},
                                    {"big_max_elements", o.big_max_elements},
                                    {"rows", o.big_rows}});
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const uint64_t total = o.cases ? o.cases : UINT64_MAX;
  int64_t failures = 0, cases = 0;
  for (uint64_t b = uint64_t(o.shard_index); b < total; b += uint64_t(o.shard_count)) {
    if (o.only_batch >= 0 && b != uint64_t(o.only_batch)) continue;
    if (o.seconds > 0 && elapsed() >= o.seconds) break;
    double phase = elapsed();
    ByteSource src(ByteSource::mix(o.seed ^ ByteSource::mix(b + 1) ^ 0xb16));
    BigCase big = draw_big_case(src, k, o);
    props::Case& c = big.c;
    const Problem& p = c.in.p;
    json item = problem_item(b, p);
    item["backward"] = big.bwd, item["elements_q"] = double(numel_q(p));
    if (!claims(k, p)) {
      item["cases"] = 0, item["declined"] = true;
      r["batches"].push_back(item);
      continue;
    }
    log << fmt::format("  case {}: {} {} h_q={} h_kv={} n_q={} n_k={} d={}{}: {:.3g} elements of q, {:.3g} of k\n", b,
                       dtype_name(p.dtype), mask_name(p.mask), p.heads_q, p.heads_kv, p.n_q, p.n_k, p.d,
                       big.bwd ? " +bwd" : "", double(numel_q(p)), double(c.in.k.numel()));
    auto progress = [&](const char* what) {  // where a big case's time goes, phase by phase
      log << fmt::format("  case {}: {} ({:.1f} s)\n", b, what, elapsed() - phase);
      log.flush();
      phase = elapsed();
    };
    fill_grid(c.in.q, o.seed ^ b ^ 1, big.q_mag, threads);
    fill_grid(c.in.k, o.seed ^ b ^ 2, big.q_mag, threads);
    fill_grid(c.in.v, o.seed ^ b ^ 3, 4, threads);
    if (big.bwd) fill_grid(c.in.d_o, o.seed ^ b ^ 4, 1, threads);
    progress("inputs allocated and filled");
    const verdict::Run run = verdict::execute(k, c.in, c.cfg, big.bwd);
    progress(big.bwd ? "forward and backward ran" : "forward ran");
    const std::vector<int64_t> rows = rows_to_check(p, src, o.big_rows);
    std::vector<std::string> verdicts(rows.size());
    on_threads(threads, int64_t(rows.size()),
               [&](int64_t x) { verdicts[size_t(x)] = judge_row(k, c, run, rows[size_t(x)]); });
    int64_t failed = 0;
    for (size_t x = 0; x < rows.size(); ++x) {
      if (verdicts[x].empty()) continue;
      if (failed++ >= 3) continue;
      r["failures"].push_back(
          {{"seq", b},
           {"sub", rows[x]},
           {"check", "reference_row"},
           {"message", verdicts[x].substr(0, verdicts[x].find('\n'))},
           {"replay", fmt::format("flashcheck fuzz --kernel {} --big --seed {} --big-max-n {} "
                                  "--big-max-elements {} --cases {} --only-batch {}",
                                  k.info.name, o.seed, o.big_max_n, o.big_max_elements, b + 1, b)}});
    }
    failures += failed, ++cases;
    item["cases"] = 1, item["rows_checked"] = rows.size(), item["failures"] = failed;
    item["checks"] = {{"reference_row", int64_t(rows.size())}};
    r["batches"].push_back(item);
    progress(fmt::format("{} rows checked, {} failed", rows.size(), failed).c_str());
    log << fmt::format("  case {}: done at {:.1f} s\n", b, elapsed());
    if (o.checkpoint) {  // a run stopped during a later case still leaves the cases finished so far
      json partial = r;
      report::finalize_fuzz_report(partial);
      o.checkpoint(partial);
    }
  }
  report::finalize_fuzz_report(r);
  log << fmt::format("flashcheck fuzz --big: {} cases, {} failed, {:.1f} s\n", cases, failures, elapsed());
  return r;
}

}  // namespace fc::fuzz
