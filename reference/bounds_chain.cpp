// The per-term rounding weights of bounds_chain.hpp. A round-to-nearest operation errs by at most
// u times the partial it produces; a term sits in that partial, so it is charged u for the
// operation: kappa_j / u counts the operations whose partial holds term j. A tensor-core step
// (contract/arithmetic.h) of the accumulator C and products p_k:
//   truncating the result: less than an ulp, 2u of |C + sum p|              -> 2 for every term held
//   aligning a product: it loses less than the grid 2^-25 2^E (E the largest addend's exponent) and
//     less than itself; grid <= (u/2) |C| when C is the largest, <= u max|p| when a product is (its
//     exponent may be counted from a significand in [1, 4)): K_f (u/2) |C| + K_f u max|p| at most
//                                                                          -> K_f/2 for C's terms,
//                                                                             K_f for the step's own
//   C itself, truncated only when a product is larger: less than u max|p|  -> 1 for the step's own
// so a term is charged 2 + K_f + 1 in its own step and 2 + K_f/2 in every later step.
#include "bounds_chain.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "bounds.hpp"

namespace fc::ref {
namespace {

constexpr double kTcOwn = 2 + kTensorCoreFused + 1;
constexpr double kTcLater = 2 + kTensorCoreFused / 2.0;

int64_t ceil_log2(int64_t n) {
  int64_t levels = 0;
  while ((int64_t(1) << levels) < n) ++levels;
  return levels;
}

double any_order(const Chain& c, int64_t n) {
  const double u = unit_roundoff(c.acc), pr = c.exact_products ? 0 : 1;
  return c.truncates ? double(n - 1) * 3 * u + pr * 2 * u : (double(n - 1) + pr) * u;
}

// The roundings of one chain (chain_weights), lane by lane: r counts per position, in units u, the
// operations whose partial holds its term; steps and merges count the tensor-core steps and the
// merges or rescales, each of which may underflow.
struct Roundings {
  struct Item {
    int64_t first, begin, end;  // its first position; [begin, end) into pos
  };
  const Chain& c;
  double pr;                      // 1 where the products round, else 0
  std::vector<double> r;          // (n) roundings per term, in units u
  std::vector<int64_t> pos = {};  // the lane's positions, in order
  std::vector<Item> items = {};   // the lane's items
  double steps = 0, merges = 0;

