#include "reports/metrics.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <new>
#include <stdexcept>
#include <utility>
#include <vector>

#include "contract/rounding.h"
#include "contract/tensor.hpp"
#include "reference/parallel.hpp"

namespace fc::report {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Format {
  int p;     // significand bits, the implicit one included
  int emin;  // exponent of the smallest normal
};
Format format_of(DType t) {
  if (!in_dtype_table(t) || !dtype_info(t).is_float) return {53, -1022};  // an index dtype, never a problem's storage
  return {dtype_info(t).precision, dtype_info(t).min_exp};
}

// Elementwise max that keeps NaN whichever side it is on.
double worst(double a, double b) { return (a != a || b != b) ? kNaN : std::max(a, b); }

// 2^e for -1074 <= e <= 1023: built from its bits where it is a normal double.
double pow2(int e) { return e >= -1022 ? std::bit_cast<double>(uint64_t(e + 1023) << 52) : std::ldexp(1.0, e); }

// A type's number line, worked out once: ulp_of and ordinal read a double's exponent and significand
// from its bits (measure calls them twice an element, and ldexp and ilogb cost more than the rest of
// its scan).
struct Grid {
  int p, emin, e_top;  // Format's; ilogb of the largest finite value
  double min_normal;   // 2^emin
  double sub_ulp;      // 2^(emin - p + 1), the subnormal spacing
  double sub_scale;    // 2^(p - 1 - emin), a subnormal's ordinal per unit (0 where no double holds it)
  int64_t ord_inf;     // ordinal of infinity: the largest finite's + 1
};
int exponent_of(double a) { return int((std::bit_cast<uint64_t>(a) >> 52) & 0x7ff) - 1023; }  // a normal, > 0
[[gnu::always_inline]] inline double grid_ulp(const Grid& g, double x) {
  const double a = std::fabs(x);
  if (!(a >= g.min_normal)) return g.sub_ulp;  // subnormal, 0, NaN
  return pow2((a == kInf ? g.e_top : std::min(exponent_of(a), g.e_top)) - g.p + 1);
}
[[gnu::always_inline]] inline int64_t grid_ordinal(const Grid& g, double x) {
  if (std::isinf(x)) return x > 0 ? g.ord_inf : -g.ord_inf;
  const double a = std::fabs(x);
  int64_t ord;
  if (!(a >= g.min_normal)) {  // a multiple of the subnormal spacing: the scaling is exact
    ord = int64_t(g.sub_scale > 0 ? a * g.sub_scale : std::ldexp(a, g.p - 1 - g.emin));
  } else {  // the binade, then the significand's leading p - 1 fraction bits
    const uint64_t frac = std::bit_cast<uint64_t>(a) & ((uint64_t(1) << 52) - 1);
    ord = (int64_t(1) << (g.p - 1)) * (exponent_of(a) - g.emin + 1) + int64_t(frac >> (53 - g.p));
  }
  return x < 0 ? -ord : ord;
}
// round_to(t, ·) with t's parameters looked up once: measure rounds every element's reference.
struct Rounder {
  DType t;
  int p = 0, e_min = 0, e_max = 0;
  explicit Rounder(DType t_) : t(t_) {
    if (t == DType::F16 || t == DType::BF16)
      p = dtype_info(t).precision, e_min = dtype_info(t).min_exp, e_max = dtype_info(t).max_exp;
  }
  double operator()(double x) const {
    switch (t) {
      case DType::F16:
      case DType::BF16: return round_binary(x, p, e_min, e_max);
      case DType::F32: return double(float(x));
      case DType::F64: return x;
      default: return round_to(t, x);
    }
  }
};
Grid grid_of(DType t) {
  const Format f = format_of(t);
  Grid g{f.p, f.emin, std::ilogb(max_finite(t)), pow2(f.emin), pow2(f.emin - f.p + 1), 0.0, 0};
  if (f.p - 1 - f.emin <= 1023) g.sub_scale = pow2(f.p - 1 - f.emin);
  g.ord_inf = grid_ordinal(g, max_finite(t)) + 1;
  return g;
}

}  // namespace

const std::array<double, kRatioBins - 1> kRatioEdges = {1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4,
                                                        5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 1e-1,
                                                        2e-1, 5e-1, 1e0,  2e0,  5e0,  1e1};

