// The CLI side of a sweep (audit, audit --accumulation): turning flags into a plan and subjects —
// which kernels (every available one by default; mutants only by name), dtypes, regimes, cases and
// shard — and the replay line every cell carries. The sweep itself is reports/ (fc_report).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "reports/plan.hpp"
#include "reports/subject.hpp"

namespace fc::cli {

// "i/n" with 0 <= i < n; UsageError otherwise. {0, 1} when empty (no sharding).
std::pair<int, int> parse_shard(const std::string& s);
// Dtype names (F16 BF16 F32); UsageError on anything else. Empty: the default three.
std::vector<DType> parse_dtypes(const std::vector<std::string>& names);
// Every name one of `known`; UsageError otherwise.
void check_regimes(const std::vector<std::string>& names, const std::vector<std::string>& known);

// `--kernel NAME ...`; empty: every non-mutant kernel whose device is present (the others skipped,
// with the reason). An unknown name is a UsageError.
report::Selection select_kernels(const std::vector<std::string>& kernels);

// The cases of the sweep: `--case ID ...` (looked up with `find`, in the order given) or `plan`;
// without those no subject claims (a GPU-only case on a machine without a GPU); then the shard's.
// seq is the position in the unsharded plan, so merged shards keep the unsharded order.
using CaseFinder = bool (*)(const std::string& id, report::CaseSpec* out);
std::vector<report::CaseSpec> plan_cases(std::vector<report::CaseSpec> plan, const std::vector<std::string>& case_ids,
                                         CaseFinder find, const std::vector<report::Subject>& subjects,
                                         std::pair<int, int> shard);

// A case by id (UsageError when unknown).
report::CaseSpec case_by_id(const std::string& id, CaseFinder find);

}  // namespace fc::cli
