// The laws of DESIGN §5, as data: each a present-tense sentence, the value regimes it claims to
// cover, and a check that returns "" when the law holds on a case or says how it broke.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "properties/generators.hpp"

namespace fc::props {

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
  bool needs_large_offsets = false;  // only for kernels that declare KernelInfo::large_offsets
  std::function<std::string(const Kernel&, const Case&)> check;
  // A law judged on one case it builds from the seed (too large for RapidCheck to hold, copy and
  // shrink: laws_large.cpp): the runner calls it once instead of `check` on random cases.
  std::function<std::string(const Kernel&, uint64_t seed)> check_once{};
};

// Thrown by a law's check when the case lies outside the law's domain.
struct NotApplicable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const std::vector<Law>& laws();
const Law* find_law(const std::string& id);

// Does kernel k claim what the law needs, and which of the law's regimes can it reach?
bool law_applies(const Law& law, const Kernel& k);
std::vector<Regime> claimed_regimes(const Law& law, const Kernel& k);
GenSpec spec_for(const Law& law, const Kernel& k);

// The table's parts, one per file.
void add_reference_laws(std::vector<Law>& out);    // laws_reference.cpp
void add_metamorphic_laws(std::vector<Law>& out);  // laws_metamorphic.cpp
void add_structural_laws(std::vector<Law>& out);   // laws_structural.cpp
void add_softmax_laws(std::vector<Law>& out);      // laws_softmax.cpp
void add_large_laws(std::vector<Law>& out);        // laws_large.cpp

// Helpers shared by the law files.
// a and b (two kernel outputs whose exact values coincide) within bound_a + bound_b.
std::string agree(const Problem& p, const char* name, const HostTensor& a, const HostTensor& b,
                  const std::vector<double>& bound_a, const std::vector<double>& bound_b);
// One tensor against expected values within a bound ("" or a one-line description).
std::string within(const Problem& p, const char* name, const std::vector<double>& got,
                   const std::vector<double>& expected, const std::vector<double>& bound, DType dt);
bool has_backward(const Kernel& k, const Case& c);

}  // namespace fc::props