int ratio_bin(double ratio) {
  // upper_bound's index (the edges at or below the ratio) from the ratio's binade: the edges are at
  // least a factor 2 apart, so a binade [2^e, 2^(e+1)) holds at most one of them, and the bin is the
  // count below the binade plus one comparison. measure bins every element, and a search's chain of
  // comparisons costs more than the scan's other work.
  struct Binade {
    int below;    // edges < 2^e
    double edge;  // the edge in [2^e, 2^(e+1)), or NaN (never at or below a ratio)
  };
  constexpr int kLow = -21, kHigh = 4;  // the binades of the edges (1e-6 ... 10)
  static const std::array<Binade, kHigh - kLow + 1> binades = [] {
    std::array<Binade, kHigh - kLow + 1> t{};
    size_t placed = 0;
    for (int e = kLow; e <= kHigh; ++e) {
      Binade& b = t[size_t(e - kLow)];
      b.below = 0, b.edge = kNaN;
      for (const double edge : kRatioEdges) {
        b.below += edge < pow2(e);
        if (edge < pow2(e) || edge >= pow2(e + 1)) continue;
        if (b.edge == b.edge) throw std::logic_error("ratio_bin: two edges in one binade");
        b.edge = edge, ++placed;
      }
    }
    if (placed != kRatioEdges.size()) throw std::logic_error("ratio_bin: an edge outside the table's binades");
    return t;
  }();
  if (ratio != ratio) return kRatioBins - 1;              // a NaN ratio counts with the worst
  if (!(ratio >= pow2(kLow))) return 0;                   // below every edge, or negative
  if (!(ratio < pow2(kHigh + 1))) return kRatioBins - 1;  // past every edge, or infinite
  const Binade& b = binades[size_t(exponent_of(ratio) - kLow)];
  return b.below + (b.edge <= ratio);
}

int ulp_bin(int64_t steps) {
  if (steps <= 2) return int(std::max<int64_t>(steps, 0));
  int bin = 3;  // 3-4
  for (int64_t top = 4; steps > top; top *= 2) {
    if (++bin == kUlpBins - 1) return bin;  // > 2^20
  }
  return bin;
}

double ulp_of(DType t, double x) { return grid_ulp(grid_of(t), x); }

int64_t ordinal(DType t, double x) { return x != x ? 0 : grid_ordinal(grid_of(t), x); }

size_t rank(size_t n, double q) { return size_t(std::floor(q * double(n - 1))); }

namespace {
// x[k] of x sorted, NaN last (x reordered).
double kth(std::vector<double>& x, size_t k) {
  std::nth_element(x.begin(), x.begin() + std::ptrdiff_t(k), x.end(),
                   [](double a, double b) { return a < b || (a == a && b != b); });
  return x[k];
}

// A key whose unsigned order is quantile's order of the values: negatives below positives, -0 as +0,
// every NaN last.
uint64_t order_key(double v) {
  if (v != v) return ~uint64_t(0);
  const uint64_t b = std::bit_cast<uint64_t>(v == 0 ? 0.0 : v);
  return b >> 63 ? ~b : b | (uint64_t(1) << 63);
}
// The value of a key (NaN for the last).
double key_value(uint64_t key) {
  if (key == ~uint64_t(0)) return std::numeric_limits<double>::quiet_NaN();
  return std::bit_cast<double>(key >> 63 ? key & ~(uint64_t(1) << 63) : ~key);
}
}  // namespace

double quantile(std::vector<double> x, double q) { return x.empty() ? 0.0 : kth(x, rank(x.size(), q)); }

