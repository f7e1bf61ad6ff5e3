// The closed-form chain weights (reference/bounds_chain_closed.hpp) against chain_weights, bit for
// bit: every chain the kernels declare (tensor-core, undeclared, cpu_tiled and cpu_naive arithmetic,
// cuda_naive's row sum, the plain chains), random chains of the family closed_form_covers admits and
// random chains of any shape wherever it admits them, at every length up to 300 and a few long ones,
// with 0 to 3 extra merges. A device port reads these weights from the header alone, so any
// disagreement here is a bound the GPU would compute differently from the CPU.
#include "tests/catch.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "contract/arithmetic.h"
#include "kernels/cpu/cpu_kernels.hpp"
#include "reference/bounds_chain.hpp"
#include "reference/bounds_chain_closed.hpp"

namespace {

using namespace fc;

std::string describe(const Chain& c) {
  std::ostringstream s;
  s << "adder " << int(c.adder) << " acc " << int(c.acc) << " exact " << c.exact_products << " trunc " << c.truncates
    << " block " << c.block << " merge " << int(c.merge) << " old " << c.merge_old << " new " << c.merge_new
    << " lanes " << c.lanes << " width " << c.lane_width << " tree " << c.lane_tree << " pre " << c.pre;
  return s.str();
}

// A chain's fields as a key: the practical arithmetics repeat many chains, each checked once.
using ChainKey = std::tuple<int, int, bool, bool, int32_t, int, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t>;
ChainKey key_of(const Chain& c) {
  return {int(c.adder), int(c.acc),  c.exact_products, c.truncates,  c.block,     int(c.merge),
          c.merge_old,  c.merge_new, c.lanes,          c.lane_width, c.lane_tree, c.pre};
}

// Mismatches, the first few reported with where they are.
struct Mismatches {
  int64_t count = 0;
  void note(const Chain& c, const std::string& what, int64_t n, int64_t extra, int64_t j, double closed, double ref) {
    if (++count > 8) return;
    std::ostringstream s;
    s.precision(17);
    s << what << " differs: " << describe(c) << " n " << n << " extra " << extra << " j " << j << " closed " << closed
      << " chain_weights " << ref;
    FAIL_CHECK(s.str());
  }
};

// The floor chain_weights reports, with and without FTZ (it depends on nothing else).
void compare_floor(const Chain& c, Mismatches& bad) {
  for (bool ftz : {false, true}) {
    const double f = ref::closed_chain(c, ftz).floor, g = ref::chain_weights(c, 1, ftz).floor;
    if (f != g) bad.note(c, ftz ? "floor (ftz)" : "floor", 1, 0, -1, f, g);
  }
}

// The closed form against chain_weights at (n, extra): every j when `every`, else the ends, the
// neighbourhoods of the block boundaries and a random sample.
void compare(const Chain& c, int64_t n, int64_t extra, bool every, std::mt19937_64& rng, Mismatches& bad) {
  const ref::ChainWeights w = ref::chain_weights(c, n, false, extra);
  const ref::ClosedChain k = ref::closed_chain(c, false);
  const double km = ref::closed_kappa_max(k, n, extra), ev = ref::closed_events(k, n, extra),
               me = ref::closed_mult_events(k, n, extra);
  if (km != w.kappa_max) bad.note(c, "kappa_max", n, extra, -1, km, w.kappa_max);
  if (ev != w.events) bad.note(c, "events", n, extra, -1, ev, w.events);
  if (me != w.mult_events) bad.note(c, "mult_events", n, extra, -1, me, w.mult_events);
  auto at = [&](int64_t j) {
    const double kj = ref::closed_kappa(k, n, extra, j);
    if (kj != w.kappa[size_t(j)]) bad.note(c, "kappa", n, extra, j, kj, w.kappa[size_t(j)]);
  };
  if (every) {
    for (int64_t j = 0; j < n; ++j) at(j);
    return;
  }
  for (int64_t j = 0; j < std::min<int64_t>(n, 80); ++j) at(j), at(n - 1 - j);
  if (c.block > 0)
    for (int64_t b = c.block; b < n; b += std::max<int64_t>(c.block, n / 64))
      for (int64_t d = -3; d <= 3; ++d)
        if (b + d >= 0 && b + d < n) at(b + d);
  std::uniform_int_distribution<int64_t> any(0, n - 1);
  for (int i = 0; i < 300; ++i) at(any(rng));
}

void compare_all_lengths(const Chain& c, std::mt19937_64& rng, Mismatches& bad) {
  compare_floor(c, bad);
  for (int64_t extra = 0; extra <= 3; ++extra) {
    for (int64_t n = 1; n <= 300; ++n) compare(c, n, extra, true, rng, bad);
    for (int64_t n : {1000, 4097}) compare(c, n, extra, false, rng, bad);
    if (extra == 0 || extra == 3) compare(c, 65536, extra, false, rng, bad);  // the longest: two of the four
  }
}

// Every chain the kernels declare, once each.
std::map<ChainKey, Chain> practical_chains() {
  std::map<ChainKey, Chain> out;
  auto add = [&](const Arithmetic& a) {
    for (const Chain* c : {&a.s, &a.pv, &a.l, &a.d_o_o, &a.dp, &a.dq, &a.dkv}) out.emplace(key_of(*c), *c);
  };
  for (DType t : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
    add(undeclared_arithmetic(t));
    for (int32_t bn : {0, 16, 32, 64, 128, 256})
      for (int32_t dq : {0, bn}) add(tensor_core_arithmetic(t, 64, bn, dq));
    for (DType accum : {DType::F32, DType::F16, DType::F64}) {
      Problem p;
      p.dtype = t;
      std::vector<Config> configs;
      const int32_t shapes[][2] = {{0, 0}, {1, 1}, {16, 16}, {64, 64}, {128, 64}, {17, 33}};
      for (LoopOrder order : {LoopOrder::FA2, LoopOrder::FA1})
        for (const auto& sh : shapes)
          for (int32_t splits : {0, 2, 3}) {
            Config cfg;
            cfg.block_m = sh[0], cfg.block_n = sh[1], cfg.order = order, cfg.accum = accum, cfg.splits = splits;
            configs.push_back(cfg);
          }
      for (const Config& cfg : configs) add(cpu::tiled_arithmetic(p, cfg));
      Config cfg;
      cfg.accum = accum;
      add(cpu::naive_arithmetic(p, cfg));
    }
    for (bool exact : {false, true}) {
      const Chain c = serial_chain(t, exact);
      out.emplace(key_of(c), c);
    }
  }
  const Chain tc = tensor_core_chain();
  out.emplace(key_of(tc), tc);
  // cuda_naive's row sum (kernels/cuda/naive_traits.hpp): 256 threads, a warp butterfly each.
  Chain l = serial_chain(DType::F32, true);
  l.lanes = 256, l.lane_tree = 32;
  out.emplace(key_of(l), l);
  return out;
}

Chain random_chain(std::mt19937_64& rng, bool covered) {
  auto pick = [&](int lo, int hi) { return int32_t(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  const DType accs[] = {DType::F32, DType::F16, DType::BF16, DType::F64};
  Chain c;
  c.adder = Adder(pick(0, 2)), c.acc = accs[pick(0, 3)];
  c.exact_products = pick(0, 1), c.truncates = pick(0, 1);
  c.merge = Merge(pick(0, 2)), c.merge_old = pick(0, 3), c.merge_new = pick(0, 3);
  c.pre = pick(1, 4);
  if (!covered) {  // any shape at all (pre past kTensorCoreFused too); closed_form_covers sorts them
    c.lanes = pick(0, 12), c.lane_width = pick(0, 20), c.pre = pick(0, 10), c.lane_tree = pick(0, 14);
    c.block = pick(0, 3) == 0 ? 0 : pick(1, 70);
    return c;
  }
  c.lanes = c.adder == Adder::TensorCore ? 1 : pick(1, 32);
  c.lane_width = c.pre * pick(1, 4);
  c.lane_tree = pick(0, 3) == 0 ? 0 : pick(1, c.lanes + 2);
  if (pick(0, 3) == 0) {
    c.block = 0;
  } else if (c.merge == Merge::Rescale) {
    c.block = pick(1, 100);
  } else {
    int32_t unit = c.lanes > 1 ? c.lanes * c.lane_width : c.pre;
    if (c.adder == Adder::TensorCore) unit = std::lcm(unit, kTensorCoreFused);
    c.block = unit * pick(1, std::max(1, 160 / unit));
  }
  return c;
}

TEST_CASE("closed-form chain weights equal chain_weights on every chain the kernels declare", "[cpu]") {
  std::mt19937_64 rng(1);
  Mismatches bad;
  const std::map<ChainKey, Chain> chains = practical_chains();
  for (const auto& [key, c] : chains) {
    INFO(describe(c));
    CHECK(ref::closed_form_covers(c));
    compare_all_lengths(c, rng, bad);
  }
  CHECK(chains.size() > 20);
  CHECK(bad.count == 0);
}

TEST_CASE("closed-form chain weights equal chain_weights on random covered chains", "[cpu]") {
  std::mt19937_64 rng(2);
  Mismatches bad;
  for (int i = 0; i < 120; ++i) {
    const Chain c = random_chain(rng, true);
    INFO(describe(c));
    REQUIRE(ref::closed_form_covers(c));
    compare_floor(c, bad);
    for (int64_t extra = 0; extra <= 3; ++extra) {
      for (int64_t n = 1; n <= 300; ++n) compare(c, n, extra, true, rng, bad);
      compare(c, std::uniform_int_distribution<int64_t>(301, 5000)(rng), extra, false, rng, bad);
    }
    compare(c, 65536, 1, false, rng, bad);
  }
  CHECK(bad.count == 0);
}

TEST_CASE("closed_form_covers admits only chains the closed form gets right", "[cpu]") {
  std::mt19937_64 rng(3);
  Mismatches bad;
  int covered = 0, tried = 0;
  for (; tried < 1500; ++tried) {
    const Chain c = random_chain(rng, false);
    if (!ref::closed_form_covers(c)) continue;
    ++covered;
    const int64_t extra = std::uniform_int_distribution<int64_t>(-1, 3)(rng);
    for (int64_t n = 0; n <= 160; ++n) compare(c, n, extra, true, rng, bad);
  }
  CHECK(covered > 400);
  CHECK(bad.count == 0);
}

TEST_CASE("closed_form_covers excludes the shapes whose places need more than divisions", "[cpu]") {
  // Negative controls: four lanes in blocks of two keys (lane 3 has nothing in the first block, so its
  // block index is not the block's), a lane width pre does not divide, tensor-core lanes, and
  // tensor-core blocks that split a step.
  Chain sparse = serial_chain(DType::F32, true);
  sparse.lanes = 4, sparse.block = 2, sparse.merge = Merge::Serial;
  Chain ragged = serial_chain(DType::F32, true);
  ragged.lanes = 2, ragged.lane_width = 3, ragged.pre = 2;
  Chain tc_lanes = tensor_core_chain();
  tc_lanes.lanes = 4;
  Chain tc_split = tensor_core_chain();
  tc_split.block = 12, tc_split.merge = Merge::AnyOrder;
  for (const Chain* c : {&sparse, &ragged, &tc_lanes, &tc_split}) {
    INFO(describe(*c));
    CHECK_FALSE(ref::closed_form_covers(*c));
  }
  // And the exclusion is needed: the closed form misreads the sparse chain somewhere.
  bool differs = false;
  for (int64_t n = 1; n <= 40 && !differs; ++n) {
    const ref::ChainWeights w = ref::chain_weights(sparse, n, false);
    const ref::ClosedChain k = ref::closed_chain(sparse, false);
    differs = ref::closed_events(k, n, 0) != w.events || ref::closed_kappa_max(k, n, 0) != w.kappa_max;
    for (int64_t j = 0; j < n; ++j) differs = differs || ref::closed_kappa(k, n, 0, j) != w.kappa[size_t(j)];
  }
  CHECK(differs);
}

}  // namespace

// The divisions by a fixed divisor the closed form takes its places with (closed_detail::Divisor):
// every quotient and remainder equal to the plain division's, on the fast path (d < 2^31, a < 2^32)
// and past it; and a multiplier one too small is caught, so these dividends can tell.
TEST_CASE("Divisor's quotients and remainders equal the plain division's", "[cpu]") {
  using ref::closed_detail::Divisor;
  using ref::closed_detail::divisor;
  std::mt19937_64 rng(4);
  int64_t wrong = 0, checked = 0;
  const auto check = [&](const Divisor& v, int64_t a) {
    ++checked;
    if (ref::closed_detail::quot(v, a) != a / v.d || ref::closed_detail::rem(v, a) != a % v.d) {
      if (++wrong <= 8) FAIL_CHECK("d " << v.d << " a " << a << " quot " << ref::closed_detail::quot(v, a));
    }
  };
  // The dividends near the ends of the fast path and near multiples of d.
  const auto edges = [&](const Divisor& v) {
    const int64_t top = (int64_t(1) << 32) - 1;
    for (int64_t a : {int64_t(0), int64_t(1), v.d - 1, v.d, v.d + 1, 2 * v.d - 1, 2 * v.d, (int64_t(1) << 31) - 1,
                      int64_t(1) << 31, top - 1, top, top + 1, int64_t(1) << 40, (int64_t(1) << 62) + 12345})
      if (a >= 0) check(v, a);
    for (int64_t k : {top / v.d, top / v.d - 1, int64_t(1) << 20})
      for (int64_t e = -1; e <= 1; ++e)
        if (k * v.d + e >= 0) check(v, k * v.d + e);
  };
  std::uniform_int_distribution<int64_t> a32(0, (int64_t(1) << 32) - 1);
  for (int64_t d = 1; d <= 4096; ++d) {
    const Divisor v = divisor(d);
    REQUIRE(v.fast);
    edges(v);
    for (int64_t a = 0; a < 3 * d + 70; ++a) check(v, a);
    for (int i = 0; i < 64; ++i) check(v, a32(rng));
  }
  std::uniform_int_distribution<int64_t> big_d(4097, (int64_t(1) << 31) - 1);
  for (int i = 0; i < 20000; ++i) {
    const Divisor v = divisor(i < 60 ? (int64_t(1) << (1 + i / 2)) + (i % 2 ? 1 : -1) : big_d(rng));  // 2^k -+ 1 first
    edges(v);
    for (int t = 0; t < 16; ++t) check(v, a32(rng));
  }
  for (int64_t d : {int64_t(1) << 31, (int64_t(1) << 31) + 7, int64_t(1) << 40}) {  // past the fast path
    const Divisor v = divisor(d);
    CHECK_FALSE(v.fast);
    edges(v);
  }
  CHECK(wrong == 0);
  CHECK(checked > 1000000);
  // A multiplier one short of Granlund and Montgomery's: some quotient comes out one low.
  Divisor off = divisor(7);
  --off.magic;
  bool caught = false;
  for (int64_t a = 0; a < (int64_t(1) << 32) && !caught; a += 997) caught = ref::closed_detail::quot(off, a) != a / 7;
  CHECK(caught);
}
