// Mutants whose fault shows only on some runs or some memory (a race, a read of bytes the kernel
// must not read, a write past an output, state kept across calls) are killed at every one of 20
// seeds by the law aimed at them, a law of the default `check`: a kill that depends on the seed is a
// law that does not bite.
#include "tests/catch.hpp"

#include "properties/runner.hpp"

namespace {

void killed_at_twenty_seeds(const char* law, const char* mutant) {
  const fc::Kernel* k = fc::find_kernel(mutant);
  REQUIRE(k != nullptr);
  REQUIRE(k->info.mutant);
  const fc::props::Law* l = fc::props::find_law(law);
  REQUIRE(l != nullptr);
  fc::props::RunOptions opt;  // `check`'s defaults but the seed
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    opt.seed = seed;
    const fc::props::LawResult r = fc::props::run_law(*l, *k, opt);
    INFO(law << " on " << mutant << ", seed " << seed << ": " << r.message);
    CHECK(r.applies);
    CHECK_FALSE(r.ok);
  }
}

}  // namespace

TEST_CASE("determinism kills mutant_racy_dq at every one of 20 seeds", "[cpu][mutants]") {
  // Its d_q tiles arrive in an order that alternates row by row across calls: two back-to-back runs
  // of an even number of rows agree, so the law also runs the case after a call on another problem.
  killed_at_twenty_seeds("determinism", "mutant_racy_dq");
}

TEST_CASE("the hostile harness's mutants are killed at every one of 20 seeds", "[cpu][mutants]") {
  // NaN in the bytes a kernel must not read (kernels/hostile.hpp): a strided view's gaps, the tail of a
  // sequence's last page.
  killed_at_twenty_seeds("strides", "mutant_reads_stride_gap");
  killed_at_twenty_seeds("reference", "mutant_reads_stride_gap");
  killed_at_twenty_seeds("paged", "mutant_reads_page_tail");
  killed_at_twenty_seeds("reference", "mutant_reads_page_tail");
  // State kept across calls (properties/laws_hostile.cpp).
  killed_at_twenty_seeds("consecutive_calls", "mutant_layout_by_shape");
  killed_at_twenty_seeds("consecutive_calls", "mutant_stale_row_sums");
  killed_at_twenty_seeds("determinism", "mutant_stale_row_sums");
}

TEST_CASE("the merge-state and split-KV mutants are killed at every one of 20 seeds", "[cpu][mutants]") {
  // Each by the law aimed at it (docs/laws.md, the bug classes of merge states and split-KV).
  killed_at_twenty_seeds("merge_empty", "mutant_merge_nan_empty");
  killed_at_twenty_seeds("merge_union", "mutant_merge_lse_transposed");
  killed_at_twenty_seeds("merge_union", "mutant_merge_no_max");
  killed_at_twenty_seeds("merge_associativity", "mutant_merge_no_max");
  killed_at_twenty_seeds("merge_union", "mutant_merge_fp16_weights");
  killed_at_twenty_seeds("merge_associativity", "mutant_merge_fp16_weights");
  killed_at_twenty_seeds("merge_identity", "mutant_merge_sentinel");
  killed_at_twenty_seeds("split_invariance", "mutant_split_drop_tail");
}

TEST_CASE("padded varlen's and the output canaries' mutants are killed at every one of 20 seeds", "[cpu][mutants]") {
  // Tokens located by cu_seqlens instead of the padded offsets: the law of padded varlen, and reference
  // on the share of its cases that draws padded offsets (properties/variant_mix.cpp).
  killed_at_twenty_seeds("padded_varlen", "mutant_padded_reads_cu");
  killed_at_twenty_seeds("reference", "mutant_padded_reads_cu");
  // One element written past o's end: the canary after o (kernels/hostile.hpp) on every case; -inf in the
  // gaps of a padded lse (a kernel that declares strides gets its outputs with a gap after every row).
  killed_at_twenty_seeds("reference", "mutant_writes_past_o");
  killed_at_twenty_seeds("reference", "mutant_writes_lse_gap");
}

TEST_CASE("the long paged mutants are killed at every one of 20 seeds", "[cpu][mutants]") {
  // Physical pages >= 2^15 (to_long_paged, a quarter of the paged law's cases, half of them that high).
  killed_at_twenty_seeds("paged", "mutant_page_index_int16");
  // A table staged 16 entries at a time: sequences of more than 16 pages (every long paged draw with
  // room for them, and short pages of the ordinary draw).
  killed_at_twenty_seeds("paged", "mutant_page_table_16");
}

TEST_CASE("the mask tensors' and block masks' mutants are killed at every one of 20 seeds", "[cpu][mutants]") {
  // Gross faults, by reference on the variant problems it draws (variant_mix.cpp: a mask tensor in
  // three draws of four, F32 in half the additive ones, per-head masks in half, fully masked rows).
  killed_at_twenty_seeds("reference", "mutant_mask_f32_as_f16");
  killed_at_twenty_seeds("reference", "mutant_mask_bool_inverted");
  killed_at_twenty_seeds("reference", "mutant_mask_hidden_row_nan");
  // The transposed block index by the block mask against its dense mask (reference draws a block mask
  // in one variant problem of four, not always asymmetric); faults within every bound by the bitwise laws.
  killed_at_twenty_seeds("block_mask_dense", "mutant_block_mask_transposed");
  // A per-head mask read as shared: by the block mask's dense twin (per-head in half the draws) at
  // every seed; reference's random cases miss it at seed 19 (a regression file there kills it).
  killed_at_twenty_seeds("block_mask_dense", "mutant_mask_head_stride");
  killed_at_twenty_seeds("mask_tensor_builtin", "mutant_mask_divides");
  killed_at_twenty_seeds("block_mask_dense", "mutant_block_mask_divides");
}