  // Items: runs of `pre` consecutive positions summed from zero first (one term each otherwise).
  void cut_items(int64_t pre) {
    for (int64_t x = 0; x < int64_t(pos.size());) {
      int64_t y = x + 1;
      while (pre > 1 && y < int64_t(pos.size()) && pos[size_t(y)] / pre == pos[size_t(x)] / pre) ++y;
      const int64_t m = y - x;
      for (int64_t o = 0; o < m; ++o) r[size_t(pos[size_t(x + o)])] += pr + double(m == 1 ? 0 : o == 0 ? m - 1 : m - o);
      items.push_back({pos[size_t(x)], x, y});
      x = y;
    }
  }
  void charge(const Item& it, double roundings) {
    for (int64_t x = it.begin; x < it.end; ++x) r[size_t(pos[size_t(x)])] += roundings;
  }
  // The accumulation of items [a, b) from one accumulator: serial adds, or tensor-core steps.
  void accumulate(int64_t a, int64_t b) {
    if (c.adder == Adder::Nearest) {
      for (int64_t t = a; t < b; ++t) charge(items[size_t(t)], double(t == a ? b - a - 1 : b - t));
      return;
    }
    int64_t n_steps = 0;  // tensor-core steps present in [a, b)
    for (int64_t t = a; t < b; ++t)
      n_steps += t == a || items[size_t(t)].first / kTensorCoreFused != items[size_t(t - 1)].first / kTensorCoreFused;
    steps += double(n_steps);
    for (int64_t t = a, s = -1; t < b; ++t) {
      s += t == a || items[size_t(t)].first / kTensorCoreFused != items[size_t(t - 1)].first / kTensorCoreFused;
      charge(items[size_t(t)], kTcOwn + kTcLater * double(n_steps - 1 - s));
    }
  }
  // The lane's items in blocks of B positions: one accumulator multiplied at each later block
  // boundary (Merge::Rescale), or a partial from zero per block, then merged.
  void blocks(int64_t B) {
    const int64_t n_items = int64_t(items.size());
    if (c.merge == Merge::Rescale) {
      accumulate(0, n_items);
      const int64_t last = items.back().first / B;
      for (const Item& it : items) charge(it, double(c.merge_old) * double(last - it.first / B));
      merges += double(c.merge_old) * double(last - items.front().first / B);
      return;
    }
    std::vector<int64_t> starts;  // first item of each block
    for (int64_t t = 0; t < n_items; ++t)
      if (t == 0 || items[size_t(t)].first / B != items[size_t(t - 1)].first / B) starts.push_back(t);
    const int64_t nb = int64_t(starts.size());
    starts.push_back(n_items);
    for (int64_t bi = 0; bi < nb; ++bi) {
      accumulate(starts[size_t(bi)], starts[size_t(bi + 1)]);
      const double m = c.merge == Merge::Serial
                           ? double(bi == 0 ? c.merge_new - 1 : c.merge_new) + double(nb - 1 - bi) * c.merge_old
                           : double(nb - 1);  // merged in any order: at most every merge add
      for (int64_t t = starts[size_t(bi)]; t < starts[size_t(bi + 1)]; ++t) charge(items[size_t(t)], m);
    }
    merges += double(nb) * double(c.merge_old + c.merge_new);
  }
};

}  // namespace

double chain_scale(double kappa_max) {
  if (!(kappa_max > 0)) return kappa_max == 0 ? 1.0 : std::numeric_limits<double>::infinity();
  // expm1 and the division each err by at most an ulp or two: 2^-50 covers both, upward.
  const double s = kappa_max < 0x1p-20 ? 1 + kappa_max : std::expm1(kappa_max) / kappa_max;
  return s * (1 + 0x1p-50);
}

double ChainWeights::scale() const { return chain_scale(kappa_max); }

double grown_floors(double f, double kappa) { return f == 0 ? 0.0 : f * std::exp(kappa) * (1 + 0x1p-50); }

double ChainWeights::floors() const { return grown_floors(events * floor, kappa_max); }

bool is_plain(const Chain& c) { return c.block <= 0 && c.lanes <= 1 && c.pre <= 1; }

double plain_kappa(const Chain& c, int64_t t, int64_t n, int64_t step, int64_t n_steps) {
  const double u = unit_roundoff(c.acc), pr = c.exact_products ? 0 : 1;
  switch (c.adder) {
    case Adder::Nearest: return u * (pr + double(t == 0 ? n - 1 : n - t));
    case Adder::TensorCore: return u * (kTcOwn + kTcLater * double(n_steps - 1 - step));
    case Adder::AnyOrder: return any_order(c, n);
  }
  return std::numeric_limits<double>::infinity();
}

ChainWeights chain_weights(const Chain& c, int64_t n, bool flush_subnormals, int64_t extra_merges) {
  ChainWeights w;
  w.floor = flush_subnormals ? min_normal(c.acc) : underflow_floor(c.acc);
  w.kappa.assign(size_t(std::max<int64_t>(n, 0)), 0.0);
  if (n <= 0) return w;
  const double u = unit_roundoff(c.acc), pr = c.exact_products || c.adder == Adder::TensorCore ? 0 : 1;
  if (c.adder == Adder::AnyOrder) {
    std::fill(w.kappa.begin(), w.kappa.end(), any_order(c, n));
    w.kappa_max = w.kappa[0], w.events = double(n) * (2 + pr), w.mult_events = double(n) * pr;
    return w;
  }
  const int64_t L = std::max(1, c.lanes), W = std::max(1, c.lane_width), pre = std::max(1, c.pre);
  const int64_t B = c.block > 0 ? c.block : n, tree = c.lane_tree > 0 ? std::min<int64_t>(c.lane_tree, L) : L;
  const int64_t levels = ceil_log2(tree), n_trees = (L + tree - 1) / tree;
  Roundings rd{c, pr, std::vector<double>(static_cast<size_t>(n), 0.0)};
  for (int64_t lane = 0; lane < L; ++lane) {
    rd.pos.clear(), rd.items.clear();
    for (int64_t base = lane * W; base < n; base += L * W)
      for (int64_t j = base; j < std::min(n, base + W); ++j) rd.pos.push_back(j);
    if (rd.pos.empty()) continue;
    rd.cut_items(pre);
    rd.blocks(B);
    // The lanes: a pairwise tree per run of `tree` lanes (every level rounds every term once), then
    // the trees' sums one after the other.
    // Blocks walked past the last term: each merges an empty partial (or rescales) into the total.
    if (extra_merges > 0 && c.merge != Merge::AnyOrder)
      for (const Roundings::Item& it : rd.items) rd.charge(it, double(extra_merges) * c.merge_old);
    rd.merges += double(std::max<int64_t>(extra_merges, 0)) * c.merge_old;
    const int64_t tau = lane / tree;
    const double tree_r = double(levels) + double(n_trees > 1 ? (tau == 0 ? n_trees - 1 : n_trees - tau) : 0);
    for (const Roundings::Item& it : rd.items) rd.charge(it, tree_r);
  }
  for (int64_t j = 0; j < n; ++j)
    w.kappa[size_t(j)] = u * rd.r[size_t(j)], w.kappa_max = std::max(w.kappa_max, w.kappa[size_t(j)]);
  w.events = double(n) * (2 + pr) + rd.steps + rd.merges + double(L) * double(levels + n_trees);
  w.mult_events = double(n) * pr + rd.merges;
  return w;
}

}  // namespace fc::ref
