// Standard 3-pass attention in the kernel's own precision, the same-precision baseline
// (docs/architecture.md, oracle 4): S = scale·QKᵀ (Eigen product accumulated in A) stored rounded to storage,
// row max, P = exp(S - m) stored in storage, l = rowsum(P), O = P·V / l rounded to storage.
// The backward materialises likewise: P = exp(S - lse), dP = d_o Vᵀ and dS = P (dP - D) stored in
// storage, then d_v = Pᵀ d_o, d_q = scale·dS K, d_k = scale·dSᵀ Q accumulated in A.
// Every product runs over a row's visible range only, so masked keys never touch a row (a NaN in
// an invisible v_j would otherwise reach it as 0·NaN).
// Threads (reference/parallel.hpp): rows are independent but for the d_k, d_v sums over them, so row
// blocks run side by side and those sums run row by row in order, key blocks side by side. Every
// element is computed by the same operations in the same order on any number of threads.
#pragma once

#include <algorithm>

#include <Eigen/Core>
#include <limits>
#include <vector>

#include "kernels/cpu/layout.hpp"
#include "kernels/cpu/scalar.hpp"
#include "contract/rules.h"
#include "reference/parallel.hpp"

namespace fc::cpu {

template <class S>
using RowMat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S>
using ConstMap = Eigen::Map<const RowMat<S>>;

// One (sequence, query head), gathered compact and widened to A: q (n_q, d), k (n_k, d), v (n_k, d_v).
template <class A>
struct NaiveHead {
  RowMat<A> q, k, v;
  int64_t n_q, n_k;
  Problem p;
  double slope;                                            // ALiBi slope of the head (0: none)
  double sink = -std::numeric_limits<double>::infinity();  // sink logit of the head (-inf: none)
  const Inputs* in = nullptr;                              // mask tensors, block masks (contract v3)
  int64_t b = 0, h = 0;
  double bias(int64_t i, int64_t j) const { return per_key_mask(p) ? in->key_bias(b, h, i, j) : 0.0; }
  bool hidden(int64_t i, int64_t j) const { return bias(i, j) == -std::numeric_limits<double>::infinity(); }
};

// Rows per task of the row loops, keys per task of the d_k, d_v sums; a head below kSerialWork (rows x
// keys x head dims) runs on the calling thread: too small to pay for starting threads.
constexpr int64_t kRowTask = 16, kKeyTask = 1024;
constexpr double kSerialWork = double(1 << 18);

template <class A, class T>
RowMat<A> gathered(const HostTensor& t, int64_t n, int64_t w, const auto& row) {
  RowMat<A> out(n, w);  // (n, w)
  for (int64_t i = 0; i < n; ++i) read_row<A, T>(t, row(i), w, out.data() + i * w);
  return out;
}

template <class A, class T>
NaiveHead<A> naive_head(const Inputs& in, int64_t b, int64_t h) {
  const Problem& p = in.p;
  const Seqs seqs = in.seqs();
  const int64_t kv = kv_head(p, int32_t(h)), n_q = seq_n_q(p, seqs, b), n_k = seq_n_k(p, seqs, b);
  auto q_rows = [&](int64_t i) { return q_row(p, seqs, b, h, i); };
  auto kv_rows = [&](int64_t j) { return kv_row(p, seqs, b, kv, j); };
  return {gathered<A, T>(in.q, n_q, p.d, q_rows),
          gathered<A, T>(in.k, n_k, p.d, kv_rows),
          gathered<A, T>(in.v, n_k, head_dim_v(p), kv_rows),
          n_q,
          n_k,
          p,
          in.slope(h),
          in.sink(h),
          &in,
          b,
          h};
}

// S for one head, materialised in storage: (n_q, n_k); invisible entries are -inf. As an eager
// framework computes it, each step is its own stored tensor: S = scale·QKᵀ, then softcap
// c·tanh(S/c), then S - ALiBi bias, each rounded to storage. raw (when given) keeps scale·QKᵀ as
// stored, for the backward's softcap derivative.
template <class T, class A>
RowMat<T> naive_scores(const NaiveHead<A>& hd, RowMat<T>* raw = nullptr) {
  using L = Soft<A>;
  const Problem& p = hd.p;
  RowMat<T> s = RowMat<T>::Constant(hd.n_q, hd.n_k, cvt<T>(rules::neg_inf<L>()));  // (n_q, n_k)
  if (raw) *raw = s;
  ref::parallel_rows(hd.n_q, kRowTask, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const KeyRange vis = visible_keys(p, i, hd.n_q, hd.n_k);
      if (vis.end == vis.begin) continue;
      Eigen::Matrix<A, 1, Eigen::Dynamic> dots =
          hd.q.row(i) * hd.k.middleRows(vis.begin, vis.end - vis.begin).transpose();  // (visible keys)
      for (int64_t j = vis.begin; j < vis.end; ++j) {
        T x = cvt<T>(cvt<L>(dots(j - vis.begin)) * L(p.scale));
        if (raw) (*raw)(i, j) = x;
        if (p.softcap > 0) x = cvt<T>(softcapped(cvt<L>(x), L(p.softcap), Tanh{}));
        if (p.alibi) x = cvt<T>(cvt<L>(x) - L(hd.slope) * L(alibi_distance(p.mask, i, j, hd.n_q, hd.n_k)));
        if (per_key_mask(p)) {  // a hidden key stays -inf; an additive value joins last, stored again
          const double bias = hd.bias(i, j);
          if (bias == -std::numeric_limits<double>::infinity()) continue;
          if (p.mask_kind == MaskKind::Additive) x = cvt<T>(cvt<L>(x) + L(bias));
        }
        s(i, j) = x;
      }
    }
  });
  return s;
}

