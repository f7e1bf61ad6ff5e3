#include "reports/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <stdexcept>

#include "reports/variant_plan.hpp"

namespace fc::report {

namespace {

// Keys and query rows past which a case is a GPU case: a CPU kernel and its bound take seconds per
// head at 4096, minutes at 16384.
constexpr int32_t kCpuMaxN = 4096;
// The long cases of a GPU kernel: up to the 128k-token contexts models ship with. The plan checks the
// last kLongRows rows of each on all their keys (plan.hpp); where the certificate and every bound run
// on the GPU, the sweep checks every row (whole_long_rows, run.hpp).
constexpr int32_t kGpuNormalN[] = {16384, 32768, 65536, 131072};
constexpr int32_t kGpuOutliersN[] = {16384, 131072};
constexpr int32_t kGpuCausalN[] = {16384, 131072};

std::vector<std::string> all_regimes() {
  std::vector<std::string> r = {"normal", "outliers", "scores", "causal_top_left", "causal_bottom_right", "gqa"};
  for (const std::string& v : variant_regime_names()) r.push_back(v);
  return r;
}

std::string shape_name(int32_t n_q, int32_t n_k) {
  return n_q == n_k ? fmt::format("n{}", n_q) : fmt::format("q{}k{}", n_q, n_k);
}

struct Builder {
  DType t;
  std::vector<CaseSpec> out;
  CaseSpec& add(const std::string& regime, int32_t heads_q, int32_t heads_kv, int32_t n_q, int32_t n_k, int32_t d,
                Mask mask, const std::string& suffix = "") {
    CaseSpec c;
    c.regime = regime;
    c.p = Problem{1, heads_q, heads_kv, n_q, n_k, d, t, mask, default_scale(d)};
    c.id = fmt::format("{}/{}/{}{}", dtype_name(t), regime, shape_name(n_q, n_k), suffix);
    c.gpu_only = std::max(n_q, n_k) > kCpuMaxN;
    // A long case's kernel runs its whole backward; d_q of the checked rows depends on those rows
    // alone, so it is checked there (d_k and d_v only for the keys no other row sees: checked_keys).
    c.backward = int64_t(n_q) * n_k <= int64_t(1024) * 1024 || c.gpu_only;
    if (c.gpu_only) c.rows = kLongRows, c.p.heads_q = c.p.heads_kv = 1;
    out.push_back(c);
    return out.back();
  }
};

// Every case of dtype t for one plan flavour. Head dims are 64 and 128 only, so GPU kernels that
// specialise on them run every case too.
std::vector<CaseSpec> cases_of(DType t, bool quick, bool gpu) {
  Builder b{t, {}};
  using M = Mask;
  const std::vector<int32_t> normal_n =
      quick ? std::vector<int32_t>{16, 64, 256} : std::vector<int32_t>{16, 64, 256, 1024, 4096};
  for (int32_t n : normal_n) b.add("normal", n <= 1024 ? 2 : 1, n <= 1024 ? 2 : 1, n, n, 64, M::None);
  if (gpu && !quick)
    for (int32_t n : kGpuNormalN) b.add("normal", 1, 1, n, n, 64, M::None);
  for (int32_t n : quick ? std::vector<int32_t>{256} : std::vector<int32_t>{256, 1024}) {
    b.add("outliers", n <= 256 ? 2 : 1, n <= 256 ? 2 : 1, n, n, 128, M::None).outliers = true;
  }
  if (gpu && !quick)
    for (int32_t n : kGpuOutliersN) b.add("outliers", 1, 1, n, n, 128, M::None).outliers = true;
  // Score magnitude: q, k ~ N(0, sigma^2) at scale 1/sqrt(d) give scores of standard deviation
  // sigma^2, up to a few thousand (fp16 S of a baseline stays below 65504).
  const int32_t score_n = quick ? 64 : 256;
  for (int32_t sigma : quick ? std::vector<int32_t>{1, 4, 16} : std::vector<int32_t>{1, 2, 4, 8, 16, 32})
    b.add("scores", 2, 2, score_n, score_n, 64, M::None, fmt::format("s{}", sigma * sigma)).sigma = sigma;
  // The alignments differ only when n_q != n_k: top-left with n_q > n_k (later rows see every key),
  // bottom-right with n_q < n_k (decoding-like) and with n_q > n_k (the first rows see no key).
  for (int32_t n : quick ? std::vector<int32_t>{64} : std::vector<int32_t>{256, 1024}) {
    b.add("causal_top_left", 2, 2, n, n / 2, 64, M::CausalTopLeft);
    b.add("causal_bottom_right", 2, 2, n / 2, n, 64, M::CausalBottomRight);
    b.add("causal_bottom_right", 2, 2, n, n / 2, 64, M::CausalBottomRight);
  }
  // Long causal rows: the last rows are the only ones that see the last keys, so d_k and d_v of
  // those keys are held too (checked_keys).
  if (gpu && !quick)
    for (int32_t n : kGpuCausalN) b.add("causal_bottom_right", 1, 1, n, n, 64, M::CausalBottomRight);
  b.add("gqa", 8, 2, quick ? 64 : 256, quick ? 64 : 256, 128, M::None);
  if (gpu && !quick) b.add("gqa", 8, 2, 1024, 1024, 128, M::CausalBottomRight).gpu_only = true;
  for (CaseSpec& c : variant_cases(t, quick)) b.out.push_back(std::move(c));
  return b.out;
}

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

const std::vector<std::string>& regime_names() {
  static const std::vector<std::string> names = all_regimes();
  return names;
}

Variants case_variants(const CaseSpec& c) {
  Variants v = variants_of(c.p);
  v.strides = !c.layout.empty();
  return v;
}

std::vector<CaseSpec> audit_plan(const PlanOptions& o) {
  std::vector<CaseSpec> plan;
  for (DType t : o.dtypes)
    for (CaseSpec& c : cases_of(t, o.quick, o.gpu))
      if (o.regimes.empty() || std::find(o.regimes.begin(), o.regimes.end(), c.regime) != o.regimes.end())
        plan.push_back(std::move(c));
  for (size_t i = 0; i < plan.size(); ++i) plan[i].seq = int32_t(i);
  return plan;
}

bool find_case(const std::string& id, CaseSpec* out) {
  for (DType t : sweep_dtypes())
    for (bool quick : {false, true})
      for (const CaseSpec& c : cases_of(t, quick, true))
        if (c.id == id) {
          *out = c;
          return true;
        }
  return false;
}

Problem checked_problem(const CaseSpec& c) {
  if (!is_cut(c)) return c.p;
  if (c.p.mask == Mask::CausalTopLeft && c.p.n_q != c.p.n_k)
    throw std::logic_error("checked_problem: top-left rows of a non-square problem cannot be cut");
  Problem s = c.p;
  s.n_q = c.rows;
  if (s.mask != Mask::None) s.mask = Mask::CausalBottomRight;  // row n_q - R + i' keeps its keys
  return s;
}

std::vector<double> checked_rows(const CaseSpec& c, const std::vector<double>& full, int64_t width) {
  if (!is_cut(c)) return full;
  std::vector<double> out;  // (batch, heads_q, rows, width)
  out.reserve(size_t(int64_t(c.p.batch) * c.p.heads_q * c.rows * width));
  for (int64_t bh = 0; bh < int64_t(c.p.batch) * c.p.heads_q; ++bh) {
    const int64_t first = (bh * c.p.n_q + (c.p.n_q - c.rows)) * width;
    out.insert(out.end(), full.begin() + first, full.begin() + first + int64_t(c.rows) * width);
  }
  return out;
}

int32_t checked_keys(const CaseSpec& c) {
  if (!is_cut(c)) return c.p.n_k;
  // Bottom-right, row i sees keys j <= i + n_k - n_q: key j >= n_k - R only rows i >= n_q - R. A window
  // reaching right of the diagonal breaks that.
  const bool causal = c.p.mask == Mask::CausalBottomRight || (c.p.mask == Mask::CausalTopLeft && c.p.n_q == c.p.n_k);
  return causal && !has_window(c.p) ? std::min(c.rows, c.p.n_k) : 0;
}

std::vector<double> checked_key_rows(const CaseSpec& c, const std::vector<double>& kv_side, int64_t width) {
  const int64_t keys = checked_keys(c), n_k = c.p.n_k;
  if (keys == n_k) return kv_side;
  std::vector<double> out;  // (batch, heads_kv, keys, width)
  out.reserve(size_t(int64_t(c.p.batch) * c.p.heads_kv * keys * width));
  for (int64_t bh = 0; bh < int64_t(c.p.batch) * c.p.heads_kv; ++bh) {
    const int64_t first = (bh * n_k + (n_k - keys)) * width;
    out.insert(out.end(), kv_side.begin() + first, kv_side.begin() + first + keys * width);
  }
  return out;
}

Inputs checked_inputs(const CaseSpec& c, const Inputs& full) {
  if (!is_cut(c)) return full;
  Inputs in;
  in.p = checked_problem(c);
  in.q = HostTensor::from_f64(c.p.dtype, shape_q(in.p), checked_rows(c, full.q.to_f64(), c.p.d));
  in.k = full.k, in.v = full.v;
  if (full.has_d_o())
    in.d_o = HostTensor::from_f64(c.p.dtype, shape_o(in.p), checked_rows(c, full.d_o.to_f64(), head_dim_v(c.p)));
  return in;
}

Inputs make_inputs(const CaseSpec& c, uint64_t seed) {
  std::mt19937_64 rng(splitmix64(seed ^ fnv1a(c.id.data(), c.id.size())));
  std::normal_distribution<double> normal(0.0, 1.0);
  auto fill = [&](HostTensor& x, double sigma, bool outliers, bool positive = false) {
    for (int64_t i = 0; i < x.numel(); ++i) {
      double v = sigma * normal(rng);
      if (positive) v = std::fabs(v);
      if (outliers && rng() % 1000 == 0) v += 10 * normal(rng);  // N(0, 100): standard deviation 10
      x.set(i, v);                                               // rounded to the storage dtype
    }
  };
  Inputs in;
  in.p = c.p;
  add_structure(c, in);                         // varlen offsets, page table, ALiBi slopes, sinks, masks
  in.q = HostTensor(c.p.dtype, shape_q(c.p));   // (batch, heads_q, n_q, d); varlen (total_q, heads_q, d)
  in.k = HostTensor(c.p.dtype, shape_kv(c.p));  // (batch, heads_kv, n_k, d); varlen, paged: shape_kv
  in.v = HostTensor(c.p.dtype, shape_v(c.p));   // as k, with d_v
  fill(in.q, c.sigma, c.outliers);
  fill(in.k, c.sigma, c.outliers);
  fill(in.v, 1.0, c.outliers, c.positive_v);
  if (c.backward) {
    in.d_o = HostTensor(c.p.dtype, shape_o(c.p));  // as q, with d_v
    fill(in.d_o, 1.0, false);
  }
  finish_layout(c, in);  // unread page slots, padding tokens, strides
  return in;
}

uint64_t inputs_hash(const Inputs& in) {
  uint64_t h = 0xcbf29ce484222325ull;
  // The variants' data too (empty for dense inputs, which hash as q, k, v, d_o alone).
  for (const HostTensor* t :
       {&in.q, &in.k, &in.v, &in.d_o, &in.cu_seqlens_q, &in.cu_seqlens_k, &in.page_table, &in.alibi_slopes, &in.sinks,
        &in.cu_seqlens_q_padded, &in.cu_seqlens_k_padded, &in.mask, &in.block_mask})
    h = fnv1a(t->bytes.data(), t->bytes.size(), h);
  return h;
}

bool baseline_runs(const CaseSpec& c) { return !(c.gpu_only && !is_cut(c) && c.p.n_q > kLongRows); }

double case_cost(const CaseSpec& c) {
  const Problem p = checked_problem(c);
  double pairs = double(p.batch) * p.n_q * double(p.n_k);  // (query, key) pairs per head
  if (p.varlen) {                                          // each sequence its own
    pairs = 0;
    for (size_t b = 0; b < c.len_q.size(); ++b) pairs += double(c.len_q[b]) * c.len_k[b];
  }
  return pairs * p.heads_q * p.d * (c.backward ? 3.5 : 1.0);
}

std::vector<size_t> shard_cases(const std::vector<CaseSpec>& plan, int index, int count) {
  if (count < 1 || index < 0 || index >= count) throw std::invalid_argument("shard index out of range");
  std::vector<size_t> order(plan.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Costliest first (ties by plan order), each to the least loaded shard (ties to the lowest index).
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return case_cost(plan[a]) > case_cost(plan[b]); });
  std::vector<double> load(size_t(count), 0.0);
  std::vector<size_t> mine;
  for (size_t i : order) {
    const size_t s = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    load[s] += case_cost(plan[i]);
    if (int(s) == index) mine.push_back(i);
  }
  std::sort(mine.begin(), mine.end());
  return mine;
}

}  // namespace fc::report
