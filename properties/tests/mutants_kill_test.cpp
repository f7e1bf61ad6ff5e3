// The suite bites: `flashcheck check`'s default budget (100 cases per law, seed 1) kills every
// registered mutant, while the fault-free form of the mutants' kernel passes every law; and every law
// but `reference` kills a mutant that `reference` does not (its criterion is its own).
#include "tests/catch.hpp"

#include <map>
#include <sstream>

#include "kernels/mutants/faulty_tiled.hpp"
#include "properties/runner.hpp"

namespace {

// The registered mutants: kernels/mutants/mutants.cpp's table, one row per planted fault, and the
// variants' (variant_faulty.cpp: the hostile harness's four, the sinks' three, padded varlen's two, the
// output canaries' two, long paged K/V's two and the masks' seven among them), and merge_mutants.cpp's
// five merge-state mutants and one split-KV mutant.
constexpr int kMutants = 24 + 9 + 8 + 4 + 3 + 6 + 6 + 7;

// The first law that fails on k, or "" when every law holds.
std::string first_failing_law(const fc::Kernel& k, const fc::props::RunOptions& opt) {
  for (const fc::props::Law& law : fc::props::laws()) {
    const fc::props::LawResult r = fc::props::run_law(law, k, opt);
    if (r.applies && !r.ok) return law.id + ": " + r.message;
  }
  return "";
}

bool kills(const std::string& law, const std::string& kernel) {
  const fc::props::LawResult r = fc::props::run_law(*fc::props::find_law(law), *fc::find_kernel(kernel), {});
  INFO(law << " on " << kernel << ": " << r.message);
  return r.applies && !r.ok;
}

}  // namespace

TEST_CASE("check kills every mutant within the default budget", "[cpu][mutants]") {
  const fc::props::RunOptions opt;  // the defaults of `flashcheck check`: 100 cases, seed 1
  int mutants = 0;
  for (const fc::Kernel& k : fc::registry()) {
    if (!k.info.mutant || k.info.device != "cpu") continue;
    ++mutants;
    const std::string killed = first_failing_law(k, opt);
    INFO(k.info.name << " (" << k.info.description << ")");
    CHECK_FALSE(killed.empty());
    if (!killed.empty()) std::cout << k.info.name << " killed by " << killed.substr(0, killed.find('\n')) << "\n";
  }
  CHECK(mutants == kMutants);
}

TEST_CASE("every law but reference kills a mutant that reference does not", "[cpu][mutants]") {
  // One witness per law (the kill matrix, `flashcheck check --kill-matrix`, shows them all).
  const std::map<std::string, std::string> witness = {
      {"extreme", "mutant_exp_early_out"},
      {"block_size", "mutant_tail_rows_prescaled"},
      {"kv_permutation", "mutant_tail_keys_scale"},
      {"q_permutation", "mutant_tail_rows_prescaled"},
      {"lse_bracket", "mutant_additive_mask"},
      {"convex_hull", "mutant_underflow_forgets_l"},
      {"shift", "mutant_tail_keys_scale"},
      {"affine_v", "mutant_acc_round_down"},
      {"invisible_keys", "mutant_additive_mask"},
      {"determinism", "mutant_racy_dq"},
      {"consecutive_calls", "mutant_layout_by_shape"},
      {"nan_blast", "mutant_masked_products"},
      {"softmax_row", "mutant_exp_early_out"},
      // The variant laws' witnesses are within every error bound (reference judges variant problems
      // too, and kills the variants' gross faults): a second code path with other bits, a max shifted
      // by keys the window hides, a tanh that fails only at a huge cap.
      {"varlen_split", "mutant_varlen_wide_exp"},
      {"paged", "mutant_paged_wide_exp"},
      {"strides", "mutant_strided_wide_exp"},
      {"window_mask", "mutant_window_wide_exp"},
      {"window_invisible", "mutant_max_over_tile"},
      {"softcap", "mutant_softcap_tiny_zero"},
      {"alibi_zero", "mutant_alibi_wide_exp"},
      {"zero_length", "mutant_empty_seq_wide_exp"},
      {"sink_neg_inf", "mutant_sink_divides"},
      // Merge states (a merge kernel is not an attention kernel: reference never judges one) and split-KV
      // (only split_invariance runs a split config).
      {"merge_identity", "mutant_merge_sentinel"},
      {"merge_empty", "mutant_merge_nan_empty"},
      {"merge_associativity", "mutant_merge_fp16_weights"},
      {"merge_union", "mutant_merge_lse_transposed"},
      {"split_invariance", "mutant_split_drop_tail"},
      {"padded_varlen", "mutant_padded_wide_exp"},
      {"mask_tensor_builtin", "mutant_mask_divides"},
      {"block_mask_dense", "mutant_block_mask_divides"},
  };
  for (const fc::props::Law& law : fc::props::laws()) {
    // large_offsets and padded_scratch judge device kernels only; their witnesses are CUDA mutants
    // (kernels/cuda/tests/cuda_mutants_test.cpp).
    if (law.id == "reference" || law.needs_large_offsets || law.device_only) continue;
    INFO("law " << law.id);
    REQUIRE(witness.count(law.id));
    const std::string& mutant = witness.at(law.id);
    REQUIRE(fc::find_kernel(mutant) != nullptr);
    CHECK(kills(law.id, mutant));
    CHECK_FALSE(kills("reference", mutant));
  }
}

TEST_CASE("check passes the mutants' kernel without its fault", "[cpu][mutants]") {
  const fc::Kernel clean =
      fc::mutants::make_faulty_kernel(fc::mutants::TiledFault::None, "faulty_tiled_none", "no fault");
  fc::props::RunOptions opt;
  for (uint64_t seed : {1, 2, 3}) {
    opt.seed = seed;
    const std::string failed = first_failing_law(clean, opt);
    INFO("seed " << seed << ": " << failed);
    CHECK(failed.empty());
  }
}
