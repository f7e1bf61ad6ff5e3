// The audit's variant regimes: contract v2's varlen batches with zero-length sequences, paged K/V at
// a few page sizes, sliding windows under both causal alignments, softcap, ALiBi, d_v != d and
// strided layouts; contract v3's attention sinks, padded varlen, boolean and additive mask tensors and
// block masks (full plan only). Each case is fixed by its id (lengths, page table, window, layout,
// sinks, padding, masks); only the values depend on the seed, drawn like every other case's (plan.cpp,
// make_inputs).
#pragma once

#include <vector>

#include "reports/plan.hpp"

namespace fc::report {

// The variant regimes' names, in plan order.
const std::vector<std::string>& variant_regime_names();

// Whether a variant regime is in the full plan only (contract v3's: sinks, padded_varlen, mask_bool,
// mask_additive, block_mask), not in the quick one.
bool full_plan_only(const std::string& regime);
// padded_varlen: where each sequence's tokens start in the packed tensors (keys or queries), batch + 1
// entries, the last the total.
std::vector<int32_t> padded_starts(const CaseSpec& c, bool keys);

// The variant cases of dtype t (quick: the CI sweep's few small ones).
std::vector<CaseSpec> variant_cases(DType t, bool quick);

// The structure of c's inputs, before any value is drawn: cu_seqlens (varlen), the page table
// (paged), ALiBi's slopes, the sinks, the padded offsets, the mask tensor and the block mask (drawn
// from the id). in.p must be c.p.
void add_structure(const CaseSpec& c, Inputs& in);
// After the values: the page slots no sequence reads set to large values (a kernel that reads one is
// far off), padding tokens likewise, and q, k, v, d_o laid out with c.layout's strides.
void finish_layout(const CaseSpec& c, Inputs& in);

}  // namespace fc::report
