// One TEST_CASE per law of DESIGN §5, each run over every registered (non-mutant) kernel of this
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
  // On the CPU a law no kernel claims is a hole in the suite; on a device whose kernels lack a
  // capability (fp32 storage for softmax_row) it is only worth saying.
  if (std::string(FC_LAW_DEVICE) == "cpu")
    CHECK(kernels > 0);
  else if (kernels == 0)
    WARN("no " FC_LAW_DEVICE " kernel claims law " << id);
}

}  // namespace

#define FC_LAW(id, sentence) \
  TEST_CASE(sentence, FC_LAW_TAG) { check_law(id, sentence); }

FC_LAW("reference", "every output agrees with the certified reference within its error bound")
FC_LAW("extreme", "extreme inputs stay within the bound and finite where the reference is finite")
FC_LAW("fa_rule", "the error is at most twice the same-precision baseline's plus output rounding noise")
FC_LAW("block_size", "block size never changes the answer beyond the bound")
FC_LAW("rows_sum", "with V = 1 every output is 1")
FC_LAW("lse_bracket", "max_j s_ij <= lse_i <= max_j s_ij + log n_k")
FC_LAW("convex_hull", "every output lies within its column's range of V")
FC_LAW("shift", "adding a constant vector to every key changes nothing")
FC_LAW("kv_permutation", "permuting keys and values together changes nothing")
FC_LAW("q_permutation", "permuting queries permutes the outputs")
FC_LAW("affine_v", "O(aV + b) = aO + b")
FC_LAW("invisible_keys", "keys a row cannot see never influence it (bitwise)")
FC_LAW("fully_masked", "fully masked rows give o = 0, lse = -inf and d_q = 0")
FC_LAW("grad_sums", "sum_j d_k_j = 0 and sum_j d_v_j = sum_i d_o_i")
FC_LAW("determinism", "the same inputs give the same bits")
FC_LAW("nan_blast", "a NaN or inf poisons only the rows that read it")
FC_LAW("softmax_row", "the online softmax of a row equals the exact softmax within the shifted-softmax bound")
