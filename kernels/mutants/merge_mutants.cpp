// The merge-state and split-KV mutants: the shipped bugs of FlashInfer's merge_state(s) and
// FlashAttention's split-KV combine, each cpu_merge (kernels/cpu/merge.hpp) or cpu_tiled with one fault.
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/merge.hpp"
#include "kernels/mutants/variant_faulty.hpp"

namespace fc::mutants {

namespace {

template <cpu::MergeFault F>
Kernel merge_mutant(const char* name, const char* description) {
  Kernel k;
  k.info = cpu::merge_info(name, description);
  k.info.mutant = true;
  k.merge = [](const MergeInputs& in, MergeOutputs& out) { cpu::merge_states<F>(in, out); };
  return k;
}

}  // namespace

void register_merge_mutants(std::vector<Kernel>& out) {
  using F = cpu::MergeFault;
  out.push_back(merge_mutant<F::NanOnEmpty>(
      "mutant_merge_nan_empty",
      "merge states without the empty-row guard: exp(-inf - -inf) = NaN when every partial is empty"));
  out.push_back(merge_mutant<F::LseTransposed>(
      "mutant_merge_lse_transposed",
      "merge states reading lse as (partials, rows, heads): heads and rows swapped (GQA decode)"));
  out.push_back(merge_mutant<F::NoMaxSub>("mutant_merge_no_max",
                                          "merge states weighting by exp(lse_p) without subtracting the largest lse"));
  out.push_back(merge_mutant<F::Fp16Weights>("mutant_merge_fp16_weights",
                                             "merge states with each partial's weight exp(lse_p - M) rounded to fp16"));
  out.push_back(merge_mutant<F::FiniteSentinel>(
      "mutant_merge_sentinel", "merge states reading an empty partial's lse as -5e4 (a finite -inf sentinel)"));
  // Split-KV: cpu_tiled with the sequence's final partial key tile dropped under splits >= 2.
  for (const Kernel& k : out)
    if (k.info.name == "cpu_tiled") {
      Kernel m = k;
      m.info.name = "mutant_split_drop_tail";
      m.info.mutant = true;
      m.info.description = "split-KV drops the sequence's final key tile when it is partial (splits >= 2 only)";
      m.forward = [](const Inputs& in, const Config& c, Outputs& o) { cpu::tiled_forward_split_drop_tail(in, c, o); };
      out.push_back(std::move(m));
      break;
    }
}

}  // namespace fc::mutants
