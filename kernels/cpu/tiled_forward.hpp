// The FlashAttention forward as a CPU emulation: online softmax <m, l, o> over kBlockM x kBlockN
// tiles, in the FA2 loop order (Q tile outer, one pass over the KV tiles per Q tile) or the FA1
// loop order (KV tile outer, every row's O, m, l carried across the outer loop, O kept normalised
// after each step as in Algorithm 1 of the FlashAttention paper). Only visible keys are ever read,
// so a NaN or inf in a key or value a row cannot see never reaches that row.
#pragma once

#include <vector>

#include "kernels/cpu/tile.hpp"

namespace fc::cpu {

// FA2 order for one head. o: (n_q, d_v) in storage; lse: (n_q) widened from the softmax type.
// Split-KV (t.splits >= 2): the key tiles fall into t.splits runs of ceil(tiles / splits) tiles (the
// last may be shorter or empty); each run computes a row's partial state <m, l, o> from empty and the
// partials merge in run order (rules::merge_partial), as FlashAttention's split-KV combine does with
// the state's max kept (docs/DECISIONS.md). kDropSplitTail plants mutant_split_drop_tail's fault: with
// splits, the sequence's final key tile is skipped when it is partial.
template <class T, class A, bool kDropSplitTail = false>
void fa2_forward_head(const Head<A>& h, const Tiling& t, T* o, double* lse) {
  using L = Soft<A>;
  const Exp exp_fn;
  const int64_t d = h.d_v;
  for (int64_t i0 = 0; i0 < h.n_q; i0 += t.block_m) {
    const int64_t i1 = std::min<int64_t>(i0 + t.block_m, h.n_q);
    const int64_t rows = i1 - i0;
    std::vector<L> m(size_t(rows), rules::neg_inf<L>());            // (kBlockM) running max
    std::vector<L> l(size_t(rows), L(0));                           // (kBlockM) running sum of exp(s - m)
    std::vector<A> acc(size_t(rows * d), A(0.0f));                  // (kBlockM, d) unnormalised o
    std::vector<L> s(size_t(std::min<int64_t>(t.block_n, h.n_k)));  // (kBlockN) one score row
    std::vector<char> live(s.size(), 1);                            // (kBlockN) keys no mask hides
    const bool masked = per_key_mask(h.p);
    const KeyRange blk = block_keys(h, i0, i1);                     // the key tiles this row block visits
    // One run of key tiles [k0, k1) into the state <ms, ls, accs>.
    auto walk = [&](int64_t k0, int64_t k1, std::vector<L>& ms, std::vector<L>& ls, std::vector<A>& accs) {
      const int64_t lo = std::max(k0, blk.begin), hi = std::min(k1, blk.end);
      for (int64_t j0 = lo / t.block_n * t.block_n; j0 < hi && lo < hi; j0 += t.block_n) {
        const int64_t j1 = std::min<int64_t>(j0 + t.block_n, h.n_k);
        if (kDropSplitTail && t.splits > 1 && j1 == h.n_k && h.n_k % t.block_n != 0) break;  // the mutant
        for (int64_t r = 0; r < rows; ++r) {
          const KeyRange vis = keys(h, i0 + r);
          const int64_t jb = std::max(j0, vis.begin), jv = std::min(j1, vis.end);  // visible keys: [jb, jv)
          L m_new = ms[size_t(r)];
          for (int64_t j = jb; j < jv; ++j) {
            // A key a mask tensor or block mask hides: no score, no weight, its k and v not read.
            if (masked && h.hidden(i0 + r, j)) {
              s[size_t(j - j0)] = rules::neg_inf<L>(), live[size_t(j - j0)] = 0;
              continue;
            }
            live[size_t(j - j0)] = 1;
            s[size_t(j - j0)] = score<A>(h, i0 + r, j);
            m_new = rules::running_max(m_new, s[size_t(j - j0)]);
          }
          // exp(m_old - m_new) re-denominates l and o; 0 (not NaN) while nothing was accumulated.
          const L alpha = rules::rescale(ms[size_t(r)], m_new, exp_fn);
          const L shift = rules::safe_shift(m_new);  // -inf - -inf guard for a row that saw nothing yet
          A* acc_r = accs.data() + r * d;            // (d)
          ls[size_t(r)] *= alpha;
          for (int64_t c = 0; c < d; ++c) acc_r[c] = cvt<A>(cvt<L>(acc_r[c]) * alpha);
          for (int64_t j = jb; j < jv; ++j) {
            if (!live[size_t(j - j0)]) continue;
            const L p = exp_fn(s[size_t(j - j0)] - shift);
            ls[size_t(r)] += p;  // the row sum takes P before rounding, as FA2 sums its fp32 scores
            // P is rounded to storage before P·V because GPU kernels convert the P fragment to the
            // storage type to feed the tensor-core MMA; that rounding is part of what they compute.
            const A p_op = gemm_operand<T, A>(p, t.p_operand);
            const A* v_j = h.v + j * d;  // (d)
            for (int64_t c = 0; c < d; ++c) acc_r[c] = mac<A>(acc_r[c], p_op, v_j[c]);
          }
          ms[size_t(r)] = m_new;
        }
      }
    };
    if (t.splits <= 1) {
      walk(0, h.n_k, m, l, acc);
    } else {
      const int64_t tiles = (h.n_k + t.block_n - 1) / t.block_n, per = (tiles + t.splits - 1) / t.splits;
      std::vector<L> ms(static_cast<size_t>(rows)), ls(static_cast<size_t>(rows));
      std::vector<A> accs(static_cast<size_t>(rows * d));
      for (int64_t k0 = 0; k0 < h.n_k; k0 += per * t.block_n) {
        std::fill(ms.begin(), ms.end(), rules::neg_inf<L>());
        std::fill(ls.begin(), ls.end(), L(0));
        std::fill(accs.begin(), accs.end(), A(0.0f));
        walk(k0, std::min<int64_t>(k0 + per * t.block_n, h.n_k), ms, ls, accs);
        for (int64_t r = 0; r < rows; ++r) {  // the split's partial merges into the row's state
          const auto f = rules::merge_partial(m[size_t(r)], l[size_t(r)], ms[size_t(r)], ls[size_t(r)], exp_fn);
          for (int64_t c = 0; c < d; ++c)
            acc[size_t(r * d + c)] =
                cvt<A>(cvt<L>(acc[size_t(r * d + c)]) * f.a + cvt<L>(accs[size_t(r * d + c)]) * f.b);
        }
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      if (h.p.sinks) {  // the sink after the last key tile: one more weight in l, no value
        const L alpha = rules::merge_sink(m[size_t(r)], l[size_t(r)], L(h.sink), exp_fn);
        for (int64_t c = 0; c < d; ++c) acc[size_t(r * d + c)] = cvt<A>(cvt<L>(acc[size_t(r * d + c)]) * alpha);
      }
      const L inv = rules::inv_l(l[size_t(r)]);  // l = 0 (no visible key): o = 0, not 0/0
      for (int64_t c = 0; c < d; ++c) o[(i0 + r) * d + c] = cvt<T>(cvt<L>(acc[size_t(r * d + c)]) * inv);
      lse[i0 + r] = double(rules::finalize_lse(m[size_t(r)], l[size_t(r)], Log{}));
    }
  }
}

// FA1 order for one head: every row's m, l and normalised O persist across the KV-tile outer loop.
template <class T, class A>
void fa1_forward_head(const Head<A>& h, const Tiling& t, T* o, double* lse) {
  using L = Soft<A>;
  const Exp exp_fn;
  const int64_t d = h.d_v;
  std::vector<L> m(size_t(h.n_q), rules::neg_inf<L>());           // (n_q)
  std::vector<L> l(size_t(h.n_q), L(0));                          // (n_q)
  std::vector<A> o_acc(size_t(h.n_q * d), A(0.0f));               // (n_q, d_v) normalised O between steps
  std::vector<L> s(size_t(std::min<int64_t>(t.block_n, h.n_k)));  // (kBlockN) one score row
  std::vector<A> pv(static_cast<size_t>(d));                      // (d_v) P̃·V of one row of one tile
  std::vector<char> live(s.size(), 1);                            // (kBlockN) keys no mask hides
  const bool masked = per_key_mask(h.p);
  for (int64_t j0 = 0; j0 < h.n_k; j0 += t.block_n) {
    const int64_t j1 = std::min<int64_t>(j0 + t.block_n, h.n_k);
    for (int64_t i0 = 0; i0 < h.n_q; i0 += t.block_m) {
      const int64_t i1 = std::min<int64_t>(i0 + t.block_m, h.n_q);
      if (tile_invisible(h, i0, i1, j0, j1)) continue;
      for (int64_t i = i0; i < i1; ++i) {
        const KeyRange vis = keys(h, i);
        const int64_t jb = std::max(j0, vis.begin), jv = std::min(j1, vis.end);  // visible keys: [jb, jv)
        L m_tile = rules::neg_inf<L>();                                          // m̃: the tile's own row max
        for (int64_t j = jb; j < jv; ++j) {
          if (masked && h.hidden(i, j)) {  // hidden by a mask tensor or block mask: not read
            s[size_t(j - j0)] = rules::neg_inf<L>(), live[size_t(j - j0)] = 0;
            continue;
          }
          live[size_t(j - j0)] = 1;
          s[size_t(j - j0)] = score<A>(h, i, j);
          m_tile = rules::running_max(m_tile, s[size_t(j - j0)]);
        }
        const L shift = rules::safe_shift(m_tile);  // -inf - -inf guard: row sees nothing in this tile
        L l_tile = L(0);
        std::fill(pv.begin(), pv.end(), A(0.0f));
        for (int64_t j = jb; j < jv; ++j) {
          if (!live[size_t(j - j0)]) continue;
          const L p = exp_fn(s[size_t(j - j0)] - shift);  // P̃ relative to the tile max
          l_tile += p;
          // P̃ rounded to storage before P̃·V, as the GPU kernel's MMA operand is (see FA2 above).
          const A p_op = gemm_operand<T, A>(p, t.p_operand);
          const A* v_j = h.v + j * d;  // (d)
          for (int64_t c = 0; c < d; ++c) pv[size_t(c)] = mac<A>(pv[size_t(c)], p_op, v_j[c]);
        }
        const L m_new = rules::running_max(m[size_t(i)], m_tile);
        // Both factors are 0, never NaN, when their max is still -inf (nothing accumulated there).
        const L a_old = rules::rescale(m[size_t(i)], m_new, exp_fn);
        const L a_new = rules::rescale(m_tile, m_new, exp_fn);
        const L l_new = a_old * l[size_t(i)] + a_new * l_tile;
        const L inv = rules::inv_l(l_new);  // l_new = 0: the row has seen no key, O stays 0
        A* o_i = o_acc.data() + i * d;      // (d)
        for (int64_t c = 0; c < d; ++c)
          o_i[c] = cvt<A>((l[size_t(i)] * a_old * cvt<L>(o_i[c]) + a_new * cvt<L>(pv[size_t(c)])) * inv);
        m[size_t(i)] = m_new;
        l[size_t(i)] = l_new;
      }
    }
  }
  for (int64_t i = 0; i < h.n_q; ++i) {
    if (h.p.sinks && L(h.sink) != rules::neg_inf<L>()) {  // the sink merges as a last step of no value
      const L l_old = l[size_t(i)];
      const L alpha = rules::merge_sink(m[size_t(i)], l[size_t(i)], L(h.sink), exp_fn);
      const L factor = l_old * alpha * rules::inv_l(l[size_t(i)]);  // o stays normalised: o l_old alpha / l
      for (int64_t c = 0; c < d; ++c) o_acc[size_t(i * d + c)] = cvt<A>(cvt<L>(o_acc[size_t(i * d + c)]) * factor);
    }
    for (int64_t c = 0; c < d; ++c) o[i * d + c] = cvt<T>(o_acc[size_t(i * d + c)]);
    lse[i] = double(rules::finalize_lse(m[size_t(i)], l[size_t(i)], Log{}));
  }
}

// Forward over every (sequence, query head): each head gathered compact (widen_head), computed in
// the chosen loop order into compact buffers, then written to o and lse wherever their layout puts
// the rows. o: shape_o(p), lse: shape_lse(p) (attention.h, tensor.hpp).
template <class T, class A, bool kDropSplitTail = false>
void tiled_forward(const Inputs& in, const Tiling& t, Outputs& out) {
  if (t.block_m < 1 || t.block_n < 1) throw std::invalid_argument("cpu_tiled: block sizes must be >= 1");
  if (t.splits > 1 && t.order == LoopOrder::FA1)
    throw std::invalid_argument("cpu_tiled: split-KV in the FA2 order only");
  const Problem& p = in.p;
  const Seqs seqs = in.seqs();
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const WideHead<A> wide = widen_head<A, T>(in, b, h);
      std::vector<T> o_h(size_t(wide.n_q * wide.d_v));  // (n_q, d_v)
      std::vector<double> lse_h(size_t(wide.n_q));      // (n_q)
      if (t.order == LoopOrder::FA1)
        fa1_forward_head<T, A>(wide.view(), t, o_h.data(), lse_h.data());
      else
        fa2_forward_head<T, A, kDropSplitTail>(wide.view(), t, o_h.data(), lse_h.data());
      for (int64_t i = 0; i < wide.n_q; ++i) {
        write_row<T>(out.o, q_row(p, seqs, b, h, i), wide.d_v, o_h.data() + i * wide.d_v);
        out.lse.set(lse_index(p, seqs, b, h, i), lse_h[size_t(i)]);  // F32: the L value is a float
      }
    }
}

}  // namespace fc::cpu
