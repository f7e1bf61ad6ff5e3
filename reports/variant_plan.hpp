// The audit's variant regimes (contract v2): varlen batches with zero-length sequences, paged K/V at
// a few page sizes, sliding windows under both causal alignments, softcap, ALiBi, d_v != d and
// strided layouts. Each case is fixed by its id (lengths, page table, window, layout); only the values
// depend on the seed, drawn like every other case's (plan.cpp, make_inputs).
#pragma once

#include <vector>

#include "reports/plan.hpp"

namespace fc::report {

// The variant regimes' names, in plan order.
const std::vector<std::string>& variant_regime_names();

// The variant cases of dtype t (quick: the CI sweep's few small ones).
std::vector<CaseSpec> variant_cases(DType t, bool quick);

// The structure of c's inputs, before any value is drawn: cu_seqlens (varlen), the page table
// (paged), ALiBi's slopes. in.p must be c.p.
void add_structure(const CaseSpec& c, Inputs& in);
// After the values: the page slots no sequence reads set to large values (a kernel that reads one is
// far off), and q, k, v, d_o laid out with c.layout's strides.
void finish_layout(const CaseSpec& c, Inputs& in);

}  // namespace fc::report
