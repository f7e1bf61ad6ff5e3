// The large_offsets law: a kernel that declares 64-bit offsets (KernelInfo::large_offsets) indexes a
// tensor past 2^31 elements correctly. The random generators never get near that size (a case's work
// is capped so that a law runs 100 of them), so the law builds its one case itself from the seed:
// q, k, v, d_o of b * h * n * d > 2^31 elements (n = 256 and the kernel's largest head dim; no GQA,
// so k and v pass 2^31 too), every head different (values on a k/8 grid drawn per element), the
// forward and backward on all of it, then sampled heads -- the first, the three around the head
// that starts at element 2^31, the last, and four drawn from the seed -- each held, as a problem of
// its own, against the certified reference within the kernel's error bound. A 32-bit offset wraps
// past 2^31 and reads (or writes) another head or faults: either fails the law.
// Memory: about 8 tensors of 2^31 16-bit elements on the host (34 GB) and on the device (43 GB with
// the backward's fp32 d_q), which is why the law runs only on the kernels that declare it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "properties/laws.hpp"
#include "verdict/verdict.hpp"

namespace fc::props {
namespace {

constexpr int64_t kLimit = int64_t(1) << 31;  // elements a 32-bit signed offset can reach
constexpr int32_t kN = 256;                   // n_q = n_k: two key tiles of every tile the kernels offer
constexpr int64_t kHeadsPast = 64;            // heads wholly past element 2^31
constexpr int32_t kMaxGrid = 65535;           // a launch grid's y and z (heads, batch)

// MemAvailable of /proc/meminfo, in bytes (0 where it cannot be read).
uint64_t available_host_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

// The case's shape for kernel k: its largest claimed head dim up to 128, a 16-bit dtype it claims.
Problem large_problem(const Kernel& k, std::mt19937_64& rng) {
  Problem p;
  const auto& dims = k.info.head_dims;
  p.d = 128;
  if (!dims.empty()) {
    p.d = 0;
    for (int32_t d : dims)
      if (d <= 128) p.d = std::max(p.d, d);
    if (p.d == 0) p.d = *std::min_element(dims.begin(), dims.end());
  }
  if (k.info.dtypes.empty()) {  // per-tensor dtypes only: the first declared combination
    set_dtypes(p, k.info.mixed_dtypes.front());
  } else {
    p.dtype = k.info.dtypes.front();
    for (DType t : k.info.dtypes)
      if (t == DType::F16 || t == DType::BF16) p.dtype = t;
  }
  p.mask = k.info.masks[rng() % k.info.masks.size()];
  p.n_q = p.n_k = kN;
  const int64_t per_head = int64_t(kN) * p.d;
  const int64_t heads = (kLimit + per_head - 1) / per_head + kHeadsPast;  // (batch, head) pairs
  p.batch = int32_t((heads + kMaxGrid / 2 - 1) / (kMaxGrid / 2));
  p.heads_q = p.heads_kv = int32_t((heads + p.batch - 1) / p.batch);
  p.scale = default_scale(p.d);
  return p;
}

// t's elements, drawn uniformly from {-15/8, ..., 15/8} (exact in every dtype) by a counter-based
// generator, on every core: each element depends on (seed, its index) only.
void fill(HostTensor& t, uint64_t seed) {
  constexpr int kValues = 31;
  HostTensor grid(t.dtype, {kValues});
  for (int i = 0; i < kValues; ++i) grid.set(i, double(i - 15) / 8);
  const size_t elem = grid.bytes.size() / kValues;
  const int64_t n = t.numel();
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  auto part = [&](unsigned w) {
    for (int64_t i = n * w / threads; i < n * (w + 1) / threads; ++i) {
      uint64_t z = seed + uint64_t(i) * 0x9E3779B97F4A7C15ull;  // splitmix64 of (seed, i)
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      std::memcpy(t.bytes.data() + size_t(i) * elem, grid.bytes.data() + (z % kValues) * elem, elem);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < threads; ++w) pool.emplace_back(part, w);
  for (std::thread& th : pool) th.join();
}

// Head bh (= b * heads + h) of a (batch, heads, ...) tensor, as a tensor of `shape` (batch = heads = 1).
HostTensor head_of(const HostTensor& t, int64_t bh, std::vector<int64_t> shape) {
  HostTensor out(t.dtype, std::move(shape));
  const size_t bytes = out.bytes.size();
  std::memcpy(out.bytes.data(), t.bytes.data() + size_t(bh) * bytes, bytes);
  return out;
}

// The heads to hold against the reference: the first, the three around the one holding element
// 2^31, the last, four from the seed (two before, two past).
std::vector<int64_t> sampled_heads(const Problem& p, std::mt19937_64& rng) {
  const int64_t heads = int64_t(p.batch) * p.heads_q, boundary = kLimit / (int64_t(p.n_q) * p.d);
  std::vector<int64_t> out{0, boundary - 1, boundary, boundary + 1, heads - 1};
  for (int i = 0; i < 2; ++i) out.push_back(int64_t(rng() % uint64_t(boundary)));
  for (int i = 0; i < 2; ++i) out.push_back(boundary + int64_t(rng() % uint64_t(heads - boundary)));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The configuration a large case runs under: the kernel's first (its default without configs).
Config large_config(const Kernel& k) { return k.info.configs.empty() ? Config{} : k.info.configs.front(); }

// The large case's inputs filled from the seed (q, k, v, and d_o for a backward) and one run of the
// kernel under cfg; a device out of memory makes the case n/a, not a failure.
Run fill_and_run(const Kernel& k, Inputs& in, const Config& cfg, uint64_t seed, bool backward) {
  const Problem& p = in.p;
  in.q = HostTensor(dtype_q(p), shape_q(p)), in.k = HostTensor(dtype_kv(p), shape_kv(p)),
  in.v = HostTensor(dtype_kv(p), shape_kv(p));
  fill(in.q, seed * 4 + 0), fill(in.k, seed * 4 + 1), fill(in.v, seed * 4 + 2);
  if (backward) in.d_o = HostTensor(dtype_o(p), shape_q(p)), fill(in.d_o, seed * 4 + 3);
  const Run r = execute(k, in, cfg, backward);
  if (r.error.find("out of memory") != std::string::npos)  // the device's, not the kernel's fault
    throw NotApplicable("the device lacks the memory for the case: " + r.error);
  return r;
}

std::string law_large_offsets(const Kernel& k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Inputs in;
  in.p = large_problem(k, rng);
  const Problem& p = in.p;
  if (!claims(k, p))
    throw NotApplicable(fmt::format("{} does not claim the case ({} x {} heads, n = {}, d = {}, {})", k.info.name,
                                    p.batch, p.heads_q, p.n_q, p.d, dtypes_str(p)));
  const bool backward = k.info.backward && k.info.writes_lse;  // else the oracle would run on all of it
  // q, k, v, d_o and o, d_q, d_k, d_v in storage, and a copy's margin: a machine without the memory
  // cannot judge the case (n/a), rather than fail a correct kernel.
  const double need = 10.0 * double(numel_q(p)) *
                      double(std::max({dtype_size(dtype_q(p)), dtype_size(dtype_kv(p)), dtype_size(dtype_o(p))}));
  if (need > double(available_host_bytes()))
    throw NotApplicable(fmt::format("the case needs about {:.0f} GB of host memory, {:.0f} GB available", need / 1e9,
                                    double(available_host_bytes()) / 1e9));
  const Config cfg = large_config(k);
  const Run r = fill_and_run(k, in, cfg, seed, backward);
  if (!r.error.empty()) return r.error;

  std::string msg;
  const int64_t per_head = int64_t(p.n_q) * p.d;
  for (int64_t bh : sampled_heads(p, rng)) {
    Inputs one;
    one.p = p;
    one.p.batch = one.p.heads_q = one.p.heads_kv = 1;
    const std::vector<int64_t> sq = shape_q(one.p), skv = shape_kv(one.p);
    one.q = head_of(in.q, bh, sq), one.k = head_of(in.k, bh, skv), one.v = head_of(in.v, bh, skv);
    if (backward) one.d_o = head_of(in.d_o, bh, sq);
    Outputs got;
    got.o = head_of(r.out.o, bh, sq);
    got.lse = head_of(r.out.lse, bh, shape_lse(one.p));
    if (r.out.has_grads())
      got.d_q = head_of(r.out.d_q, bh, sq), got.d_k = head_of(r.out.d_k, bh, skv),
      got.d_v = head_of(r.out.d_v, bh, skv);
    const std::string bad = check_outputs(k, one, got, oracle(k, one, cfg));
    if (!bad.empty())
      msg += fmt::format("head b={},h={} (elements from {}{}):\n{}", bh / p.heads_q, bh % p.heads_q, bh * per_head,
                         bh * per_head >= kLimit ? ", past 2^31" : "", bad);
  }
  return msg;
}

// The padded_scratch case: a decode's 1 to 8 query rows, so that a scratch buffer padded to 128 rows
// per head (b * h_q * round_up(n_q, 128) * max(d, 32) elements: FlashAttention-2's d_q accumulator, a
// split-KV partial o) passes 2^31 elements by kScratchPast while q, k, v and the gradients stay far
// below it. The head dim and a 16-bit dtype the kernel claims, the mask, the GQA group and n_k come
// from the seed; heads_q = 32 (batch up to a few thousand, inside a launch grid's y and z).
constexpr int32_t kScratchRows = 128;   // the padding: round_up(n_q, 128)
constexpr double kScratchPast = 0.125;  // heads past the crossing: an eighth more than reach it
constexpr int32_t kScratchHeads = 32;

int64_t padded_rows_of(int32_t n_q) { return (int64_t(n_q) + kScratchRows - 1) / kScratchRows * kScratchRows; }
// The first (batch, head) pair whose padded scratch starts at or past element 2^31.
int64_t scratch_crossing(const Problem& p) {
  const int64_t per_head = padded_rows_of(p.n_q) * std::max(p.d, 32);
  return (kLimit + per_head - 1) / per_head;
}

Problem padded_problem(const Kernel& k, std::mt19937_64& rng) {
  Problem p;
  std::vector<int32_t> dims;
  for (int32_t d : k.info.head_dims)
    if (d <= 256) dims.push_back(d);
  if (k.info.head_dims.empty()) dims = {64, 128};
  if (dims.empty()) dims = {*std::min_element(k.info.head_dims.begin(), k.info.head_dims.end())};
  p.d = dims[rng() % dims.size()];
  if (k.info.dtypes.empty()) {  // per-tensor dtypes only: the first declared combination
    set_dtypes(p, k.info.mixed_dtypes.front());
  } else {
    std::vector<DType> half;
    for (DType t : k.info.dtypes)
      if (t == DType::F16 || t == DType::BF16) half.push_back(t);
    p.dtype = half.empty() ? k.info.dtypes.front() : half[rng() % half.size()];
  }
  p.mask = k.info.masks[rng() % k.info.masks.size()];
  p.n_q = int32_t(1 + rng() % 8);
  const int32_t groups[] = {1, 2, 4, 8};
  const int32_t g = k.info.gqa ? groups[rng() % 4] : 1;
  p.heads_q = kScratchHeads, p.heads_kv = kScratchHeads / g;
  p.n_k = int32_t(1 + rng() % uint64_t(16 * g));  // k, v: b h_kv n_k d < 2^31 / 4 elements
  const int64_t per_head = padded_rows_of(p.n_q) * std::max(p.d, 32);
  const auto heads = int64_t(std::ceil(double(kLimit) / double(per_head) * (1 + kScratchPast)));
  p.batch = int32_t((heads + p.heads_q - 1) / p.heads_q);
  p.scale = default_scale(p.d);
  return p;
}

// The (batch, kv head) groups to judge, as indices b * h_kv + h_kv: those holding the first q head,
// the three around the scratch's crossing, the last, and four from the seed (two before, two past).
std::vector<int64_t> sampled_groups(const Problem& p, std::mt19937_64& rng) {
  const int64_t heads = int64_t(p.batch) * p.heads_q, cross = scratch_crossing(p), g = p.heads_q / p.heads_kv;
  std::vector<int64_t> bh{0, cross - 1, cross, cross + 1, heads - 1};
  for (int i = 0; i < 2; ++i) bh.push_back(int64_t(rng() % uint64_t(cross)));
  for (int i = 0; i < 2; ++i) bh.push_back(cross + int64_t(rng() % uint64_t(heads - cross)));
  std::vector<int64_t> out;
  for (int64_t x : bh) out.push_back(x / g);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string law_padded_scratch(const Kernel& k, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x5A3B1Eull);  // the sampled groups' draws
  Inputs in;
  in.p = padded_scratch_problem(k, seed);
  const Problem& p = in.p;
  const std::string shape = fmt::format("{} x {} heads ({} kv), n_q = {}, n_k = {}, d = {}, {}", p.batch, p.heads_q,
                                        p.heads_kv, p.n_q, p.n_k, p.d, dtypes_str(p));
  if (!padded_scratch_crosses(p))
    throw std::logic_error("padded_scratch: the case does not cross 2^31 in scratch alone: " + shape);
  if (!claims(k, p)) throw NotApplicable(fmt::format("{} does not claim the case ({})", k.info.name, shape));
  const bool backward = k.info.backward && k.info.writes_lse;  // else the oracle would run on all of it
  const Config cfg = large_config(k);
  const Run r = fill_and_run(k, in, cfg, seed, backward);
  if (!r.error.empty()) return fmt::format("{}: {}", shape, r.error);

  std::string msg;
  const int64_t g = p.heads_q / p.heads_kv, cross = scratch_crossing(p);
  for (int64_t x : sampled_groups(p, rng)) {
    Inputs one;
    one.p = p;
    one.p.batch = 1, one.p.heads_q = int32_t(g), one.p.heads_kv = 1;
    const std::vector<int64_t> sq = shape_q(one.p), skv = shape_kv(one.p);
    one.q = head_of(in.q, x, sq), one.k = head_of(in.k, x, skv), one.v = head_of(in.v, x, skv);
    if (backward) one.d_o = head_of(in.d_o, x, sq);
    Outputs got;
    got.o = head_of(r.out.o, x, sq);
    got.lse = head_of(r.out.lse, x, shape_lse(one.p));
    if (r.out.has_grads())
      got.d_q = head_of(r.out.d_q, x, sq), got.d_k = head_of(r.out.d_k, x, skv), got.d_v = head_of(r.out.d_v, x, skv);
    const std::string bad = check_outputs(k, one, got, oracle(k, one, cfg));
    if (!bad.empty())
      msg += fmt::format("{}: batch {}, kv head {} (q heads {}..{}{}):\n{}", shape, x / p.heads_kv, x % p.heads_kv,
                         x * g % p.heads_q, x * g % p.heads_q + g - 1,
                         (x + 1) * g > cross ? ", whose padded scratch lies past 2^31" : "", bad);
  }
  return msg;
}

}  // namespace

int64_t padded_scratch_elements(const Problem& p) {
  return int64_t(p.batch) * p.heads_q * padded_rows_of(p.n_q) * std::max(p.d, 32);
}

bool padded_scratch_crosses(const Problem& p) {
  return padded_scratch_elements(p) > kLimit && numel_q(p) < kLimit &&
         int64_t(p.batch) * p.heads_kv * p.n_k * p.d < kLimit && int64_t(p.batch) * p.heads_q * p.n_q < kLimit;
}

Problem padded_scratch_problem(const Kernel& k, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9AD5C7A7C4ull);
  return padded_problem(k, rng);
}

void add_large_laws(std::vector<Law>& out) {
  out.push_back({.id = "padded_scratch",
                 .sentence = "scratch padded to 128 rows past 2^31 elements, every tensor below it: sampled heads "
                             "agree with the reference",
                 .regimes = {Regime::Normal},
                 .backward = true,
                 .device_only = true,
                 .check_once = law_padded_scratch});
  out.push_back({.id = "large_offsets",
                 .sentence = "tensors past 2^31 elements are indexed right: sampled heads agree with the reference",
                 .regimes = {Regime::Normal},
                 .backward = true,
                 .needs_large_offsets = true,
                 .check_once = law_large_offsets});
}

}  // namespace fc::props
