#include "properties/generators.hpp"

#include "properties/constants.hpp"
#include "properties/long_rows.hpp"
#include "reference/bounds.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace fc::props {
namespace {

// Work cap per case (b * h_q * n_q * n_k * d): keeps >= 100 cases per law per kernel in budget.
constexpr double kMaxWork = 1.5e6;
// fp32's limit: a quarter of FLT_MAX (the Huge regime samples |s| up to a quarter of the ceiling and
// clamps q, k so every partial sum of q.k and of scale.q.k stays finite in fp32); see max_score_for.
constexpr double kScoreCeiling = double(std::numeric_limits<float>::max()) / 4;

struct Draw {
  std::mt19937_64 rng;
  int plain;
  double normal() { return std::normal_distribution<double>(0, 1)(rng); }
  double uniform(double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); }
  int64_t below(int64_t n) { return int64_t(rng() % uint64_t(n)); }
  // The plainest values first: small integers, then a coarse grid, then N(0,1).
  double base() {
    if (plain == 0) return double(below(5) - 2);        // {-2..2}
    if (plain == 1) return double(below(63) - 31) / 8;  // k/8, |k| <= 31: exact in bf16
    return normal();
  }
};

void fill(HostTensor& t, Draw& r, double (*f)(Draw&)) {
  for (int64_t i = 0, n = t.numel(); i < n; ++i) t.set(i, f(r));
}

// An element of a list, uniformly at every size, shrinking toward the first. RapidCheck's elementOf
// and oneOf never shrink their choice, and its inRange favours small values at small sizes (a
// regime late in the list would starve the coverage check), hence this generator.
rc::Gen<size_t> uniform_index(size_t n) {
  return rc::Gen<size_t>([n](const rc::Random& random, int) {
    const size_t i = size_t(rc::Random(random).next() % n);
    return rc::shrinkable::shrinkRecur(i, [](size_t x) { return rc::shrink::towards<size_t>(x, 0); });
  });
}

// A length uniform in [lo, hi] at every size, shrinking toward `floor` (below lo): the GPU-sized
// rows are drawn as often as uniform_index draws them, and a failure first met there shrinks past
// the branch's shortest row to the short rows a fault may need (RapidCheck shrinks one pick at a
// time, and leaving the branch would take the ordinary lengths, shrunk long before, with it).
rc::Gen<int32_t> uniform_length(int32_t lo, int32_t hi, int32_t floor) {
  return rc::Gen<int32_t>([=](const rc::Random& random, int) {
    const int32_t x = lo + int32_t(rc::Random(random).next() % uint64_t(hi - lo + 1));
    return rc::shrinkable::shrinkRecur(x, [floor](int32_t v) { return rc::shrink::towards<int32_t>(v, floor); });
  });
}

// Log-uniform in [lo, hi] (lo >= 1), shrinking toward floor like uniform_length: a failure first met
// on a long row shrinks below lo, to the shortest row that still shows it.
rc::Gen<int32_t> log_uniform_length(int32_t lo, int32_t hi, int32_t floor) {
  return rc::Gen<int32_t>([=](const rc::Random& random, int) {
    const double u = double(rc::Random(random).next() >> 11) * 0x1p-53;  // [0, 1)
    const double x = std::exp(std::log(double(lo)) + u * (std::log(double(hi)) - std::log(double(lo))));
    const int32_t n = std::clamp(int32_t(std::lround(x)), lo, hi);
    return rc::shrinkable::shrinkRecur(n, [floor](int32_t v) { return rc::shrink::towards<int32_t>(v, floor); });
  });
}

template <class T>
T pick(const std::vector<T>& options) {
  return options[*uniform_index(options.size())];
}

// n mapped into the axis' declared set: the admitted length nearest above it, or the largest admitted
// length at most `cap` when that one exceeds cap (none: the smallest admitted).
int32_t fit_length(const Lengths& l, int32_t n, int32_t cap) {
  if (l.any()) return n;
  const int32_t up = l.snap(n);
  if (up <= cap) return up;
  const int32_t down = l.below(cap);
  return down > 0 ? down : l.snap(1);
}


}  // namespace

