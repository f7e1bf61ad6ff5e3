// The FlashAttention backward as a CPU emulation: recomputation from the saved lse, KV tile outer
// (each KV tile's d_k, d_v accumulated over every query head that shares its kv head, then written
// once), Q tiles inner, d_q accumulated across KV tiles in the accumulation type (the GPU's fp32
// d_q accumulator). With D_i = d_o_i·o_i, P_ij = exp(s_ij - lse_i), dP_ij = d_o_i·v_j,
// dS_ij = P_ij (dP_ij - D_i) (times 1 - tanh²(s/c) under softcap): d_v = Pᵀ d_o, d_q = scale·dS K,
// d_k = scale·dSᵀ Q. The loop order (FA1/FA2) is a forward notion; the backward is the same for both.
#pragma once

#include <vector>

#include "kernels/cpu/tile.hpp"

namespace fc::cpu {

// The query heads of one (sequence b, kv head hk) gathered once: q, k, v widened, d_o, the forward's
// lse, and D_i = d_o_i·o_i accumulated in A.
template <class A>
struct GroupRows {
  std::vector<Soft<A>> D;                  // (group, n_q)
  std::vector<WideHead<A>> wide;           // (group) the gathered heads
  std::vector<std::vector<A>> d_o_h;       // (group) each (n_q, d_v)
  std::vector<std::vector<double>> lse_h;  // (group) each (n_q)
};

template <class T, class A>
GroupRows<A> gather_group(const Inputs& in, const Outputs& fwd, int64_t b, int64_t hk) {
  using L = Soft<A>;
  const Problem& p = in.p;
  const Seqs seqs = in.seqs();
  const int64_t dv = head_dim_v(p), n_q = seq_n_q(p, seqs, b);
  const int64_t group = p.heads_q / p.heads_kv;  // query heads per kv head
  GroupRows<A> gr;
  gr.D.resize(size_t(group * n_q));
  for (int64_t g = 0; g < group; ++g) {
    const int64_t h = hk * group + g;
    auto rows = [&](int64_t i) { return q_row(p, seqs, b, h, i); };
    gr.wide.push_back(widen_head<A, T>(in, b, h));
    gr.d_o_h.push_back(gather_rows<A, T>(in.d_o, n_q, dv, rows));
    const std::vector<A> o_h = gather_rows<A, T>(fwd.o, n_q, dv, rows);  // (n_q, d_v)
    gr.lse_h.emplace_back(size_t(n_q));
    for (int64_t i = 0; i < n_q; ++i) {
      A acc = A(0.0f);
      for (int64_t c = 0; c < dv; ++c) acc = mac<A>(acc, gr.d_o_h[g][size_t(i * dv + c)], o_h[size_t(i * dv + c)]);
      gr.D[size_t(g * n_q + i)] = cvt<L>(acc);
      gr.lse_h[g][size_t(i)] = fwd.lse.get(lse_index(p, seqs, b, h, i));
    }
  }
  return gr;
}

// One (sequence b, kv head hk): its group of query heads against its keys.
template <class T, class A>
void tiled_backward_group(const Inputs& in, const Tiling& t, const Outputs& fwd, int64_t b, int64_t hk, HostTensor& d_q,
                          KvGrads<T, Soft<A>>& kv_out) {
  using L = Soft<A>;
  const Problem& p = in.p;
  const Seqs seqs = in.seqs();
  const Exp exp_fn;
  const int64_t d = p.d, dv = head_dim_v(p), n_q = seq_n_q(p, seqs, b), n_k = seq_n_k(p, seqs, b);
  const int64_t group = p.heads_q / p.heads_kv;  // query heads per kv head
  const L scale = L(p.scale);
  const GroupRows<A> gr = gather_group<T, A>(in, fwd, b, hk);
  const bool masked = per_key_mask(p);
  const std::vector<L>& D = gr.D;                                                  // (group, n_q)
  std::vector<A> dq_acc(size_t(group * n_q * d), A(0.0f));                         // (group, n_q, d)
  std::vector<L> dk_row(static_cast<size_t>(d)), dv_row(static_cast<size_t>(dv));  // (d), (d_v) one finished key row
  for (int64_t j0 = 0; j0 < n_k; j0 += t.block_n) {
    const int64_t j1 = std::min<int64_t>(j0 + t.block_n, n_k);
    std::vector<A> dk_acc(size_t((j1 - j0) * d), A(0.0f));   // (kBlockN, d)
    std::vector<A> dv_acc(size_t((j1 - j0) * dv), A(0.0f));  // (kBlockN, d_v)
    for (int64_t g = 0; g < group; ++g) {
      const Head<A> head = gr.wide[size_t(g)].view();
      A* dq_h = dq_acc.data() + g * n_q * d;  // (n_q, d)
      for (int64_t i0 = 0; i0 < n_q; i0 += t.block_m) {
        const int64_t i1 = std::min<int64_t>(i0 + t.block_m, n_q);
        if (tile_invisible(head, i0, i1, j0, j1)) continue;
        for (int64_t i = i0; i < i1; ++i) {
          const KeyRange vis = keys(head, i);
          const int64_t jb = std::max(j0, vis.begin), jv = std::min(j1, vis.end);  // visible keys: [jb, jv)
          const L lse_i = L(gr.lse_h[size_t(g)][size_t(i)]);
          const A* q_i = head.q + i * d;                         // (d)
          const A* d_o_i = gr.d_o_h[size_t(g)].data() + i * dv;  // (d_v)
          for (int64_t j = jb; j < jv; ++j) {
            if (masked && head.hidden(i, j)) continue;  // P = 0, dS = 0: no term, k and v not read
            L tanh_ij = 0;
            const L s_ij = biased<A>(head, i, j, scaled_score<A>(head, i, j), &tanh_ij);
            // P resurrected from lse; 0 (not exp(-inf - -inf)) for a row that saw no key.
            const L p_ij = rules::recompute_p(s_ij, lse_i, exp_fn);
            const A* v_j = head.v + j * dv;  // (d_v)
            const A* k_j = head.k + j * d;   // (d)
            A dp = A(0.0f);
            for (int64_t c = 0; c < dv; ++c) dp = mac<A>(dp, d_o_i[c], v_j[c]);
            // dP - D cancels when P is near one-hot; both are in L so the difference is one rounding.
            L ds = p_ij * (cvt<L>(dp) - D[size_t(g * n_q + i)]);
            // Softcap: the chain rule through c·tanh(x/c), whose derivative is 1 - tanh².
            if (p.softcap > 0) ds *= L(1) - tanh_ij * tanh_ij;
            // P and dS are rounded to storage before the GEMMs they feed, as GPU kernels do.
            const A p_op = gemm_operand<T, A>(p_ij, t.p_operand);
            const A ds_op = gemm_operand<T, A>(ds, t.p_operand);
            A* dv_j = dv_acc.data() + (j - j0) * dv;  // (d_v)
            A* dk_j = dk_acc.data() + (j - j0) * d;   // (d)
            A* dq_i = dq_h + i * d;                   // (d)
            for (int64_t c = 0; c < dv; ++c) dv_j[c] = mac<A>(dv_j[c], p_op, d_o_i[c]);
            for (int64_t c = 0; c < d; ++c) {
              dk_j[c] = mac<A>(dk_j[c], ds_op, q_i[c]);
              dq_i[c] = mac<A>(dq_i[c], ds_op, k_j[c]);
            }
          }
        }
      }
    }
    for (int64_t j = j0; j < j1; ++j) {
      // scale multiplies the finished sums once, as the GPU epilogue does.
      for (int64_t c = 0; c < d; ++c) dk_row[size_t(c)] = cvt<L>(dk_acc[size_t((j - j0) * d + c)]) * scale;
      for (int64_t c = 0; c < dv; ++c) dv_row[size_t(c)] = cvt<L>(dv_acc[size_t((j - j0) * dv + c)]);
      kv_out.put(kv_row(p, seqs, b, hk, j), dk_row.data(), dv_row.data());
    }
  }
  std::vector<T> row(static_cast<size_t>(d));  // (d) one d_q row in storage
  for (int64_t g = 0; g < group; ++g)
    for (int64_t i = 0; i < n_q; ++i) {
      for (int64_t c = 0; c < d; ++c) row[size_t(c)] = cvt<T>(cvt<L>(dq_acc[size_t((g * n_q + i) * d + c)]) * scale);
      write_row<T>(d_q, q_row(p, seqs, b, hk * group + g, i), d, row.data());
    }
}

// Backward over every (sequence, kv head). out.o, out.lse: the forward's; writes out.d_q, d_k, d_v.
template <class T, class A>
void tiled_backward(const Inputs& in, const Tiling& t, Outputs& out) {
  if (t.block_m < 1 || t.block_n < 1) throw std::invalid_argument("cpu_tiled: block sizes must be >= 1");
  KvGrads<T, Soft<A>> kv_out(in.p, out.d_k, out.d_v);
  for (int64_t b = 0; b < in.p.batch; ++b)
    for (int64_t hk = 0; hk < in.p.heads_kv; ++hk) tiled_backward_group<T, A>(in, t, out, b, hk, out.d_q, kv_out);
  kv_out.finish();
}

}  // namespace fc::cpu
