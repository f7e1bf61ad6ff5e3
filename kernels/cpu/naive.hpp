// Standard 3-pass attention in the kernel's own precision, the same-precision baseline
// (docs/ARCHITECTURE.md, oracle 4): S = scale·QKᵀ (Eigen product accumulated in A) stored rounded to storage,
// row max, P = exp(S - m) stored in storage, l = rowsum(P), O = P·V / l rounded to storage.
// The backward materialises likewise: P = exp(S - lse), dP = d_o Vᵀ and dS = P (dP - D) stored in
// storage, then d_v = Pᵀ d_o, d_q = scale·dS K, d_k = scale·dSᵀ Q accumulated in A.
// Every product runs over a row's visible prefix only, so masked keys never touch a row (a NaN in
// an invisible v_j would otherwise reach it as 0·NaN).
#pragma once

#include <Eigen/Core>
#include <vector>

#include "kernels/cpu/scalar.hpp"
#include "kernels/rules.h"

namespace fc::cpu {

template <class S>
using RowMat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S>
using ConstMap = Eigen::Map<const RowMat<S>>;

// A storage-typed matrix widened to A (exactly, or rounding once when A is narrower).
template <class A, class M>
RowMat<A> widen(const M& x) {
  return x.unaryExpr([](typename M::Scalar e) { return cvt<A>(e); });
}

// S for one head, materialised in storage: (n_q, n_k); invisible entries are -inf.
template <class T, class A>
RowMat<T> naive_scores(const Problem& p, const RowMat<A>& q, const RowMat<A>& k) {
  using L = Soft<A>;
  RowMat<T> s = RowMat<T>::Constant(p.n_q, p.n_k, cvt<T>(rules::neg_inf<L>()));  // (n_q, n_k)
  for (int64_t i = 0; i < p.n_q; ++i) {
    const int64_t vis = n_visible(p.mask, i, p.n_q, p.n_k);
    if (vis == 0) continue;
    Eigen::Matrix<A, 1, Eigen::Dynamic> dots = q.row(i) * k.topRows(vis).transpose();  // (vis)
    for (int64_t j = 0; j < vis; ++j) s(i, j) = cvt<T>(cvt<L>(dots(j)) * L(p.scale));
  }
  return s;
}

template <class T, class A>
void naive_forward(const Problem& p, const T* q, const T* k, const T* v, T* o, double* lse) {
  using L = Soft<A>;
  const Exp exp_fn;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t kv = kv_head(p, int32_t(h));
      const RowMat<A> q_h = widen<A>(ConstMap<T>(q + offset_q(p, b, h, 0), p.n_q, p.d));    // (n_q, d)
      const RowMat<A> k_h = widen<A>(ConstMap<T>(k + offset_kv(p, b, kv, 0), p.n_k, p.d));  // (n_k, d)
      const RowMat<A> v_h = widen<A>(ConstMap<T>(v + offset_kv(p, b, kv, 0), p.n_k, p.d));  // (n_k, d)
      const RowMat<T> s = naive_scores<T, A>(p, q_h, k_h);                                  // (n_q, n_k)
      for (int64_t i = 0; i < p.n_q; ++i) {
        const int64_t vis = n_visible(p.mask, i, p.n_q, p.n_k);
        L m = rules::neg_inf<L>();
        for (int64_t j = 0; j < vis; ++j) m = rules::running_max(m, cvt<L>(s(i, j)));
        const L shift = rules::safe_shift(m);          // -inf - -inf guard for a row with no visible key
        Eigen::Matrix<A, 1, Eigen::Dynamic> p_i(vis);  // (vis) P row, stored in storage, widened
        A l = A(0.0f);
        for (int64_t j = 0; j < vis; ++j) {
          p_i(j) = cvt<A>(cvt<T>(exp_fn(cvt<L>(s(i, j)) - shift)));  // P materialised in storage
          l = l + p_i(j);                                            // the rowsum of the stored P
        }
        Eigen::Matrix<A, 1, Eigen::Dynamic> o_i = Eigen::Matrix<A, 1, Eigen::Dynamic>::Zero(p.d);  // (d)
        if (vis > 0) o_i = p_i * v_h.topRows(vis);
        const L inv = rules::inv_l(cvt<L>(l));  // l = 0 (no visible key): o = 0, not 0/0
        T* o_row = o + offset_q(p, b, h, i);    // (d)
        for (int64_t c = 0; c < p.d; ++c) o_row[c] = cvt<T>(cvt<L>(o_i(c)) * inv);
        lse[offset_lse(p, b, h, i)] = double(rules::finalize_lse(m, cvt<L>(l), Log{}));
      }
    }
}