double max_score_for(DType storage, bool s_in_storage) {
  // fp64 storage still saves lse in fp32 (the contract): past ~2^24 x 88 the backward's
  // exp(s - lse) overflows whatever the kernel does, so its huge scores stop at 1e8.
  if (storage == DType::F64) return 1e8;
  // Other storage: up to fp32's limits. The certified oracle recomputes rows with huge scores in
  // MPFR and meets its 1e-13 targets up to ~3e38 (reference/tests/certified_huge_test); a baseline
  // that stores S in its storage type stops at a quarter of that type's largest value.
  return s_in_storage ? std::min(kScoreCeiling, max_finite(storage) / 4) : kScoreCeiling;
}

namespace {

// FA3's outliers: N(0,1) + N(0,100) Bernoulli(0.001) on q, k, v, one outlier forced.
void add_outliers(Case& c, Draw& r) {
  for (HostTensor* t : {&c.in.q, &c.in.k, &c.in.v})
    for (int64_t i = 0, end = t->numel(); i < end; ++i)
      if (r.below(1000) == 0) t->set(i, t->get(i) + 10 * r.normal());
  HostTensor* t = r.below(2) ? &c.in.q : &c.in.k;
  const int64_t at = r.below(t->numel());
  t->set(at, t->get(at) + 10 * r.normal());
}

// Huge scores: |s| up to max_score, every partial sum of q.k finite in fp32.
void fill_huge(Case& c, Draw& r, double max_score) {
  const Problem& p = c.in.p;
  const double lim = std::min(max_finite(dtype_q(p)), max_finite(dtype_kv(p))), scale = std::fabs(p.scale), d = p.d;
  const double hi = std::log10(max_score / 4), lo = std::min(3.5, hi - 0.1);  // 4: sampling spread
  const double target = std::pow(10.0, r.uniform(lo, hi));
  double alpha = std::sqrt(target / (scale * d));  // q, k ~ N(0, alpha^2) -> |s| ~ target
  alpha = std::min(alpha, lim / 8);                // keep 4-sigma values below the dtype's max
  // |q_l|, |k_l| <= cap: sum_l |q_l k_l| max(1, scale) <= FLT_MAX / 2, so every partial sum of
  // q.k (and of scale.q.k), in any order, is finite in fp32.
  const double cap =
      std::min(lim / 2, std::sqrt(double(std::numeric_limits<float>::max()) / (2 * d * std::max(1.0, scale))));
  for (HostTensor* t : {&c.in.q, &c.in.k})
    for (int64_t i = 0, end = t->numel(); i < end; ++i) t->set(i, std::clamp(alpha * r.normal(), -cap, cap));
}

// Ties and AllEqual: keys copied from a pool of `pool` rows (each row may take an earlier one).
void copy_keys(Case& c, Draw& r, int64_t pool) {
  const Problem& p = c.in.p;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_kv; ++h)
      for (int64_t j = 0; j < p.n_k; ++j) {
        const int64_t src = offset_kv(p, b, h, (pool == 1 || j == 0) ? 0 : std::min<int64_t>(r.below(pool), j));
        for (int64_t x = 0; x < p.d; ++x) c.in.k.set(offset_kv(p, b, h, j) + x, c.in.k.get(src + x));
      }
}

// SubnormalP: s_ij = gap_j, so that exp(gap) lands in P's subnormal range.
void fill_subnormal_p(Case& c, Draw& r) {
  const Problem& p = c.in.p;
  double lo = -103, hi = -87.4;                      // fp32 / bf16 subnormals: 2^-149 .. 2^-126
  if (p.dtype == DType::F16) lo = -16.6, hi = -9.8;  // fp16: 2^-24 .. 2^-14
  if (p.dtype == DType::F64) lo = -744, hi = -708.5;
  for (int64_t i = 0, end = c.in.q.numel(); i < end; ++i) c.in.q.set(i, i % p.d == 0 ? 1.0 : r.base());
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_kv; ++h)
      for (int64_t j = 0; j < p.n_k; ++j)
        for (int64_t x = 0; x < p.d; ++x)
          c.in.k.set(offset_kv(p, b, h, j) + x, x ? 0.0 : (j == 0 ? 0.0 : r.uniform(lo, hi)) / p.scale);
}

}  // namespace

