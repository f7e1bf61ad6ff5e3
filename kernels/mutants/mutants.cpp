// The mutant table: realistic FlashAttention bugs, each the fault-parameterised tiled kernel with one
// fault planted (faulty_tiled.hpp). Registered with mutant = true: `flashcheck check` must kill
// every one of them within its default budget (properties/tests/mutants_kill_test.cpp).
#include "kernels/mutants/faulty_tiled.hpp"
#include "kernels/mutants/variant_faulty.hpp"

namespace fc {

void register_mutant_kernels(std::vector<Kernel>& out) {
  using mutants::TiledFault;
  struct TiledMutantRow {
    TiledFault fault;
    const char* name;
    const char* description;
  };
  static const TiledMutantRow rows[] = {
      {TiledFault::NoORescale, "mutant_no_o_rescale", "o not rescaled when the running max grows"},
      {TiledFault::NoLRescale, "mutant_no_l_rescale", "l not rescaled when the running max grows"},
      {TiledFault::OtherCausal, "mutant_other_causal", "top-left and bottom-right causal alignment swapped"},
      {TiledFault::NoMaxSub, "mutant_no_max_sub", "exp(s) without subtracting the running max"},
      {TiledFault::DropLastPartialTile, "mutant_drop_last_tile", "the last partial KV tile is dropped"},
      {TiledFault::LseFirstTileMax, "mutant_lse_first_max", "lse from the first tile's max only"},
      {TiledFault::Fp16RunningSum, "mutant_fp16_sum", "running sum l accumulated in fp16"},
      {TiledFault::ScaleTwice, "mutant_scale_twice", "scale applied twice to the scores"},
      {TiledFault::DFromV, "mutant_d_from_v", "backward D_i = d_o_i . v_i instead of d_o_i . o_i"},
      {TiledFault::DkNoScale, "mutant_dk_no_scale", "d_k without the scale"},
      {TiledFault::MaskedRowNaN, "mutant_masked_row_nan", "fully masked row gives 0/0 = NaN"},
      {TiledFault::GqaModulo, "mutant_gqa_modulo", "GQA head mapping h % heads_kv"},
      {TiledFault::PBf16, "mutant_p_bf16", "P rounded to bf16 instead of the storage type before P.V"},
      {TiledFault::MaskedProducts, "mutant_masked_products",
       "backward multiplies a tile's masked pairs through with P = 0: 0 * inf reaches rows that cannot see the key"},
      {TiledFault::TailRowsPrescaled, "mutant_tail_rows_prescaled",
       "the last partial query tile scales q before the dot product: a row's bits depend on its position"},
      {TiledFault::MaxInStorage, "mutant_max_in_storage", "the running max kept in the storage type"},
      {TiledFault::TailKeysScale, "mutant_tail_keys_scale",
       "the last partial key tile's scores use a scale one ulp off (an approximate rsqrt in the boundary path)"},
      {TiledFault::AccRoundDown, "mutant_acc_round_down",
       "the P.V accumulator adds with rounding toward -inf (a directed-rounding intrinsic where nearest was meant)"},
      {TiledFault::FastLog, "mutant_fast_log",
       "lse from a fast log biased by -2^-22 near 1: lse dips below the row max"},
      {TiledFault::UnderflowForgetsL, "mutant_underflow_forgets_l",
       "when the rescale factor underflows to 0, o is reset but l keeps the old sum"},
      {TiledFault::RacyDq, "mutant_racy_dq",
       "d_q's key-tile partial sums added in arrival order, run to run, even in the deterministic config"},
      {TiledFault::AdditiveMask, "mutant_additive_mask",
       "masked keys of a row's last key tile kept with score s - 10^4 (an additive mask) instead of skipped"},
      {TiledFault::ExpEarlyOut, "mutant_exp_early_out",
       "exp(x) taken as 0 for x < -60 (an early-out for negligible weights)"},
      {TiledFault::AccToStorage, "mutant_acc_to_storage",
       "the unnormalised o converted to the storage type before the division by l"},
  };
  for (const TiledMutantRow& r : rows) out.push_back(mutants::make_faulty_kernel(r.fault, r.name, r.description));
  mutants::register_variant_mutants(out);  // the variants' bugs (variant_faulty.hpp)
  mutants::register_merge_mutants(out);    // merge states and split-KV (merge_mutants.cpp)
}

}  // namespace fc