// The forward of one (sequence, query head): writes only that head's rows of o and lse.
template <class T, class A>
void naive_forward_head(const Inputs& in, Outputs& out, int64_t b, int64_t h) {
  using L = Soft<A>;
  const Exp exp_fn;
  const Problem& p = in.p;
  const Seqs seqs = in.seqs();
  const int64_t dv = head_dim_v(p);
  const NaiveHead<A> hd = naive_head<A, T>(in, b, h);
  const ref::SerialScope small(double(hd.n_q) * double(hd.n_k) * double(p.d + dv) < kSerialWork);
  const RowMat<T> s = naive_scores<T, A>(hd);  // (n_q, n_k)
  ref::parallel_rows(hd.n_q, kRowTask, [&](int64_t i0, int64_t i1) {
    std::vector<T> o_row(static_cast<size_t>(dv));  // (d_v)
    for (int64_t i = i0; i < i1; ++i) {
      const KeyRange vis = visible_keys(p, i, hd.n_q, hd.n_k);
      const int64_t n_vis = vis.end - vis.begin;
      L m = rules::neg_inf<L>();
      for (int64_t j = vis.begin; j < vis.end; ++j) m = rules::running_max(m, cvt<L>(s(i, j)));
      const L sink = L(hd.sink);                       // -inf without sinks
      m = rules::running_max(m, sink);                 // the sink is one more logit of the row's max
      const L shift = rules::safe_shift(m);            // -inf - -inf guard for a row with no visible key
      Eigen::Matrix<A, 1, Eigen::Dynamic> p_i(n_vis);  // (visible keys) P row, stored in storage, widened
      A l = A(0.0f);
      for (int64_t j = 0; j < n_vis; ++j) {
        p_i(j) = cvt<A>(cvt<T>(exp_fn(cvt<L>(s(i, vis.begin + j)) - shift)));  // P materialised in storage
        l = l + p_i(j);                                                        // the rowsum of the stored P
      }
      // The sink's weight joins the rowsum (stored in storage like P); it has no value. At -inf: 0.
      if (sink != rules::neg_inf<L>()) l = l + cvt<A>(cvt<T>(exp_fn(sink - shift)));
      Eigen::Matrix<A, 1, Eigen::Dynamic> o_i = Eigen::Matrix<A, 1, Eigen::Dynamic>::Zero(dv);  // (d_v)
      if (n_vis > 0 && !per_key_mask(p)) o_i = p_i * hd.v.middleRows(vis.begin, n_vis);
      for (int64_t j = 0; j < n_vis && per_key_mask(p); ++j)  // hidden keys' v is not read
        if (!hd.hidden(i, vis.begin + j)) o_i += p_i(j) * hd.v.row(vis.begin + j);
      const L inv = rules::inv_l(cvt<L>(l));  // l = 0 (no visible key): o = 0, not 0/0
      for (int64_t c = 0; c < dv; ++c) o_row[size_t(c)] = cvt<T>(cvt<L>(o_i(c)) * inv);
      write_row<T>(out.o, q_row(p, seqs, b, h, i), dv, o_row.data());
      out.lse.set(lse_index(p, seqs, b, h, i), double(rules::finalize_lse(m, cvt<L>(l), Log{})));
    }
  });
}