template <class T, class A>
void naive_backward(const Problem& p, const T* q, const T* k, const T* v, const T* o, const double* lse, const T* d_o,
                    T* d_q, T* d_k, T* d_v) {
  using L = Soft<A>;
  const Exp exp_fn;
  const int64_t group = p.heads_q / p.heads_kv;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t kv = 0; kv < p.heads_kv; ++kv) {
      const RowMat<A> k_h = widen<A>(ConstMap<T>(k + offset_kv(p, b, kv, 0), p.n_k, p.d));  // (n_k, d)
      const RowMat<A> v_h = widen<A>(ConstMap<T>(v + offset_kv(p, b, kv, 0), p.n_k, p.d));  // (n_k, d)
      RowMat<A> dk_acc = RowMat<A>::Zero(p.n_k, p.d);  // (n_k, d) summed over the group's query heads
      RowMat<A> dv_acc = RowMat<A>::Zero(p.n_k, p.d);  // (n_k, d)
      for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
        const RowMat<A> q_h = widen<A>(ConstMap<T>(q + offset_q(p, b, h, 0), p.n_q, p.d));      // (n_q, d)
        const RowMat<A> o_h = widen<A>(ConstMap<T>(o + offset_q(p, b, h, 0), p.n_q, p.d));      // (n_q, d)
        const RowMat<A> d_o_h = widen<A>(ConstMap<T>(d_o + offset_q(p, b, h, 0), p.n_q, p.d));  // (n_q, d)
        const RowMat<T> s = naive_scores<T, A>(p, q_h, k_h);                                    // (n_q, n_k)
        for (int64_t i = 0; i < p.n_q; ++i) {
          const int64_t vis = n_visible(p.mask, i, p.n_q, p.n_k);
          T* d_q_row = d_q + offset_q(p, b, h, i);                                                    // (d)
          Eigen::Matrix<A, 1, Eigen::Dynamic> dq_i = Eigen::Matrix<A, 1, Eigen::Dynamic>::Zero(p.d);  // (d)
          if (vis > 0) {
            const L lse_i = L(lse[offset_lse(p, b, h, i)]);
            const A D = d_o_h.row(i).dot(o_h.row(i));
            Eigen::Matrix<A, 1, Eigen::Dynamic> dp = d_o_h.row(i) * v_h.topRows(vis).transpose();  // (vis)
            Eigen::Matrix<A, 1, Eigen::Dynamic> p_i(vis), ds_i(vis);  // (vis) stored in storage
            for (int64_t j = 0; j < vis; ++j) {
              // P resurrected from lse (0, not NaN, for lse = -inf), then stored in storage.
              const T p_t = cvt<T>(rules::recompute_p(cvt<L>(s(i, j)), lse_i, exp_fn));
              const T dp_t = cvt<T>(dp(j));  // dP materialised in storage
              p_i(j) = cvt<A>(p_t);
              ds_i(j) = cvt<A>(cvt<T>(cvt<L>(p_t) * (cvt<L>(dp_t) - cvt<L>(D))));  // dS in storage
            }
            dv_acc.topRows(vis).noalias() += p_i.transpose() * d_o_h.row(i);
            dk_acc.topRows(vis).noalias() += ds_i.transpose() * q_h.row(i);
            dq_i = ds_i * k_h.topRows(vis);
          }
          for (int64_t c = 0; c < p.d; ++c) d_q_row[c] = cvt<T>(cvt<L>(dq_i(c)) * L(p.scale));
        }
      }
      for (int64_t j = 0; j < p.n_k; ++j) {
        const int64_t off = offset_kv(p, b, kv, j);
        for (int64_t c = 0; c < p.d; ++c) {
          d_k[off + c] = cvt<T>(cvt<L>(dk_acc(j, c)) * L(p.scale));
          d_v[off + c] = cvt<T>(dv_acc(j, c));
        }
      }
    }
}

}  // namespace fc::cpu