std::vector<double> quantiles_parallel(const double* x, size_t n, const std::vector<double>& qs) {
  std::vector<double> out(qs.size(), 0.0);
  if (n == 0) return out;
  constexpr int kDigit = 16;  // bits a histogram sorts by
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(ref::worker_threads(), int64_t(n >> 16) + 1));
  // Candidates few enough for one nth_element on one thread: about what a histogram pass costs each
  // thread (a pass reads n / tasks elements a thread), so that neither the last selection nor one
  // more pass dominates. Any threshold gives the same value: the k-th element is unique.
  const size_t direct = std::max(size_t(1) << 16, n / size_t(tasks) / 8);
  const auto part = [&](int64_t t) {
    return std::pair{n * size_t(t) / size_t(tasks), n * size_t(t + 1) / size_t(tasks)};
  };
  // Each quantile's search: its rank among the candidates left, whose keys' leading `decided` bits are
  // `prefix`.
  struct Search {
    size_t k, left;
    uint64_t prefix = 0;
    int decided = 0;
    bool holds(uint64_t key) const { return decided == 0 || key >> (64 - decided) == prefix; }
  };
  std::vector<Search> search;
  for (double q : qs) search.push_back({rank(n, q), n});
  // Histograms of the next digit among a search's candidates; searches that share their candidates
  // share a pass (every search shares the first).
  for (;;) {
    size_t s0 = 0;
    while (s0 < search.size() && (search[s0].left <= direct || search[s0].decided >= 64)) ++s0;
    if (s0 == search.size()) break;
    const Search at = search[s0];
    // Each task's histogram, and the least and greatest key among its candidates: where those agree
    // over every task, the candidates are one value (a tensor of small integers: most of its elements
    // 0 or 1), which decides the search without passes over its remaining digits.
    struct Pass {
      std::vector<size_t> h = std::vector<size_t>(size_t(1) << kDigit, 0);
      uint64_t lo = ~uint64_t(0), hi = 0;
    };
    std::vector<Pass> pass(static_cast<size_t>(tasks));
    ref::parallel_for(tasks, [&](int64_t t) {
      Pass& ps = pass[size_t(t)];
      const auto [a, b] = part(t);
      uint64_t lo = ps.lo, hi = ps.hi;
      for (size_t i = a; i < b; ++i) {
        const uint64_t key = order_key(x[i]);
        if (!at.holds(key)) continue;
        ++ps.h[size_t((key >> (64 - at.decided - kDigit)) & ((uint64_t(1) << kDigit) - 1))];
        lo = std::min(lo, key), hi = std::max(hi, key);
      }
      ps.lo = lo, ps.hi = hi;
    });
    std::vector<size_t> count(size_t(1) << kDigit, 0);
    uint64_t lo = ~uint64_t(0), hi = 0;
    for (const Pass& ps : pass) {
      for (size_t dg = 0; dg < ps.h.size(); ++dg) count[dg] += ps.h[dg];
      lo = std::min(lo, ps.lo), hi = std::max(hi, ps.hi);
    }
    // (The value is the key's, as where the passes run to the last digit: ±0 as +0, NaN as quiet NaN.)
    const bool one_value = lo == hi;
    for (Search& se : search) {
      if (se.decided != at.decided || se.prefix != at.prefix || se.left <= direct) continue;
      if (one_value) {
        se.k = 0, se.left = 1, se.prefix = lo, se.decided = 64;
        continue;
      }
      size_t digit = 0, below = 0;
      while (se.k >= below + count[digit]) below += count[digit++];
      se.k -= below, se.left = count[digit], se.prefix = (se.prefix << kDigit) | digit, se.decided += kDigit;
    }
  }
  // Each search's candidates, gathered in element order (the same vector whatever the thread count);
  // where every bit is decided they are one value, the key's (a tensor of exact results: many zeros).
  const auto gathers = [&](size_t q) { return search[q].decided < 64; };
  std::vector<std::vector<std::vector<double>>> got(size_t(tasks), std::vector<std::vector<double>>(search.size()));
  ref::parallel_for(tasks, [&](int64_t t) {
    const auto [a, b] = part(t);
    for (size_t i = a; i < b; ++i) {
      const uint64_t key = order_key(x[i]);
      for (size_t q = 0; q < search.size(); ++q)
        if (gathers(q) && search[q].holds(key)) got[size_t(t)][q].push_back(x[i]);
    }
  });
  ref::parallel_for(int64_t(search.size()), [&](int64_t q) {  // the searches' last selections side by side
    if (!gathers(size_t(q))) {
      out[size_t(q)] = key_value(search[size_t(q)].prefix);
      return;
    }
    std::vector<double> few;
    few.reserve(search[size_t(q)].left);
    for (const auto& g : got) few.insert(few.end(), g[size_t(q)].begin(), g[size_t(q)].end());
    out[size_t(q)] = kth(few, search[size_t(q)].k);
  });
  return out;
}

// (Named, not anonymous: MeasureScratch, a class of the public header, holds them.)
namespace metrics_detail {

// n doubles, uninitialised, in transparent huge pages where the kernel grants them (madvise): a
// tensor of 10^8 elements fills 2.4 GB of these, and first-touch faults of 4 KB pages cost more than
// the scan itself on a virtual machine.
struct HugeBuffer {
  double* p = nullptr;
  size_t bytes = 0;
  explicit HugeBuffer(size_t n) : bytes(std::max<size_t>(n, 1) * sizeof(double)) {
    void* a = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) throw std::bad_alloc();
    if (bytes >= (size_t(2) << 20)) (void)madvise(a, bytes, MADV_HUGEPAGE);  // a hint, ignored where THP is off
    p = static_cast<double*>(a);
  }
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  ~HugeBuffer() { munmap(p, bytes); }
};

}  // namespace metrics_detail

MeasureScratch::MeasureScratch() = default;
MeasureScratch::~MeasureScratch() = default;

