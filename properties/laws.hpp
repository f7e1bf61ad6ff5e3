// The laws (docs/laws.md), as data: each a present-tense sentence, the value regimes it claims to
// cover, and a check that returns "" when the law holds on a case or says how it broke.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "properties/generators.hpp"
#include "verdict/verdict.hpp"

namespace fc::props {

// The layer below (verdict/): a case run on a kernel, its certified reference, its bound and its
// verdict. A law's check throws NotApplicable when the case lies outside the law's domain (a
// transform that is not exact in storage, no fully masked row, ...), as execute does for a problem
// the kernel does not claim.
using verdict::certify;
using verdict::check_outputs;
using verdict::element_name;
using verdict::execute;
using verdict::NotApplicable;
using verdict::oracle;
using verdict::precision_of;
using verdict::Run;
using verdict::run_errors;

struct Law {
  std::string id;                    // short name for command lines: --law ID
  std::string sentence;              // the law as a sentence: the property's name
  std::vector<Regime> regimes;       // regimes it claims to reach (first = plainest, shrink target)
  bool backward = false;             // also checks gradients when the kernel has a backward
  bool needs_backward = false;       // meaningless without a backward
  bool mask_none_only = false;       // holds only without a mask (permutations)
  bool needs_causal = false;         // needs a causal mask (invisible keys)
  bool needs_tiles = false;          // needs two tile configs (any_tile or >= 2 configs)
  bool needs_baseline = false;       // needs the same-precision baseline cpu_naive (FA rule)
  std::vector<DType> only_dtypes{};  // non-empty: the storage types the law is defined for
  int32_t min_n = 1, min_d = 1;      // smallest n_q, n_k and d (a statistical law needs sizable tensors)
  bool pow2_scale = false;           // scales are powers of two (exact scores on grid inputs)
  Variants needs_variants{};         // the contract v2 variants the kernel must declare (variant laws)
  bool judges_variants = false;      // a dense law that holds on variant problems too: its check draws the
                                     // kernel's declared variants into half the cases, and an input file
                                     // may use any variant the kernel declares
  // What the law needs the kernel to declare (KernelInfo::exact): "" when it has it, else why not.
  std::function<std::string(const KernelInfo&)> needs_exact{};
  std::function<std::string(const Kernel&, const Case&)> check{};
  bool needs_large_offsets = false;  // only for kernels that declare KernelInfo::large_offsets
  // Only for kernels on a device (KernelInfo::device not "cpu"): a case of GPU scale (padded_scratch),
  // which a host kernel would take minutes over and whose faults (padded device scratch) it has not.
  bool device_only = false;
  // A law judged on one case it builds from the seed (too large for RapidCheck to hold, copy and
  // shrink: laws_large.cpp): the runner calls it once instead of `check` on random cases.
  std::function<std::string(const Kernel&, uint64_t seed)> check_once{};
  bool needs_lse = false;  // reads the kernel's lse: n/a for a kernel that writes none (KernelInfo::writes_lse)
  bool merge = false;         // a law of merge-state kernels (KernelKind::Merge); the others judge attention kernels
  bool needs_splits = false;  // needs a split-KV config and its unsplit twin (split_pairs)
  int once_cases = 1;         // check_once: the cases it judges (the merge laws draw many from the seed)
};

// The split-KV configs of kernel info i, each with its twin (the same config with splits = 0) where the
// kernel offers that twin (in configs, or any tile): split_configs and configs' entries with splits >= 2.
std::vector<std::pair<Config, Config>> split_pairs(const KernelInfo& i);

const std::vector<Law>& laws();
const Law* find_law(const std::string& id);

// Why the law cannot judge kernel k on this case ("" when it can): the case's dtype, mask, sizes
// or tensors (d_o) against what the law needs. Random cases satisfy it by construction.
std::string case_outside_law(const Law& law, const Kernel& k, const Case& c);

// Does kernel k claim what the law needs, and which of the law's regimes can it reach?
bool law_applies(const Law& law, const Kernel& k);
std::vector<Regime> claimed_regimes(const Law& law, const Kernel& k);
GenSpec spec_for(const Law& law, const Kernel& k);

// The table's parts, one per file.
void add_reference_laws(std::vector<Law>& out);    // laws_reference.cpp
void add_metamorphic_laws(std::vector<Law>& out);  // laws_metamorphic.cpp
void add_structural_laws(std::vector<Law>& out);   // laws_structural.cpp
void add_softmax_laws(std::vector<Law>& out);      // laws_softmax.cpp
void add_order_laws(std::vector<Law>& out);        // laws_order.cpp
void add_hull_laws(std::vector<Law>& out);         // laws_hull.cpp
void add_large_laws(std::vector<Law>& out);        // laws_large.cpp
void add_variant_laws(std::vector<Law>& out);      // laws_variants.cpp, laws_window.cpp
void add_hostile_laws(std::vector<Law>& out);      // laws_hostile.cpp
void add_merge_laws(std::vector<Law>& out);        // laws_merge.cpp: merge states and split invariance

// The padded_scratch law's case (laws_large.cpp): its problem for kernel k at seed `seed`; the
// elements of a scratch padded to 128 rows per head, b h_q round_up(n_q, 128) max(d, 32); and whether
// that passes 2^31 while q, k, v, o, lse and the gradients stay below it.
Problem padded_scratch_problem(const Kernel& k, uint64_t seed);
int64_t padded_scratch_elements(const Problem& p);
bool padded_scratch_crosses(const Problem& p);

// Helpers shared by the law files.
// The same bits, element by element ("" or the first element that differs).
std::string same_bits(const Problem& p, const char* name, const HostTensor& a, const HostTensor& b);
// The same values (+0 and -0 alike, NaN as NaN): for transforms that flip signs, where x - x = +0.
std::string same_values(const Problem& p, const char* name, const HostTensor& a, const HostTensor& b);
// The inputs' dot products q_i.k_j are exact in an accumulator of unit roundoff u: every value a
// multiple of 1/8 (the Grid regime's values) and every partial sum within the accumulator's range.
bool dots_exact(const Inputs& in, double u);
bool is_pow2(double x);
// a and b (two kernel outputs whose exact values coincide) within bound_a + bound_b.
std::string agree(const Problem& p, const char* name, const HostTensor& a, const HostTensor& b,
                  const std::vector<double>& bound_a, const std::vector<double>& bound_b);
// One tensor against expected values within a bound ("" or a one-line description).
std::string within(const Problem& p, const char* name, const std::vector<double>& got,
                   const std::vector<double>& expected, const std::vector<double>& bound, DType dt);
bool has_backward(const Kernel& k, const Case& c);
// Two runs of case c (in cfg) that must agree: the first output of b that differs from a's (o and lse
// by their bits; the gradients of a backward that declares atomic reductions, and no deterministic mode
// for c's config, by the reordering tolerance), or "" (laws_structural.cpp).
std::string repeat_difference(const Kernel& k, const Case& c, const Config& cfg, const Run& a, const Run& b, bool bwd);

}  // namespace fc::props
