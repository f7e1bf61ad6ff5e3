// The chain weights of bounds_chain.hpp (chain_weights) in closed form: kappa_j, kappa_max, events and
// mult_events of one chain at one length, each from a few integer divisions instead of the per-lane
// vectors chain_weights builds, so device code can ask for any one of them in O(1) (kappa_j) or
// O(lanes) (the rest) and get the same double, bit for bit.
//
// Why it is exact: every weight is u times a count of roundings r_j, a small integer (a multiple of
// 1/2 at worst, for a tensor-core step's alignment share of kTensorCoreFused / 2), so the sums that
// build it are exact in any order and u r_j (u a power of two) is the same double however it is
// reached, FMA contraction included. What the closed form
// must get right is only the count, which depends on the term's place in its lane, item, block and
// tensor-core step; closed_form_covers says for which chain structures those places follow from
// divisions alone (the rest: see there).
//
// The lane layout (contract/arithmetic.h, Chain): lane l holds the chunks [(l + k L) W, + W) of the
// positions [0, n); an item is an aligned run of `pre` positions (pre divides the lane width, so no
// item crosses a chunk); a block holds the items whose first position lies in it. With one lane the
// chunks are contiguous and the width plays no part, so it is taken as `pre` (one item per chunk).
#pragma once

#include <cstdint>

#include "contract/arithmetic.h"
#include "contract/attention.h"
#include "reference/bounds.hpp"