void fill_values(Case& c, int plain, uint64_t seed, bool backward, double max_score) {
  Problem& p = c.in.p;
  Draw r{std::mt19937_64(seed), plain};
  c.in.q = HostTensor(dtype_q(p), shape_q(p));
  c.in.k = HostTensor(dtype_kv(p), shape_kv(p));
  c.in.v = HostTensor(dtype_kv(p), shape_kv(p));
  c.in.d_o = backward ? HostTensor(dtype_o(p), shape_q(p)) : HostTensor();
  auto base = [](Draw& d) { return d.base(); };
  fill(c.in.q, r, base), fill(c.in.k, r, base), fill(c.in.v, r, base);
  if (backward) fill(c.in.d_o, r, base);
  const double lim = max_finite(dtype_kv(p)), scale = std::fabs(p.scale), d = p.d;  // lim: v's (Fp16Max)
  switch (c.regime) {
    case Regime::Normal:
    case Regime::Poison:
    case Regime::FullyMasked: break;
    case Regime::LongRow:  // the shape is long_row_case's; here only the values
      fill_long_row(c, LongPattern(seed % uint64_t(LongPattern::kCount)), seed, backward);
      break;
    case Regime::Grid: {  // k/8 with |k| <= 31 whatever `plain` says: transforms stay exact
      auto grid = [](Draw& dr) { return double(dr.below(63) - 31) / 8; };
      fill(c.in.q, r, grid), fill(c.in.k, r, grid), fill(c.in.v, r, grid);
      if (backward) fill(c.in.d_o, r, grid);
      break;
    }
    case Regime::Outliers: add_outliers(c, r); break;
    case Regime::Huge: fill_huge(c, r, max_score); break;
    case Regime::FarBelow: {  // q ~ c + N, k ~ -c + N: s ~ -scale d c^2 in [-1e6, -1e4]
      const double hi = std::min(6.0, std::log10(max_score));
      const double c0 = std::sqrt(std::pow(10.0, r.uniform(std::min(4.05, hi), hi)) / (scale * d));
      for (int64_t i = 0, end = c.in.q.numel(); i < end; ++i) c.in.q.set(i, c0 + r.base() / 4);
      for (int64_t i = 0, end = c.in.k.numel(); i < end; ++i) c.in.k.set(i, -c0 + r.base() / 4);
      break;
    }
    case Regime::Fp16Max:  // v at the edge of fp16's range, q and k plain, d_o . v within range
      for (int64_t i = 0, end = c.in.v.numel(); i < end; ++i)
        c.in.v.set(i, (r.below(2) ? 1 : -1) * std::min(lim, 65504.0) * r.uniform(0.9, 1.0));
      if (backward)
        for (int64_t i = 0, end = c.in.d_o.numel(); i < end; ++i) c.in.d_o.set(i, c.in.d_o.get(i) / (32.0 * p.d));
      break;
    case Regime::Ties: copy_keys(c, r, 2); break;
    case Regime::AllEqual: copy_keys(c, r, 1); break;
    case Regime::SubnormalP: fill_subnormal_p(c, r); break;
    case Regime::Subnormal: {  // q k v d_o below the smallest normal: scores ~ 0, o subnormal
      // The largest subnormal: tiny * u never rounds up to the smallest normal, which would take the
      // case out of its regime (a GPU-sized case of 10^4 values nearly always has some |u| that close to 1).
      // Each tensor in its own dtype's subnormal range.
      for (HostTensor* t : {&c.in.q, &c.in.k, &c.in.v, &c.in.d_o}) {
        const double tiny = ref::min_normal(t->dtype) * (1 - 2 * ref::unit_roundoff(t->dtype));
        for (int64_t i = 0, end = t->numel(); !t->shape.empty() && i < end; ++i) t->set(i, tiny * r.uniform(-1, 1));
      }
      break;
    }
    case Regime::Ones:  // V = 1 exactly in every dtype: o = 1 where a row sees a key
      for (int64_t i = 0, end = c.in.v.numel(); i < end; ++i) c.in.v.set(i, 1.0);
      break;
    case Regime::kCount: break;
  }
}

