// The error bound of a merge-state kernel (docs/error-model.md, "Merge states"): any kernel that merges
// in fp32 (or wider) with the largest lse subtracted, exp and log within 4 ulp of fp32 (exp2 / log2 on
// log2 e-scaled arguments included), sums over the partials in any order, FTZ allowed, o rounded once
// to storage. The certified merge's own error is included: a kernel passes iff
// |kernel - certified value| <= bound everywhere (within_bound).
#pragma once

#include "contract/attention.h"
#include "reference/merge.hpp"

namespace fc::ref {

struct MergeBounds {
  std::vector<double> o, lse;  // shaped like MergeResult64
};

MergeBounds merge_bounds(const Merge64& in, const CertifiedMerge& c, DType storage);

}  // namespace fc::ref