namespace fc::ref {

// POD copy of a Chain (device-copyable) with its unit roundoff u = unit_roundoff(acc) and the underflow
// floor chain_weights reports (the smallest normal under FTZ). adder and merge hold Adder and Merge.
struct ClosedChain {
  int32_t adder, merge;
  bool exact_products, truncates;
  int32_t block, merge_old, merge_new, lanes, lane_width, lane_tree, pre;
  double u, floor;
};

namespace closed_detail {

// A tensor-core step's charges (bounds_chain.cpp derives them): its own step, and each later one.
constexpr double kTcOwn = 2 + kTensorCoreFused + 1;
constexpr double kTcLater = 2 + kTensorCoreFused / 2.0;

FC_HD inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
FC_HD inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// a / b and a % b for a divisor used once (a Divisor, below, for one used over many terms). On the
// device a 64-bit division is a long emulated sequence: where a and b both lie in [0, 2^31) (every
// count here does, short of absurd chain parameters) a 32-bit division gives the same quotient in a
// fraction of the time.
FC_HD inline int64_t div64(int64_t a, int64_t b) {
#ifdef __CUDA_ARCH__
  if (((uint64_t(a) | uint64_t(b)) >> 31) == 0) return int64_t(uint32_t(a) / uint32_t(b));
#endif
  return a / b;
}
FC_HD inline int64_t mod64(int64_t a, int64_t b) {
#ifdef __CUDA_ARCH__
  if (((uint64_t(a) | uint64_t(b)) >> 31) == 0) return int64_t(uint32_t(a) % uint32_t(b));
#endif
  return a % b;
}

// a / d and a % d for a divisor fixed over many dividends (a >= 0, d >= 1): where d < 2^31 and a <
// 2^32, a multiply-high and two shifts (Granlund and Montgomery, "Division by invariant integers using
// multiplication", PLDI 1994, section 4: m = floor(2^32 (2^l - d) / d) + 1 with l = ceil(log2 d) gives
// the exact quotient of every 32-bit a); else the plain division. The chain weights divide positions
// by a handful of divisors that a row's chain fixes, a dozen times per term: on the device a division
// is a long sequence, this is three instructions.
struct Divisor {
  int64_t d;
  uint32_t magic;
  int32_t sh1, sh2;
  bool fast;  // d < 2^31: magic, sh1 and sh2 hold
};
FC_HD inline Divisor divisor(int64_t d) {
  Divisor v{d, 0, 0, 0, d >= 1 && d < (int64_t(1) << 31)};
  if (!v.fast) return v;
  int32_t l = 0;
  while ((int64_t(1) << l) < d) ++l;
  v.magic = uint32_t((uint64_t(1) << 32) * ((uint64_t(1) << l) - uint64_t(d)) / uint64_t(d) + 1);
  v.sh1 = l < 1 ? l : 1, v.sh2 = l > 1 ? l - 1 : 0;
  return v;
}
FC_HD inline int64_t quot(const Divisor& v, int64_t a) {
  if (v.fast && (uint64_t(a) >> 32) == 0) {
    const uint32_t x = uint32_t(a);
#ifdef __CUDA_ARCH__
    const uint32_t t = __umulhi(v.magic, x);
#else
    const uint32_t t = uint32_t((uint64_t(v.magic) * x) >> 32);
#endif
    return int64_t((t + ((x - t) >> v.sh1)) >> v.sh2);
  }
  return div64(a, v.d);
}
FC_HD inline int64_t rem(const Divisor& v, int64_t a) { return a - quot(v, a) * v.d; }

// The chain's structure at one length, with chain_weights' defaults applied, and its divisors. Built
// once per length (closed_shape) and asked for any number of terms (closed_kappa_at).
struct Shape {
  int64_t n;
  int64_t L, W, P, Q;    // lanes, lane width (pre with one lane), pre, items per full chunk (W / P)
  int64_t B;             // positions per block (n without blocks)
  int64_t tree, levels;  // lanes per pairwise tree and its depth
  int64_t n_trees;
  int64_t pr;                          // 1 where the products round (never for tensor-core steps)
  int64_t extra;                       // merges after the last term
  Divisor dL, dW, dP, dLW, dB, dTree;  // by L, W, P, L W (a round of chunks), B and tree
};

FC_HD inline Shape shape_of(const ClosedChain& c, int64_t n, int64_t extra) {
  Shape s;
  s.n = n, s.extra = extra;
  s.L = max64(1, c.lanes), s.P = max64(1, c.pre);
  s.W = s.L == 1 ? s.P : max64(1, c.lane_width);
  s.Q = div64(s.W, s.P);
  s.B = c.block > 0 ? c.block : n;
  s.tree = c.lane_tree > 0 ? min64(c.lane_tree, s.L) : s.L;
  s.levels = 0;
  while ((int64_t(1) << s.levels) < s.tree) ++s.levels;
  s.n_trees = div64(s.L + s.tree - 1, s.tree);
  s.pr = c.exact_products || c.adder == int32_t(Adder::TensorCore) ? 0 : 1;
  s.dL = divisor(s.L), s.dW = divisor(s.W), s.dP = divisor(s.P), s.dLW = divisor(s.L * s.W);
  s.dB = divisor(max64(1, s.B)), s.dTree = divisor(s.tree);
  return s;
}

// Lane l's items whose first position is below x: whole rounds of L chunks, then l's chunk of the
// round x falls in, cut at x (and at n, which ends the last chunk).
FC_HD inline int64_t items_before(const Shape& s, int64_t l, int64_t x) {
  const int64_t y = min64(x, s.n), round = s.L * s.W, full = quot(s.dLW, y);
  const int64_t part = min64(max64(y - full * round - l * s.W, 0), s.W);
  return full * s.Q + quot(s.dP, part + s.P - 1);
}

// The first position of lane l's last item (the lane holds a term: l W < n): its last chunk is the
// last one below n that is l modulo L.
FC_HD inline int64_t last_item_first(const Shape& s, int64_t l) {
  const int64_t top = quot(s.dW, s.n - 1), chunk = top - rem(s.dL, top - l);
  return quot(s.dP, min64(s.n, chunk * s.W + s.W) - 1) * s.P;
}

// The tensor-core steps (runs of kTensorCoreFused positions) that the items [a, b) of the only lane
// fall in, and item g's step counted from item a's. Item g's step is g pre / kTensorCoreFused, which
// moves by at most one from item to item while pre <= kTensorCoreFused and by at least one otherwise.
FC_HD inline int64_t tc_steps(const Shape& s, int64_t a, int64_t b) {
  return s.P >= kTensorCoreFused ? b - a : (b - 1) * s.P / kTensorCoreFused - a * s.P / kTensorCoreFused + 1;
}
FC_HD inline int64_t tc_step(const Shape& s, int64_t a, int64_t g) {
  return s.P >= kTensorCoreFused ? g - a : g * s.P / kTensorCoreFused - a * s.P / kTensorCoreFused;
}

// chain_weights' roundings of the term at position j (0 <= j < n), in units u, for an adder other
// than AnyOrder. Blocks before a lane's last are taken to hold an item of every lane, so that the
// lane's block index is the block's own (closed_form_covers).
FC_HD inline double roundings(const ClosedChain& c, const Shape& s, int64_t j) {
  const int64_t l = rem(s.dL, quot(s.dW, j)), first = quot(s.dP, j) * s.P, o = j - first, m = min64(s.P, s.n - first);
  // Its item: the product, then the item's sum from zero.
  double r = double(s.pr) + double(m == 1 ? 0 : o == 0 ? m - 1 : m - o);
  // The accumulation that takes the item: all the lane's items (Rescale) or its block's.
  const int64_t t = items_before(s, l, first), b = quot(s.dB, first), last_b = quot(s.dB, last_item_first(s, l));
  const bool rescale = c.merge == int32_t(Merge::Rescale);
  const int64_t a = rescale ? 0 : items_before(s, l, b * s.B), e = items_before(s, l, rescale ? s.n : (b + 1) * s.B);
  if (c.adder == int32_t(Adder::Nearest)) {
    r += double(t == a ? e - a - 1 : e - t);
  } else {
    r += kTcOwn + kTcLater * double(tc_steps(s, a, e) - 1 - tc_step(s, a, t));
  }
  // The merges or rescales after its block, then the ones past the last term.
  if (rescale) {
    r += double(c.merge_old) * double(last_b - b);
  } else if (c.merge == int32_t(Merge::Serial)) {
    r += double(b == 0 ? c.merge_new - 1 : c.merge_new) + double(last_b - b) * c.merge_old;
  } else {
    r += double(last_b);
  }
  if (s.extra > 0 && c.merge != int32_t(Merge::AnyOrder)) r += double(s.extra) * c.merge_old;
  // The lane tree, then the trees' sums in order.
  const int64_t tau = quot(s.dTree, l);
  return r + (double(s.levels) + double(s.n_trees > 1 ? (tau == 0 ? s.n_trees - 1 : s.n_trees - tau) : 0));
}

// Every term's weight of a sum in any order: bounds_chain.cpp's any_order, the same expression. Each
// product and sum in it is exact (integers below 2^53 times a power of two), so a compiler that fuses
// a multiply and an add into an FMA still gets the same double.
FC_HD inline double any_order(const ClosedChain& c, int64_t n) {
  const double u = c.u, pr = c.exact_products ? 0 : 1;
  return c.truncates ? double(n - 1) * 3 * u + pr * 2 * u : (double(n - 1) + pr) * u;
}

// The merges or rescales of all lanes, each of which may underflow (chain_weights' merges).
FC_HD inline double merges(const ClosedChain& c, const Shape& s) {
  double total = 0;
  for (int64_t l = 0; l < s.L && l * s.W < s.n; ++l) {
    const int64_t last_b = quot(s.dB, last_item_first(s, l));
    total += c.merge == int32_t(Merge::Rescale) ? double(c.merge_old) * double(last_b - quot(s.dB, l * s.W))
                                                : double(last_b + 1) * double(c.merge_old + c.merge_new);
    total += double(max64(s.extra, 0)) * c.merge_old;
  }
  return total;
}

}  // namespace closed_detail

// Whether closed_kappa and the rest equal chain_weights for c at every length and number of extra
// merges. They do for AnyOrder adders (one weight for all) and for Nearest and TensorCore chains
// except where a term's place is not a matter of divisions:
//  - a lane width that pre does not divide (with more than one lane): items are cut at chunk ends;
//  - a TensorCore adder with more than one lane: a lane's tensor-core steps are runs of positions
//    that its chunks only partly fill;
//  - blocks merged Serial or AnyOrder whose length is not a multiple of lanes x lane width (of pre
//    with one lane; also of kTensorCoreFused for TensorCore): some lane's block may then hold no
//    item, which shifts that lane's block index, or a tensor-core step may span two blocks;
//  - a negative merge_old: the largest weight is then no longer at a lane's first items.
// Rescaled blocks need no condition: every item of a lane shares one accumulation.
inline bool closed_form_covers(const Chain& c) {
  if (c.adder == Adder::AnyOrder) return true;
  if (c.adder != Adder::Nearest && c.adder != Adder::TensorCore) return false;
  if (c.merge != Merge::Rescale && c.merge != Merge::Serial && c.merge != Merge::AnyOrder) return false;
  if (c.merge_old < 0) return false;
  const int64_t L = c.lanes > 1 ? c.lanes : 1, P = c.pre > 1 ? c.pre : 1, W = c.lane_width > 1 ? c.lane_width : 1;
  if (L > 1 && (W % P != 0 || c.adder == Adder::TensorCore)) return false;
  if (c.block > 0 && c.merge != Merge::Rescale) {
    if (c.block % (L > 1 ? L * W : P) != 0) return false;
    if (c.adder == Adder::TensorCore && c.block % kTensorCoreFused != 0) return false;
  }
  return true;
}

inline ClosedChain closed_chain(const Chain& c, bool flush_subnormals) {
  ClosedChain k;
  k.adder = int32_t(c.adder), k.merge = int32_t(c.merge);
  k.exact_products = c.exact_products, k.truncates = c.truncates;
  k.block = c.block, k.merge_old = c.merge_old, k.merge_new = c.merge_new;
  k.lanes = c.lanes, k.lane_width = c.lane_width, k.lane_tree = c.lane_tree, k.pre = c.pre;
  k.u = unit_roundoff(c.acc);
  k.floor = flush_subnormals ? min_normal(c.acc) : underflow_floor(c.acc);
  return k;
}

// A chain at one length and number of extra merges, for any number of closed_kappa_at.
using ClosedShape = closed_detail::Shape;
FC_HD inline ClosedShape closed_shape(const ClosedChain& c, int64_t n, int64_t extra) {
  return closed_detail::shape_of(c, n, extra);
}

// chain_weights(c, n, ftz, extra).kappa[j] for 0 <= j < n (0 outside), where closed_form_covers(c),
// with s = closed_shape(c, n, extra).
FC_HD inline double closed_kappa_at(const ClosedChain& c, const ClosedShape& s, int64_t j) {
  if (s.n <= 0 || j < 0 || j >= s.n) return 0;
  if (c.adder == int32_t(Adder::AnyOrder)) return closed_detail::any_order(c, s.n);
  return c.u * closed_detail::roundings(c, s, j);
}
FC_HD inline double closed_kappa(const ClosedChain& c, int64_t n, int64_t extra, int64_t j) {
  return closed_kappa_at(c, closed_shape(c, n, extra), j);
}

// .kappa_max. Within a lane the largest count is at the first item of its first or second block: an
// item's first position is charged the most of its item (pre sums from zero), an accumulation's first
// item the most of its adds or steps, and from the second block on the merge charge does not rise
// (merge_old >= 0) while no block holds more items than a full one. The first block's merge charge
// (Serial) is merge_old - 1 above the second's, so the second wins only where merge_old is 0. Rescaled
// blocks share one accumulation and their charge falls with the block: the lane's first item wins.
FC_HD inline double closed_kappa_max(const ClosedChain& c, const ClosedShape& s) {
  if (s.n <= 0) return 0;
  if (c.adder == int32_t(Adder::AnyOrder)) return closed_detail::any_order(c, s.n);
  double top = 0;
  for (int64_t l = 0; l < s.L && l * s.W < s.n; ++l) {
    double r = closed_detail::roundings(c, s, l * s.W);
    // Blocks are whole rounds of lanes (closed_form_covers): lane l's first item in block 1 is at B + l W.
    if (c.merge != int32_t(Merge::Rescale) && closed_detail::last_item_first(s, l) >= s.B) {
      const double r1 = closed_detail::roundings(c, s, s.B + l * s.W);
      r = r1 > r ? r1 : r;
    }
    top = r > top ? r : top;
  }
  return c.u * top;
}
FC_HD inline double closed_kappa_max(const ClosedChain& c, int64_t n, int64_t extra) {
  return closed_kappa_max(c, closed_shape(c, n, extra));
}

// .events: the terms' products and adds (and the underflow of each), the tensor-core steps, the
// merges, and the lane trees' levels and sums.
FC_HD inline double closed_events(const ClosedChain& c, const ClosedShape& s) {
  const int64_t n = s.n;
  if (n <= 0) return 0;
  if (c.adder == int32_t(Adder::AnyOrder)) return double(n) * (2 + (c.exact_products ? 0 : 1));
  // Tensor-core steps (one lane): one accumulation, or blocks that end on step boundaries
  // (closed_form_covers), so no step is counted in two blocks.
  const double steps = c.adder == int32_t(Adder::TensorCore)
                           ? double(closed_detail::tc_steps(s, 0, closed_detail::quot(s.dP, n + s.P - 1)))
                           : 0.0;
  return double(n) * double(2 + s.pr) + steps + closed_detail::merges(c, s) +
         double(s.L) * double(s.levels + s.n_trees);
}
FC_HD inline double closed_events(const ClosedChain& c, int64_t n, int64_t extra) {
  return closed_events(c, closed_shape(c, n, extra));
}

// .mult_events: the rounded products and the merges.
FC_HD inline double closed_mult_events(const ClosedChain& c, const ClosedShape& s) {
  const int64_t n = s.n;
  if (n <= 0) return 0;
  if (c.adder == int32_t(Adder::AnyOrder)) return double(n) * (c.exact_products ? 0 : 1);
  return double(n) * double(s.pr) + closed_detail::merges(c, s);
}
FC_HD inline double closed_mult_events(const ClosedChain& c, int64_t n, int64_t extra) {
  return closed_mult_events(c, closed_shape(c, n, extra));
}

}  // namespace fc::ref
