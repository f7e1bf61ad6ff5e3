// Our own generators (docs/laws.md: RapidCheck's floats never reach NaN, inf, subnormals or large
// magnitudes). A case is drawn from a regime and a shape; everything is reproducible from
// RapidCheck's (seed, size) and shrinks toward the smallest shape, the first regime of the spec
// (put the plainest first) and the plainest values (small integers).
#pragma once

#include <rapidcheck.h>

#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "properties/case.hpp"

namespace fc::props {

// What may be generated: the kernel's capabilities intersected with what a law needs.
struct GenSpec {
  std::vector<DType> dtypes{DType::F32};
  std::vector<DtypeSet> mixed_dtypes;  // per-tensor dtypes drawn beside `dtypes` (KernelInfo::mixed_dtypes)
  std::vector<Mask> masks{Mask::None};
  std::vector<int32_t> head_dims;  // empty: any d (mostly small, sometimes up to 256, odd included)
  bool gqa = true;
  bool backward = false;  // generate d_o
  bool any_tile = false;  // tiles drawn freely; otherwise from `configs`
  std::vector<Config> configs{Config{}};
  std::vector<Regime> regimes{Regime::Normal};
  int32_t max_n = 80;            // n_q, n_k at the largest size (well past 2 x kBlockN)
  bool s_in_storage = false;     // S materialised in storage: Huge stays within its range
  int32_t min_n = 1, min_d = 1;  // statistical laws (the FA rule) need sizable tensors
  int32_t long_n = 4096;         // LongRow: the longest rows (n_k) it draws
  bool pow2_scale = false;       // scales are powers of two (laws that need exact scores)
  // GPU-sized shapes: this percentage of cases is one head (two with GQA) whose rows span 3..6 key
  // tiles and 2..3 query tiles of the case's tile (64 x 64 when it names none), past the work cap:
  // a pipeline ring wraps, a backward runs >= 2 key blocks. 0 (CPU kernels) draws nothing for it.
  // Their lengths shrink to a single key and query: a failure first met there shrinks to short rows.
  int32_t large_percent = 0;
  // The shapes the kernel declares it takes (KernelInfo::n_q, n_k, max_batch, max_heads, fixed_scale):
  // every drawn length is mapped into its axis' set (a multiple-of-64 axis draws a count of 64s), never
  // drawn and rejected.
  Lengths n_q, n_k;
  int32_t max_batch = 0, max_heads = 0;
  double fixed_scale = 0;
  // Kernels from outside (plugins, Python): this percentage of the cases of size >= 50 takes one of the
  // shapes that reach
  // a kernel's other code paths (Path): decode rows against long keys, rows of 3 to 4 tiles, a
  // length in every residue class mod 128, GQA groups up to 16, and the head dims 40 .. 256.
  int32_t path_percent = 0;
  // Long rows at production lengths: this percentage of the cases is a decode's 1..8 query rows (batch
  // 1..2, a GQA group of up to 4) against n_k keys log-uniform in [kLongMin, long_max] (4096 .. 131072),
  // every row and gradient judged in full. Only where the certified oracle runs on the GPU (spec_for):
  // the CPU's would take seconds per case. The branch shrinks to the ordinary shape, its lengths to one
  // key and one query.
  int32_t long_percent = 0;
  int32_t long_max = 131072;
};
inline constexpr int32_t kLongMin = 4096;

// The regime of shapes a case was drawn in (its coverage, counted per law): Path::Plain for the
// ordinary small shapes.
enum class ShapePath : int32_t {
  Plain = 0,
  Decode = 1,
  MultiTile = 2,
  Residue = 3,
  WideGroup = 4,
  HeadDim = 5,
  Long = 6,  // n_k >= kLongMin
  kCount
};
const char* shape_path_name(ShapePath s);
// Which paths a problem reaches under a key tile of block_n (64 where the config names none):
// decode (n_q <= 8 < n_k / 8, batch >= 2), >= 3 key tiles, GQA ratio >= 8, an odd head dim of the
// list, n_k >= kLongMin; a bit per ShapePath.
uint32_t shape_paths(const Problem& p, int32_t block_n);

rc::Gen<Case> gen_case(const GenSpec& spec);

// The value construction used by gen_case, exposed for the generator tests: fills c.in's q k v
// (and d_o when `backward`) for c.regime, from a seed; plain = 0 gives small integers.
void fill_values(Case& c, int plain, uint64_t seed, bool backward, double max_score);
// The largest |s| the Huge and FarBelow regimes may reach: FLT_MAX/4 ~ 8.5e37 (fp32's limit; the
// certified oracle stays within its 1e-13 targets there), or 1/4 of the storage range when S is
// materialised in storage (a baseline's S overflows past it); 1e8 for fp64 storage, whose lse is
// still fp32. Huge aims at a quarter of it.
double max_score_for(DType storage, bool s_in_storage);

// What a case's scores look like, in fp64 from its inputs (classify.cpp).
struct ScoreStats {
  double max_abs = 0;       // max |s_ij| over visible keys
  double max_score = 0;     // max s_ij (-inf when no row sees a key)
  int64_t empty_rows = 0;   // rows with no visible key
  int64_t tied_rows = 0;    // rows whose maximum is attained at least twice
  int64_t equal_rows = 0;   // rows of >= 2 visible keys whose scores are all equal
  int64_t multi_rows = 0;   // rows with >= 2 visible keys
  int64_t subnormal_p = 0;  // weights exp(s - m) in the subnormal range of the storage type
};
ScoreStats score_stats(const Inputs& in);

// The regime a case demonstrably belongs to: its label when its data show the regime's defining
// property (scores >= 1e3 for huge, every score <= -1e4 for far_below, an empty row for
// fully_masked, ...), Normal otherwise. The coverage check counts these, not the labels.
Regime classify(const Case& c);
// The first regime of `order` whose defining property the inputs show (Normal when none), the score
// statistics computed once for all of them.
Regime first_shown(const Inputs& in, std::initializer_list<Regime> order);

}  // namespace fc::props
