// Scalar rules of the online softmax <m, l, o>, shared by the CPU emulation and the CUDA kernels so
// that both make the same decisions on the same edge cases. Host and device; no storage types.
//
// A row's state after seeing some keys: m = running max of the (scaled) scores, l = sum of
// exp(s - m), o = sum of exp(s - m) * v (unnormalised). Before any visible key: m = -inf, l = 0, o = 0.
#pragma once

#include "attention.h"

namespace fc::rules {

template <class T>
FC_HD constexpr T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

// The running max. Written as a select rather than fmax so that the same expression can be used for
// the max and for the shifted score, making s - m exactly 0 at the max.
template <class T>
FC_HD inline T running_max(T m, T s) {
  return s > m ? s : m;
}

// The value subtracted from the scores before exponentiation. While no finite score has been seen,
// m = -inf and s - m would be -inf - -inf = NaN; shifting by 0 instead gives exp(-inf) = 0.
template <class T>
FC_HD inline T safe_shift(T m) {
  return m == neg_inf<T>() ? T(0) : m;
}

// Factor that re-denominates l and o from the old max to the new one: exp(m_old - m_new).
// m_old = -inf means nothing was accumulated yet (l = o = 0): the factor is 0, never NaN, even when
// m_new is still -inf. Exp is the exponential in use (exp, or exp2 on log2-scaled maxima).
template <class T, class Exp>
FC_HD inline T rescale(T m_old, T m_new, Exp exp_fn) {
  return m_old == neg_inf<T>() ? T(0) : exp_fn(m_old - m_new);
}

// Final normalisation of one row. l == 0 means no key was visible (or every weight underflowed to
// 0 against its own max, which cannot happen since the max itself contributes exp(0) = 1): the
// contract says o = 0, lse = -inf. Otherwise o /= l and lse = m + log(l).
template <class T>
FC_HD inline T inv_l(T l) {
  return l == T(0) ? T(0) : T(1) / l;
}

template <class T, class Log>
FC_HD inline T finalize_lse(T m, T l, Log log_fn) {
  return l == T(0) ? neg_inf<T>() : m + log_fn(l);
}

// Probability recomputed in the backward pass from the saved lse: P = exp(s - lse). A row with
// lse = -inf saw no key; its P is 0 (not exp(-inf - -inf) = NaN). P <= 1 exactly, but the backward
// recomputes s in another order than the forward that produced lse: at huge scores (|s| ~ 1e29 in
// fp32) s - lse can come out as +1e22 and exp overflows to inf, then inf * 0 = NaN in the gradients.
// The argument is clamped at 0 (P = 1), written so that a NaN argument stays NaN.
template <class T, class Exp>
FC_HD inline T recompute_p(T s, T lse, Exp exp_fn) {
  if (lse == neg_inf<T>()) return T(0);
  const T x = s - lse;
  return exp_fn(x > T(0) ? T(0) : x);
}

// Attention sinks (contract v3): after a row's last key tile, its head's sink logit joins the state
// <m, l, o> as one more key of weight exp(sink - m) and no value: m <- max(m, sink), l <- l alpha +
// exp(sink - m_new), and the caller multiplies o by the returned alpha = exp(m_old - m_new) (1 when
// the sink does not move the max; 0 when nothing was accumulated). A sink at -inf has weight exactly 0
// and changes nothing (alpha = 1, the state as it was). A row that saw no key gets m = sink, l = 1:
// o = 0 and lse = sink.
template <class T, class Exp>
FC_HD inline T merge_sink(T& m, T& l, T sink, Exp exp_fn) {
  if (sink == neg_inf<T>()) return T(1);
  const T m_new = running_max(m, sink);
  const T alpha = rescale(m, m_new, exp_fn);
  l = l * alpha + exp_fn(sink - m_new);
  m = m_new;
  return alpha;
}

// Split-KV: a partial state <m_b, l_b, o_b> (the same row over another key range) merged into <m, l, o>:
// m <- max(m, m_b), l <- a l + b l_b, and the caller sets o <- a o + b o_b with the returned factors
// a = exp(m - m_new), b = exp(m_b - m_new). An empty side (its m still -inf) has factor 0, never NaN,
// also when both are empty (the state stays empty).
template <class T>
struct MergeFactors {
  T a, b;
};
template <class T, class Exp>
FC_HD inline MergeFactors<T> merge_partial(T& m, T& l, T m_b, T l_b, Exp exp_fn) {
  const T m_new = running_max(m, m_b);
  const MergeFactors<T> f{rescale(m, m_new, exp_fn), rescale(m_b, m_new, exp_fn)};
  l = f.a * l + f.b * l_b;
  m = m_new;
  return f;
}

// Merge states (o_p, lse_p) (contract/merge.hpp): the weight of a partial is exp(lse_p - M) with M the
// largest lse_p of the row; a partial at lse_p = -inf weighs 0, and when M = -inf (every partial empty)
// every weight is 0, never exp(-inf - -inf) = NaN: the caller then writes o = 0, lse = -inf.
template <class T, class Exp>
FC_HD inline T merge_weight(T lse_p, T m, Exp exp_fn) {
  return lse_p == neg_inf<T>() ? T(0) : exp_fn(lse_p - m);
}
// The merged lse from M and the sum of the weights (0 for an empty row).
template <class T, class Log>
FC_HD inline T merged_lse(T m, T sum, Log log_fn) {
  return sum == T(0) ? neg_inf<T>() : m + log_fn(sum);
}

// ---- Schedule arithmetic of the tiled kernels: which tiles a walk visits ----

// log2(e) and ln(2): the CUDA kernels keep scores in base-2 units, so that every exponential is one
// exp2 on the special-function unit (scale * log2(e) folded into the score once).
inline constexpr double kLog2e = 1.4426950408889634;
inline constexpr double kLn2 = 0.6931471805599453;

// The bottom-right causal alignment: query i's last visible key is i + (n_k - n_q) (attention.h); 0
// under the other masks.
FC_HD inline int64_t causal_offset(Mask mask, int64_t n_q, int64_t n_k) {
  return mask == Mask::CausalBottomRight ? n_k - n_q : 0;
}

// Keys [0, key_tile_end) are visible to some row of the query tile [m0, m0 + block_m) (its last row
// sees the most); key tiles from there on are skipped. Can be <= 0: no key at all.
FC_HD inline int64_t key_tile_end(Mask mask, int n_q, int n_k, int m0, int block_m) {
  int64_t n_end = n_k;
  if (mask != Mask::None) {
    const int64_t last = int64_t(m0) + block_m + causal_offset(mask, n_q, n_k);
    n_end = last < n_end ? last : n_end;
  }
  return n_end;
}

// The number of block_n-key tiles a query tile [m0, m0 + block_m) walks.
FC_HD inline int key_tile_count(Mask mask, int n_q, int n_k, int m0, int block_m, int block_n) {
  const int64_t n_end = key_tile_end(mask, n_q, n_k, m0, block_m);
  return n_end <= 0 ? 0 : int((n_end + block_n - 1) / block_n);
}

// Whether the key tile [n0, n0 + block_n) holds a key past n_k or one that some row of a query tile
// starting at row m0 cannot see (its first row sees the fewest): only such tiles need the mask.
FC_HD inline bool key_tile_straddles(Mask mask, int n_q, int n_k, int m0, int n0, int block_n) {
  return n0 + block_n > n_k || (mask != Mask::None && int64_t(n0) + block_n - 1 > m0 + causal_offset(mask, n_q, n_k));
}

// The first block_m-row query tile with a row that sees key j (rows before j - offset see none of a
// causal mask's later keys); a key-tile walk starts there.
FC_HD inline int64_t first_query_tile(Mask mask, int n_q, int n_k, int64_t j, int block_m) {
  if (mask == Mask::None) return 0;
  const int64_t first_row = j - causal_offset(mask, n_q, n_k);
  return first_row > 0 ? first_row / block_m : 0;
}

}  // namespace fc::rules
