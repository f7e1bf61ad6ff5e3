// The references' own reading of the three masks, written from the definitions in docs/SEMANTICS.md and
// deliberately not calling fc::visible (the references share nothing with kernels/ but the types);
// visibility_test checks the two agree.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace fc::ref {

// Does query i see key j?  causal_top_left: key index at most the query index.
// causal_bottom_right: the diagonal is anchored at the last query, which sees all n_k keys, so
// query i sees keys up to (n_k - n_q) + i.
inline bool sees(Mask mask, int64_t i, int64_t j, int64_t n_q, int64_t n_k) {
  if (mask == Mask::CausalTopLeft) return j - i <= 0;
  if (mask == Mask::CausalBottomRight) return (n_q - 1 - i) + j <= n_k - 1;
  return true;
}

}  // namespace fc::ref
