// One TEST_CASE per law (docs/laws.md), each run over every registered (non-mutant) kernel of this
// executable's device that claims what the law needs: >= 100 random cases per kernel (FC_CASES to
// change), regression files first, shrinking, a replay line on failure and the coverage check.
// Compiled twice: device cpu (label cpu) and device cuda (label gpu, skipped without a GPU).
#include "tests/catch.hpp"

#include <cstdlib>
#include <iostream>
#include <string>

#include "properties/runner.hpp"

#ifndef FC_LAW_DEVICE
#define FC_LAW_DEVICE "cpu"
#define FC_LAW_TAG "[cpu]"
#endif

namespace {

int env_int(const char* name, int dflt) {
  const char* s = std::getenv(name);
  return s && *s ? std::atoi(s) : dflt;
}

void check_law(const char* id, const char* sentence) {
  using namespace fc::props;
  const Law* law = find_law(id);
  REQUIRE(law != nullptr);
  REQUIRE(law->sentence == sentence);  // the test's name is the law's sentence
  RunOptions opt;
  opt.cases = env_int("FC_CASES", 100);
  opt.seed = uint64_t(env_int("FC_SEED", 1));
  opt.regressions_dir = default_regressions_dir();
  int kernels = 0;
  for (const fc::Kernel& k : fc::registry()) {
    if (k.info.mutant || k.info.device != FC_LAW_DEVICE || !law_applies(*law, k)) continue;
    ++kernels;
    const LawResult r = run_law(*law, k, opt);
    INFO("kernel " << k.info.name << ": " << r.message << r.counterexample);
    if (!r.ok) std::cerr << "replay: " << r.replay << "\n";  // unwrapped: Catch breaks long lines
    CHECK(r.ok);
    CHECK(r.cases >= opt.cases);
  }
  // A law no kernel of this device claims is a hole in the suite (a device with no kernel at all,
  // such as a CPU-only build's GPU half, never gets here: the GPU main skips the whole executable).
  // The exceptions on the GPU: the variant laws, the merge-state laws and split_invariance (the CUDA
  // kernels implement no variant, no merge kernel and no split-KV configuration yet).
  const bool gpu_has_none = !fc::covers(fc::Variants{}, law->needs_variants) || law->merge || law->needs_splits;
  if (!(gpu_has_none && std::string(FC_LAW_DEVICE) != "cpu")) CHECK(kernels > 0);
}

}  // namespace

#define FC_LAW(id, sentence) \
  TEST_CASE(sentence, FC_LAW_TAG) { check_law(id, sentence); }

FC_LAW("reference", "every output agrees with the certified reference within its error bound")
FC_LAW("extreme", "extreme inputs stay within the bound and finite where the reference is finite")
FC_LAW("block_size", "block size never changes the answer beyond the bound")
FC_LAW("kv_permutation", "permuting keys and values together changes nothing")
FC_LAW("q_permutation", "permuting queries permutes the outputs")
FC_LAW("lse_bracket", "max_j s_ij <= lse_i <= max_j s_ij + log n_k")
FC_LAW("convex_hull", "every output lies within its column's range of V")
FC_LAW("shift", "adding a constant vector to every key changes nothing")
FC_LAW("affine_v", "O(aV + b) = aO + b")
FC_LAW("invisible_keys", "keys a row cannot see never influence it (bitwise)")
FC_LAW("determinism", "the same inputs give the same bits")
FC_LAW("nan_blast", "a NaN or inf poisons only the rows that read it")
FC_LAW("softmax_row", "the online softmax of a row equals the exact softmax within the shifted-softmax bound")
FC_LAW("varlen_split", "a varlen batch equals its sequences run one by one (bitwise)")
FC_LAW("paged", "paged K/V equals the same keys contiguous, for every page size (bitwise)")
FC_LAW("padded_varlen", "sequences at padded offsets (padding between them) give the compact varlen batch's bits")
FC_LAW("strides", "the same data in any strides gives the same bits")
FC_LAW("window_mask", "window (n, 0) is the causal mask of its alignment and (n, n) no mask (bitwise)")
FC_LAW("window_invisible", "a key outside a row's window never influences the row (bitwise)")
FC_LAW("softcap", "with softcap c every score stays within (-c, c), and c -> infinity is no softcap")
FC_LAW("alibi_zero", "ALiBi with zero slopes equals no ALiBi (bitwise)")
FC_LAW("zero_length", "zero-length sequences produce nothing and disturb nothing")
FC_LAW("sink_neg_inf", "a sink at -inf is no sink (bitwise where exp(0) == 1 is declared and within the bound elsewhere)")
FC_LAW("merge_identity", "merging with empty partials (0, -inf), anywhere among the partials, changes no bit")
FC_LAW("merge_empty", "a row whose partials are all empty merges to o = 0, lse = -inf, never NaN")
FC_LAW("merge_associativity", "merging in groups and in any order agrees with merging at once within the merge bound")
FC_LAW("merge_union", "merging the partials of disjoint key ranges gives attention over their union")
FC_LAW("split_invariance", "the split count of split-KV never changes the answer beyond the bound")
FC_LAW("mask_tensor_builtin", "a boolean mask tensor equal to a causal mask gives its bits (bitwise where mask_walk is declared, within the bound elsewhere)")
FC_LAW("block_mask_dense", "a block mask equals the dense boolean mask of its blocks (bitwise where mask_walk is declared, within the bound elsewhere)")