namespace {

// One chunk's share of measure(): kChunk consecutive elements (the last chunk fewer), scanned in
// order. Chunks are cut by element count, never by thread count, and their shares are joined in
// chunk order, so the metrics are the same bits with 1 thread or 16 (and, for a tensor of one
// chunk, those of a serial scan).
constexpr int64_t kChunk = int64_t(1) << 16;

// b's memory for n doubles: b's own where it holds as many, else a new buffer.
double* hold_n(std::unique_ptr<metrics_detail::HugeBuffer>& b, size_t n) {
  if (!b || b->bytes < std::max<size_t>(n, 1) * sizeof(double)) {
    b.reset();  // (the old mapping goes before the new one is made)
    b = std::make_unique<metrics_detail::HugeBuffer>(n);
  }
  return b->p;
}

struct Share {
  TensorMetrics m;  // counts, maxima, histograms, worst element
  double sum_sq = 0, sum_e = 0, sum_ref_sq = 0, sum_ulp = 0, sum_mag = 0, worst_key = -1;
};

// The worst element's rule: the first NaN key, else the first largest key.
bool worse(double key, double than) { return key > than || (key != key && than == than); }

}  // namespace

TensorMetrics measure(const std::vector<double>& got, const std::vector<double>& ref, const std::vector<double>& bound,
                      DType out, Scale scale, MeasureScratch* scratch) {
  TensorMetrics m;
  m.has_bound = !bound.empty();
  if (got.size() != ref.size() || (m.has_bound && bound.size() != ref.size()) ||
      (scale.kind == Scale::Elementwise && (!scale.per_element || scale.per_element->size() != ref.size()))) {
    m.max_abs = kNaN;  // nothing to measure
    return m;
  }
  const int64_t n = int64_t(ref.size()), chunks = (n + kChunk - 1) / kChunk;
  const Grid grid = grid_of(out);
  const Rounder round_out(out);
  const auto range = [&](int64_t c) { return std::pair{c * kChunk, std::min(n, (c + 1) * kChunk)}; };
  const auto both_finite = [&](int64_t x) { return std::isfinite(got[size_t(x)]) && std::isfinite(ref[size_t(x)]); };
  // First pass: the TensorMax scale, and where each chunk's finite elements start in the quantiles'
  // arrays (a prefix sum of their counts).
  std::vector<double> chunk_max(size_t(chunks), 0.0);
  std::vector<int64_t> at(size_t(chunks) + 1, 0);
  ref::parallel_for(chunks, [&](int64_t c) {
    const auto [a, b] = range(c);
    for (int64_t x = a; x < b; ++x) {
      const double r = ref[size_t(x)];
      if (std::isfinite(r)) chunk_max[size_t(c)] = std::max(chunk_max[size_t(c)], std::fabs(r));
      at[size_t(c) + 1] += both_finite(x);
    }
  });
  double ref_max = 0;
  for (int64_t c = 0; c < chunks; ++c)
    ref_max = std::max(ref_max, chunk_max[size_t(c)]), at[size_t(c) + 1] += at[size_t(c)];
  const size_t finite = static_cast<size_t>(at[size_t(chunks)]);
  // Left uninitialised: the scan writes every slot, and its threads touch the pages first (on a
  // tensor of 10^8 elements, zeroing them on this thread alone costs more than the scan); or the
  // scratch's, touched already by an earlier tensor.
  MeasureScratch own;
  MeasureScratch& mem = scratch ? *scratch : own;
  double* const ratios = m.has_bound ? hold_n(mem.ratios, finite) : nullptr;
  double* const ulps = hold_n(mem.ulps, finite);
  double* const steps_all = hold_n(mem.steps, finite);
  std::vector<Share> shares(static_cast<size_t>(chunks));
  ref::parallel_for(chunks, [&](int64_t c) {
    Share sh;  // on this thread's stack: neighbouring chunks' shares would share cache lines
    TensorMetrics& t = sh.m;
    int64_t slot = at[size_t(c)];
    const auto [a, b] = range(c);
    for (int64_t x = a; x < b; ++x) {
      const double y = got[size_t(x)], r = ref[size_t(x)];
      if (!std::isfinite(y) || !std::isfinite(r)) {
        const bool same = (y != y && r != r) || y == r;
        (same ? t.nonfinite_match : t.nonfinite_mismatch)++;
        continue;
      }
      const double e = y - r, ae = std::fabs(e);
      t.count++;
      sh.sum_sq += e * e, sh.sum_e += e, sh.sum_ref_sq += r * r;
      t.max_abs = std::max(t.max_abs, ae);
      double scaled = ae;
      if (scale.kind == Scale::Elementwise) {
        const double s = (*scale.per_element)[size_t(x)];
        scaled = ae == 0 ? 0.0 : (s > 0 ? ae / s : kInf);  // 0/0: exact; x/0: infinitely wrong
      } else if (scale.kind == Scale::TensorMax) {
        scaled = ae == 0 ? 0.0 : (ref_max > 0 ? ae / ref_max : kInf);
      }
      t.max_scaled = worst(t.max_scaled, scaled);
      const double u = grid_ulp(grid, r), ue = ae / u;
      t.ulp_max = std::max(t.ulp_max, ue), sh.sum_ulp += ue, ulps[slot] = ue;
      sh.sum_mag += r > 0 ? e : r < 0 ? -e : 0.0;
      const int64_t steps = std::llabs(grid_ordinal(grid, y) - grid_ordinal(grid, round_out(r)));
      t.excess_max = std::max(t.excess_max, steps), steps_all[slot] = double(steps);
      t.correctly_rounded += steps == 0;
      t.ulp_hist[size_t(ulp_bin(steps))]++;
      double key = scaled;
      if (m.has_bound) {
        const double bd = bound[size_t(x)];
        const double ratio = ae == 0 && bd == bd ? 0.0 : (bd > 0 ? ae / bd : (bd == 0 ? kInf : kNaN));
        ratios[slot] = ratio;
        t.ratio_hist[size_t(ratio_bin(ratio))]++;
        t.ratio_max = worst(t.ratio_max, ratio);
        key = ratio;
      }
      ++slot;
      if (worse(key, sh.worst_key)) {
        sh.worst_key = key, t.worst = x, t.worst_got = y, t.worst_ref = r;
        t.worst_bound = m.has_bound ? bound[size_t(x)] : 0.0;
      }
    }
    shares[size_t(c)] = std::move(sh);
  });
  double sum_sq = 0, sum_e = 0, sum_ref_sq = 0, sum_ulp = 0, sum_mag = 0, worst_key = -1;
  for (const Share& sh : shares) {  // in chunk order
    const TensorMetrics& t = sh.m;
    m.count += t.count, m.nonfinite_match += t.nonfinite_match, m.nonfinite_mismatch += t.nonfinite_mismatch;
    sum_sq += sh.sum_sq, sum_e += sh.sum_e, sum_ref_sq += sh.sum_ref_sq, sum_ulp += sh.sum_ulp, sum_mag += sh.sum_mag;
    m.max_abs = std::max(m.max_abs, t.max_abs), m.max_scaled = worst(m.max_scaled, t.max_scaled);
    m.ulp_max = std::max(m.ulp_max, t.ulp_max), m.excess_max = std::max(m.excess_max, t.excess_max);
    m.correctly_rounded += t.correctly_rounded, m.ratio_max = worst(m.ratio_max, t.ratio_max);
    for (size_t k = 0; k < m.ulp_hist.size(); ++k) m.ulp_hist[k] += t.ulp_hist[k];
    for (size_t k = 0; k < m.ratio_hist.size(); ++k) m.ratio_hist[k] += t.ratio_hist[k];
    if (t.worst >= 0 && worse(sh.worst_key, worst_key)) {
      worst_key = sh.worst_key, m.worst = t.worst, m.worst_got = t.worst_got, m.worst_ref = t.worst_ref;
      m.worst_bound = t.worst_bound;
    }
  }
  if (m.count > 0) {
    const double cnt = double(m.count);
    m.rmse = std::sqrt(sum_sq / cnt), m.bias = sum_e / cnt, m.ulp_mean = sum_ulp / cnt, m.bias_mag = sum_mag / cnt;
    m.bias_rel = m.rmse > 0 ? m.bias_mag / m.rmse : 0.0;
    m.rel_norm = sum_sq == 0 ? 0.0 : (sum_ref_sq > 0 ? std::sqrt(sum_sq / sum_ref_sq) : kInf);
  }
  // The quantiles, each on every thread.
  if (m.count > 0) {
    m.ulp_p99 = quantiles_parallel(ulps, finite, {0.99})[0];
    m.excess_p99 = int64_t(quantiles_parallel(steps_all, finite, {0.99})[0]);
    if (m.has_bound) {
      const std::vector<double> r = quantiles_parallel(ratios, finite, {0.99, 0.90, 0.50});
      m.ratio_p99 = r[0], m.ratio_p90 = r[1], m.ratio_p50 = r[2];
    }
  }
  return m;
}

}  // namespace fc::report