template <class T, class A>
void naive_forward(const Inputs& in, Outputs& out) {
  for (int64_t b = 0; b < in.p.batch; ++b)
    for (int64_t h = 0; h < in.p.heads_q; ++h) naive_forward_head<T, A>(in, out, b, h);
}

// The backward of one (sequence, kv head): its group's rows of d_q, and its rows of d_k, d_v through
// kv_out (paged: added into kv_out's sums, which only this kv head's rows touch).
template <class T, class A>
void naive_backward_kv(const Inputs& in, Outputs& out, KvGrads<T, Soft<A>>& kv_out, int64_t b, int64_t kv) {
  using L = Soft<A>;
  using RowVec = Eigen::Matrix<A, 1, Eigen::Dynamic>;
  const Exp exp_fn;
  const Problem& p = in.p;
  const Seqs seqs = in.seqs();
  const int64_t group = p.heads_q / p.heads_kv, d = p.d, dv = head_dim_v(p);
  std::vector<L> dk_row(static_cast<size_t>(d)), dv_row(static_cast<size_t>(dv));  // (d), (d_v)
  const int64_t n_q = seq_n_q(p, seqs, b), n_k = seq_n_k(p, seqs, b);
  const ref::SerialScope small(double(n_q) * double(n_k) * double(d + dv) < kSerialWork);
  RowMat<A> dk_acc = RowMat<A>::Zero(n_k, d);   // (n_k, d) summed over the group's query heads
  RowMat<A> dv_acc = RowMat<A>::Zero(n_k, dv);  // (n_k, d_v)
  // A block of rows keeps each row's stored P and dS over its visible keys: 2^21 elements of each
  // (16 rows at least, 256 at most).
  const int64_t block = std::clamp<int64_t>((int64_t(1) << 21) / std::max<int64_t>(n_k, 1), kRowTask, 256);
  std::vector<RowVec> p_rows(static_cast<size_t>(block)), ds_rows(static_cast<size_t>(block));  // (visible keys) each
  std::vector<KeyRange> vis_rows(static_cast<size_t>(block));
  for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
    const NaiveHead<A> hd = naive_head<A, T>(in, b, h);
    auto rows = [&](int64_t i) { return q_row(p, seqs, b, h, i); };
    const RowMat<A> o_h = gathered<A, T>(out.o, n_q, dv, rows);     // (n_q, d_v)
    const RowMat<A> d_o_h = gathered<A, T>(in.d_o, n_q, dv, rows);  // (n_q, d_v)
    RowMat<T> raw;                                                  // (n_q, n_k) scale·QKᵀ as stored
    const RowMat<T> s = naive_scores<T, A>(hd, &raw);               // (n_q, n_k)
    for (int64_t b0 = 0; b0 < n_q; b0 += block) {
      const int64_t b1 = std::min(n_q, b0 + block);
      // Each row's P, dS (kept for the sums below) and d_q: rows side by side.
      ref::parallel_rows(b1 - b0, kRowTask, [&](int64_t r0, int64_t r1) {
        std::vector<T> row(static_cast<size_t>(d));  // (d) one d_q row in storage
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t i = b0 + r;
          const KeyRange vis = visible_keys(p, i, n_q, n_k);
          const int64_t n_vis = vis.end - vis.begin;
          vis_rows[size_t(r)] = vis;
          RowVec dq_i = RowVec::Zero(d);  // (d)
          if (n_vis > 0) {
            const L lse_i = L(out.lse.get(lse_index(p, seqs, b, h, i)));
            const A D = d_o_h.row(i).dot(o_h.row(i));
            RowVec dp = d_o_h.row(i) * hd.v.middleRows(vis.begin, n_vis).transpose();  // (visible keys)
            RowVec& p_i = p_rows[size_t(r)];  // (visible keys) stored in storage
            RowVec& ds_i = ds_rows[size_t(r)];
            p_i.resize(n_vis), ds_i.resize(n_vis);
            for (int64_t j = 0; j < n_vis; ++j) {
              // P resurrected from lse (0, not NaN, for lse = -inf), then stored in storage.
              const T p_t = cvt<T>(rules::recompute_p(cvt<L>(s(i, vis.begin + j)), lse_i, exp_fn));
              const T dp_t = cvt<T>(dp(j));  // dP materialised in storage
              p_i(j) = cvt<A>(p_t);
              T ds_t = cvt<T>(cvt<L>(p_t) * (cvt<L>(dp_t) - cvt<L>(D)));  // dS in storage
              if (p.softcap > 0) {  // times 1 - tanh²(S/c), the softcap's derivative, stored again
                const L t = Tanh{}(cvt<L>(raw(i, vis.begin + j)) / L(p.softcap));
                ds_t = cvt<T>(cvt<L>(ds_t) * (L(1) - t * t));
              }
              ds_i(j) = cvt<A>(ds_t);
              if (per_key_mask(p) && hd.hidden(i, vis.begin + j)) p_i(j) = ds_i(j) = A(0.0f);  // no term
            }
            if (!per_key_mask(p)) dq_i = ds_i * hd.k.middleRows(vis.begin, n_vis);
            for (int64_t j = 0; j < n_vis && per_key_mask(p); ++j)  // hidden keys' k is not read
              if (!hd.hidden(i, vis.begin + j)) dq_i += ds_i(j) * hd.k.row(vis.begin + j);
          }
          for (int64_t c = 0; c < d; ++c) row[size_t(c)] = cvt<T>(cvt<L>(dq_i(c)) * L(p.scale));
          write_row<T>(out.d_q, q_row(p, seqs, b, h, i), d, row.data());
        }
      });
      // The block's terms of d_v and d_k, row by row in order (each key's sum in the serial order):
      // key blocks side by side, each term the one the whole row's update adds to that key's row.
      ref::parallel_rows(n_k, kKeyTask, [&](int64_t j0, int64_t j1) {
        for (int64_t r = 0; r < b1 - b0; ++r) {
          const KeyRange vis = vis_rows[size_t(r)];
          const int64_t lo = std::max(vis.begin, j0), hi = std::min(vis.end, j1), i = b0 + r;
          if (lo >= hi) continue;
          const auto p_i = p_rows[size_t(r)].segment(lo - vis.begin, hi - lo);
          const auto ds_i = ds_rows[size_t(r)].segment(lo - vis.begin, hi - lo);
          dv_acc.middleRows(lo, hi - lo).noalias() += p_i.transpose() * d_o_h.row(i);
          dk_acc.middleRows(lo, hi - lo).noalias() += ds_i.transpose() * hd.q.row(i);
        }
      });
    }
  }
  for (int64_t j = 0; j < n_k; ++j) {
    for (int64_t c = 0; c < d; ++c) dk_row[size_t(c)] = cvt<L>(dk_acc(j, c)) * L(p.scale);
    for (int64_t c = 0; c < dv; ++c) dv_row[size_t(c)] = cvt<L>(dv_acc(j, c));
    kv_out.put(kv_row(p, seqs, b, kv, j), dk_row.data(), dv_row.data());
  }
}

template <class T, class A>
void naive_backward(const Inputs& in, Outputs& out) {
  KvGrads<T, Soft<A>> kv_out(in.p, out.d_k, out.d_v);
  for (int64_t b = 0; b < in.p.batch; ++b)
    for (int64_t kv = 0; kv < in.p.heads_kv; ++kv) naive_backward_kv<T, A>(in, out, kv_out, b, kv);
  kv_out.finish();
}

}  // namespace fc::cpu
