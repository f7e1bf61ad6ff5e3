// shape_histogram KERNEL [CASES] [SEED]: the shapes `flashcheck check --kernel KERNEL --cases CASES
// --seed SEED` draws, law by law, as the tiles they make the kernel walk: how many key tiles its
// longest query tile spans (a TMA ring of two stages wraps at 3), how many query tiles a head has,
// and the share of cases with >= 3 key tiles and >= 2 query tiles. The generator alone (no kernel
// runs, so it needs no GPU): the cases a kernel's supports() declines are counted, as "declined",
// only where the kernel's device is present. A program, not a test: docs/cuda-mutants.md quotes it.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <iostream>
#include <string>

#include "contract/rules.h"
#include "properties/laws.hpp"

namespace {

constexpr int kKeyBins = 8;  // 0 .. 6 key tiles, then 7 and more

// The most key tiles any query tile of c walks, at c's tile (64 x 64 when it names none).
int key_tiles(const fc::props::Case& c) {
  const fc::Problem& p = c.in.p;
  const int bm = c.cfg.block_m > 0 ? c.cfg.block_m : 64, bn = c.cfg.block_n > 0 ? c.cfg.block_n : 64;
  int most = 0;
  for (int m0 = 0; m0 < p.n_q; m0 += bm)
    most = std::max(most, fc::rules::key_tile_count(p.mask, p.n_q, p.n_k, m0, bm, bn));
  return most;
}

int query_tiles(const fc::props::Case& c) {
  const int bm = c.cfg.block_m > 0 ? c.cfg.block_m : 64;
  return (c.in.p.n_q + bm - 1) / bm;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::cerr << "usage: shape_histogram KERNEL [CASES] [SEED]\n";
    return 2;
  }
  const fc::Kernel* k = fc::find_kernel(argv[1]);
  if (k == nullptr) {
    std::cerr << "shape_histogram: no kernel named " << argv[1] << "\n";
    return 2;
  }
  const int cases = argc > 2 ? std::atoi(argv[2]) : 100;
  const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;
  if (cases < 1) {
    std::cerr << "shape_histogram: CASES must be >= 1\n";
    return 2;
  }
  const bool can_run = fc::device_present(k->info.device);
  std::array<int64_t, kKeyBins> keys{};
  std::array<int64_t, 4> queries{};
  int64_t total = 0, wide = 0, declined = 0, largest_n = 0;
  fmt::print("{}: {} cases per law, seed {} (key tiles: of the longest query tile; cfg's tile)\n", k->info.name, cases,
             seed);
  fmt::print("{:<16} {:>6} {:>9} {:>9}\n", "law", "cases", ">=3 keys", "& >=2 q");
  for (const fc::props::Law& law : fc::props::laws()) {
    if (!fc::props::law_applies(law, *k) || law.check_once) continue;
    const rc::Gen<fc::props::Case> gen = fc::props::gen_case(fc::props::spec_for(law, *k));
    rc::Random random(rc::Random::Key{seed, 0x5eed, 0, 0});
    int64_t n = 0, w = 0, k3 = 0;
    for (int i = 0; i < cases; ++i) {
      const fc::props::Case c = gen(random.split(), std::min(100, i * 100 / cases)).value();
      if (can_run && !fc::claims(*k, c.in.p)) {
        ++declined;
        continue;
      }
      const int kt = key_tiles(c), qt = query_tiles(c);
      ++keys[std::min(kt, kKeyBins - 1)], ++queries[std::min(qt, 3)];
      ++n, k3 += kt >= 3, w += kt >= 3 && qt >= 2;
      largest_n = std::max<int64_t>(largest_n, std::max(c.in.p.n_q, c.in.p.n_k));
    }
    fmt::print("{:<16} {:>6} {:>8.0f}% {:>8.0f}%\n", law.id, n, 100.0 * k3 / std::max<int64_t>(n, 1),
               100.0 * w / std::max<int64_t>(n, 1));
    total += n, wide += w;
  }
  fmt::print("\nkey tiles spanned: ");
  for (int b = 0; b < kKeyBins; ++b) fmt::print("{}{}: {}  ", b, b == kKeyBins - 1 ? "+" : "", keys[b]);
  fmt::print("\nquery tiles: 1: {}  2: {}  3+: {}\n", queries[1], queries[2], queries[3]);
  fmt::print("all laws: {} cases, {:.0f}% span >= 3 key tiles and >= 2 query tiles; largest n {}; {}\n", total,
             100.0 * wide / std::max<int64_t>(total, 1), largest_n,
             can_run ? fmt::format("{} declined by supports()", declined) : "supports() not asked (no device)");
  return 0;
}