namespace {

// The dtypes of a case: one of spec.dtypes for every tensor, or one of spec.mixed_dtypes (uniformly
// over both lists; shrinking moves toward the first single dtype).
DtypeSet pick_dtypes(const GenSpec& spec) {
  const size_t at = size_t(*uniform_index(spec.dtypes.size() + spec.mixed_dtypes.size()));  // pick's draw
  if (at < spec.dtypes.size()) return {spec.dtypes[at], spec.dtypes[at], spec.dtypes[at]};
  return spec.mixed_dtypes[at - spec.dtypes.size()];
}

// A long row (long_rows.hpp): few queries and small heads (the kernel's own head dims where it
// has them), n_k log-uniform up to spec.long_n, one of the adversarial patterns.
Case long_row_case(Case c, const GenSpec& spec) {
  Problem& p = c.in.p;
  p.mask = pick(spec.masks);
  p.batch = 1;
  p.heads_kv = *rc::gen::inRange(1, 3);
  p.heads_q = p.heads_kv * (spec.gqa ? *rc::gen::inRange(1, 3) : 1);
  p.d = spec.head_dims.empty() ? std::max(*rc::gen::inRange(1, 9), spec.min_d) : pick(spec.head_dims);
  p.n_q = std::max(*rc::gen::inRange(1, 5), spec.min_n);
  const double lo = std::log(256.0), hi = std::log(double(std::max(spec.long_n, 257)));
  const double f = double(*rc::gen::inRange(0, 1001)) / 1000;
  p.n_k = std::max(int32_t(std::exp(lo + f * (hi - lo))), spec.min_n);
  p.n_q = fit_length(spec.n_q, p.n_q, p.n_q), p.n_k = fit_length(spec.n_k, p.n_k, p.n_k);
  if (spec.max_heads > 0 && p.heads_q > spec.max_heads) p.heads_q = p.heads_kv = 1;
  p.scale = spec.fixed_scale > 0 ? spec.fixed_scale : default_scale(p.d);
  if (spec.any_tile) {
    c.cfg.block_m = *rc::gen::inRange(1, 65);
    c.cfg.block_n = pick(std::vector<int32_t>{64, 1, 16, 17, 128});
    c.cfg.order = pick(std::vector<LoopOrder>{LoopOrder::FA2, LoopOrder::FA1});
  } else {
    c.cfg = pick(spec.configs);
  }
  c.cfg2 = c.cfg;
  const uint64_t seed = *rc::gen::noShrink(rc::gen::arbitrary<uint64_t>());
  c.aux = *rc::gen::noShrink(rc::gen::arbitrary<uint64_t>());
  fill_values(c, 2, seed, spec.backward, 0);
  return c;
}

// A length on an axis of declared multiples: a count of them, uniform in [0, units], mapped into the
// set (shrinks toward the smallest admitted length).
int32_t draw_declared(const Lengths& l, int32_t units) {
  const int32_t m = std::max(l.multiple, 1);
  return l.snap(int64_t(l.residue) + int64_t(m) * *rc::gen::inRange(0, units + 1));
}

constexpr int32_t kPathDims[] = {40, 72, 96, 104, 136, 192, 256};

// One of the shapes that reach an outside kernel's other paths (GenSpec::path_percent).
void path_shape(Problem& p, const GenSpec& spec, int32_t bn) {
  const auto path = ShapePath(1 + *uniform_index(5));
  switch (path) {
    case ShapePath::Decode:  // a few query rows against a long key row, several sequences
      p.batch = 2 + int32_t(*uniform_index(2));
      p.heads_kv = 1, p.heads_q = spec.gqa ? 1 + int32_t(*uniform_index(4)) : 1;
      p.n_q = 1 + int32_t(*uniform_index(8));
      p.n_k = *uniform_length(8 * bn, 16 * bn, 1);
      p.d = std::min(p.d, 64);
      break;
    case ShapePath::MultiTile:  // rows of 3 to 4 key tiles, 1 to 2 query tiles
      p.batch = 1, p.heads_q = p.heads_kv = 1;
      p.n_q = *uniform_length(bn, 2 * bn, 1);
      p.n_k = *uniform_length(3 * bn, 4 * bn, 1);
      if (*uniform_index(3) == 2) p.n_q = p.n_k;
      p.d = std::min(p.d, 64);
      break;
    case ShapePath::Residue:  // 128 k + r for every r: tails of every length at tiles up to 128
      p.batch = 1, p.heads_q = p.heads_kv = 1;
      p.n_k = 128 * (1 + int32_t(*uniform_index(2))) + int32_t(*uniform_index(128));
      p.n_q = *uniform_index(2) ? p.n_k : 1 + int32_t(*uniform_index(128));
      p.d = std::min(p.d, 32);
      break;
    case ShapePath::WideGroup:  // GQA groups of 8 and 16 query heads per kv head
      if (spec.gqa) p.heads_kv = 1 + int32_t(*uniform_index(2)), p.heads_q = p.heads_kv * (*uniform_index(2) ? 16 : 8);
      p.batch = 1;
      p.n_q = 1 + int32_t(*uniform_index(32)), p.n_k = 1 + int32_t(*uniform_index(96));
      p.d = std::min(p.d, 32);
      break;
    default:  // the head dims FlashAttention kernels specialise beyond the powers of two
      if (spec.head_dims.empty()) p.d = kPathDims[*uniform_index(std::size(kPathDims))];
      p.batch = 1, p.heads_q = p.heads_kv = 1;
      p.n_q = 1 + int32_t(*uniform_index(80)), p.n_k = 1 + int32_t(*uniform_index(160));
      break;
  }
}

}  // namespace

