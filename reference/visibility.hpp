// The references' own reading of the masks and the sliding window, written from the definitions in
// docs/SEMANTICS.md and deliberately not calling fc::visible / fc::visible_keys (the references share
// nothing with kernels/ but the types); visibility tests check the two agree.
#pragma once

#include <cstdint>

#include "contract/attention.h"

namespace fc::ref {

// Does query i see key j (dense, no window)?  causal_top_left: key index at most the query index.
// causal_bottom_right: the diagonal is anchored at the last query, which sees all n_k keys, so
// query i sees keys up to (n_k - n_q) + i.
inline bool sees(Mask mask, int64_t i, int64_t j, int64_t n_q, int64_t n_k) {
  if (mask == Mask::CausalTopLeft) return j - i <= 0;
  if (mask == Mask::CausalBottomRight) return (n_q - 1 - i) + j <= n_k - 1;
  return true;
}

// The row query i is aligned with: under top-left causal the query index itself; otherwise (bottom-
// right causal, and no mask, FlashAttention's convention) the last query is aligned with the last key.
inline int64_t aligned(Mask mask, int64_t i, int64_t n_q, int64_t n_k) {
  return mask == Mask::CausalTopLeft ? i : (n_k - 1) - (n_q - 1 - i);
}

// With the window: key j (0 <= j < n_k) is seen iff the mask allows it and it lies within `left`
// keys before and `right` keys after the aligned row (-1: no limit on that side).
inline bool sees(const Problem& p, int64_t i, int64_t j, int64_t n_q, int64_t n_k) {
  if (j < 0 || j >= n_k || !sees(p.mask, i, j, n_q, n_k)) return false;
  const int64_t a = aligned(p.mask, i, n_q, n_k);
  if (p.window_left >= 0 && a - j > p.window_left) return false;
  if (p.window_right >= 0 && j - a > p.window_right) return false;
  return true;
}

}  // namespace fc::ref