const char* shape_path_name(ShapePath s) {
  switch (s) {
    case ShapePath::Plain: return "plain";
    case ShapePath::Decode: return "decode";
    case ShapePath::MultiTile: return "multi_tile";
    case ShapePath::Residue: return "residue";
    case ShapePath::WideGroup: return "wide_group";
    case ShapePath::HeadDim: return "head_dim";
    case ShapePath::Long: return "long";
    case ShapePath::kCount: break;
  }
  return "?";
}

uint32_t shape_paths(const Problem& p, int32_t block_n) {
  const int64_t bn = block_n > 0 ? block_n : 64;
  uint32_t out = 0;
  auto set = [&out](ShapePath s) { out |= 1u << int(s); };
  if (p.n_q <= 8 && p.n_k >= 8 * p.n_q && p.n_k >= 64 && p.batch >= 2) set(ShapePath::Decode);
  if (p.n_k >= 3 * bn) set(ShapePath::MultiTile);
  if (p.n_k > 128 && p.n_k % 128 != 0) set(ShapePath::Residue);
  if (p.heads_kv > 0 && p.heads_q / p.heads_kv >= 8) set(ShapePath::WideGroup);
  if (std::find(std::begin(kPathDims), std::end(kPathDims), p.d) != std::end(kPathDims)) set(ShapePath::HeadDim);
  if (p.n_k >= kLongMin) set(ShapePath::Long);
  if (out == 0) set(ShapePath::Plain);
  return out;
}

rc::Gen<Case> gen_case(const GenSpec& spec) {
  return rc::gen::exec([spec] {
    Case c;
    c.regime = pick(spec.regimes);
    Problem& p = c.in.p;
    const int size = *rc::gen::withSize([](int s) { return rc::gen::just(s); });
    const int32_t n_max = 1 + (spec.max_n - 1) * std::min(size, 100) / 100;
    if (c.regime == Regime::Fp16Max)
      p.dtype = DType::F16;
    else
      set_dtypes(p, pick_dtypes(spec));
    if (c.regime == Regime::LongRow) return long_row_case(c, spec);
    p.mask = c.regime == Regime::FullyMasked ? Mask::CausalBottomRight : pick(spec.masks);
    p.batch = *rc::gen::inRange(1, 3);
    p.heads_kv = *rc::gen::inRange(1, 3);
    p.heads_q = p.heads_kv * (spec.gqa ? *rc::gen::inRange(1, 4) : 1);
    if (!spec.head_dims.empty())
      p.d = pick(spec.head_dims);
    else if (*rc::gen::inRange(0, 4) < 3)
      p.d = *rc::gen::inRange(1, 2 + std::min(size, 40));
    else
      p.d = pick(std::vector<int32_t>{8, 16, 31, 64, 96, 128, 256});
    p.d = std::max(p.d, spec.min_d);
    auto tile = [&] {
      if (!spec.any_tile) return pick(spec.configs);
      Config t;
      t.block_m = *rc::gen::inRange(1, 18);
      t.block_n = *rc::gen::inRange(1, 18);
      t.order = pick(std::vector<LoopOrder>{LoopOrder::FA2, LoopOrder::FA1});
      return t;
    };
    c.cfg = tile();
    c.cfg2 = tile();
    const int32_t bn = std::max(1, c.cfg.block_n > 0 ? c.cfg.block_n : 64);
    // Tile edges (kBlockN - 1, kBlockN, kBlockN + 1) and multi-tile lengths, or any length.
    if (*rc::gen::inRange(0, 3) < 2)
      p.n_k = *rc::gen::inRange(1, n_max + 1);
    else
      p.n_k = std::max(1, pick(std::vector<int32_t>{bn - 1, bn, bn + 1, 2 * bn + 1, 3 * bn - 1}));
    // Square a third of the time at every size (rc::gen::inRange's range grows with the size, so a
    // choice drawn with it would not be square before size 75): causal self-attention's shape, and
    // the only causal one some kernels take (SDPA's FlashAttention-2 backend declines the others).
    p.n_q = *uniform_index(3) < 2 ? *rc::gen::inRange(1, n_max + 1) : p.n_k;
    if (c.regime == Regime::FullyMasked) p.n_q = p.n_k + *rc::gen::inRange(1, 1 + std::max(1, n_max / 2));
    // Keep the case's work in budget: large d and many heads get shorter sequences.
    const double per = double(p.batch) * p.heads_q * p.d;
    const int32_t n_cap = std::max<int32_t>(2, int32_t(std::sqrt(kMaxWork / per)));
    p.n_k = std::min(p.n_k, n_cap), p.n_q = std::min(p.n_q, n_cap + (c.regime == Regime::FullyMasked));
    if (c.regime == Regime::FullyMasked) p.n_q = std::max(p.n_q, p.n_k + 1);
    if (spec.large_percent > 0 && c.regime != Regime::FullyMasked &&
        *uniform_index(100) >= size_t(100 - spec.large_percent)) {  // shrinks toward the ordinary shape
      // Uniform at every size (inRange would favour the shortest rows at small sizes); the lengths
      // shrink to one key and one query (uniform_length), the branch choice to the ordinary shape.
      // n_q is drawn first, so shrinks first: a fault that needs n_k keys (whatever n_q) spends one
      // faulting candidate on n_q, the rest of a fault budget on n_k (RunOptions::shrink_faults).
      const int32_t bm = std::max(1, c.cfg.block_m > 0 ? c.cfg.block_m : 64);
      p.batch = p.heads_kv = 1;
      p.heads_q = spec.gqa ? *rc::gen::inRange(1, 3) : 1;
      p.n_q = *uniform_length(2 * bm, 3 * bm, 1);
      p.n_k = *uniform_length(3 * bn, 6 * bn, 1);
      // A third square: causal self-attention's diagonal tiles, over >= 3 key and >= 2 query tiles.
      if (*uniform_index(3) == 2) p.n_q = p.n_k = std::max(p.n_q, p.n_k);
    }
    bool long_row = false;
    if (spec.long_percent > 0 && c.regime != Regime::FullyMasked &&
        *uniform_index(100) >= size_t(100 - spec.long_percent)) {  // shrinks toward the ordinary shape
      long_row = true;
      // Uniform in log n_k at every size, shrinking toward one key (below kLongMin: the ordinary shape
      // drawn before may not show the failure, so the branch's own length must reach the shortest row).
      p.batch = 1 + int32_t(*uniform_index(2));
      p.heads_kv = 1, p.heads_q = spec.gqa ? 1 + int32_t(*uniform_index(4)) : 1;
      p.n_q = 1 + int32_t(*uniform_index(8));
      p.n_k = *log_uniform_length(kLongMin, std::max(spec.long_max, kLongMin), 1);
    }
    // From size 50 on (the later half of a run): a fault the small shapes already meet is found there
    // first and shrinks within them (a path shape's shrink back to an ordinary one costs a faulting
    // candidate per step).
    if (spec.path_percent > 0 && size >= 50 && c.regime != Regime::FullyMasked && !long_row &&
        *uniform_index(100) >= size_t(100 - spec.path_percent)) {  // shrinks toward the ordinary shape
      const int32_t d0 = p.d;
      path_shape(p, spec, bn);
      if (!spec.head_dims.empty()) p.d = d0;  // the kernel's own head dims only
      p.d = std::max(p.d, spec.min_d);
    }
    // Inside the declared shapes: lengths drawn as counts of the declared multiple, or mapped into the
    // set; batch and heads within their bounds (GQA groups kept whole).
    if (!spec.n_q.any() || !spec.n_k.any()) {
      const double per = double(p.batch) * p.heads_q * p.d;
      const int32_t cap = std::max<int32_t>(2, int32_t(std::sqrt(kMaxWork / per)));
      const int32_t units = std::max(2, 4 * std::max(spec.max_n, bn) / std::max(spec.n_k.multiple, 1) / 3);
      if (spec.n_k.multiple > 1 && !long_row && *uniform_index(2)) p.n_k = draw_declared(spec.n_k, units);
      if (spec.n_q.multiple > 1 && !long_row && *uniform_index(2)) p.n_q = draw_declared(spec.n_q, units);
      p.n_k = fit_length(spec.n_k, std::max(p.n_k, spec.min_n), std::max(cap, p.n_k));
      p.n_q = fit_length(spec.n_q, std::max(p.n_q, spec.min_n), std::max(cap, p.n_q));
      if (c.regime == Regime::FullyMasked && p.n_q <= p.n_k) p.n_q = spec.n_q.snap(p.n_k + 1);
    }
    if (spec.max_heads > 0 && p.heads_q > spec.max_heads) {
      const int32_t group = p.heads_q / p.heads_kv;
      p.heads_kv = std::max(1, spec.max_heads / group);
      p.heads_q = p.heads_kv * std::min(group, spec.max_heads);
      if (p.heads_q > spec.max_heads) p.heads_q = p.heads_kv = 1;
    }
    if (spec.max_batch > 0) p.batch = std::min(p.batch, spec.max_batch);
    p.n_q = std::max(p.n_q, spec.min_n), p.n_k = std::max(p.n_k, spec.min_n);
    const double dflt = default_scale(p.d);
    if (spec.pow2_scale)  // 1 first, then 2^-1 .. 2^-4 (1/sqrt(d) rounded to a power of two) and 2
      p.scale = pick(std::vector<double>{1.0, 0.5, 0.25, 0.125, 0.0625, 2.0});
    else
      switch (*rc::gen::inRange(0, 4)) {  // the default first, then 1, power-of-two multiples, a grid
        case 0: p.scale = dflt; break;
        case 1: p.scale = 1.0; break;
        case 2: p.scale = dflt * pick(std::vector<double>{0.5, 2.0, 0.25, 4.0}); break;
        default: p.scale = *rc::gen::inRange(3, 128) / 64.0;
      }
    if (spec.fixed_scale > 0) p.scale = spec.fixed_scale;
    const int plain = *rc::gen::inRange(0, 3);
    const uint64_t seed = *rc::gen::noShrink(rc::gen::arbitrary<uint64_t>());
    c.aux = *rc::gen::noShrink(rc::gen::arbitrary<uint64_t>());
    fill_values(c, plain, seed, spec.backward, max_score_for(p.dtype, spec.s_in_storage));
    if (c.regime == Regime::Poison) {
      c.poison_tensor = *rc::gen::inRange(0, 3);
      const int64_t n = c.poison_tensor == 0 ? numel_q(p) : numel_kv(p);
      c.poison_index = *rc::gen::inRange<int64_t>(0, n);
      c.poison_value = pick(std::vector<double>{std::numeric_limits<double>::quiet_NaN(), kInf, -kInf});
    }
    return c;
  });
}

}  // namespace fc::props
