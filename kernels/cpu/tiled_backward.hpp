// The FlashAttention backward as a CPU emulation: recomputation from the saved lse, KV tile outer
// (each KV tile's d_k, d_v accumulated over every query head that shares its kv head, then written
// once), Q tiles inner, d_q accumulated across KV tiles in the accumulation type (the GPU's fp32
// d_q accumulator). With D_i = d_o_i·o_i, P_ij = exp(s_ij - lse_i), dP_ij = d_o_i·v_j,
// dS_ij = P_ij (dP_ij - D_i): d_v = Pᵀ d_o, d_q = scale·dS K, d_k = scale·dSᵀ Q.
// The loop order (FA1/FA2) is a forward notion; the backward is the same for both.
#pragma once

#include <vector>

#include "kernels/cpu/tile.hpp"

namespace fc::cpu {

// q, o, d_o, d_q: (batch, heads_q, n_q, d); k, v, d_k, d_v: (batch, heads_kv, n_k, d);
// lse: (batch, heads_q, n_q) as the forward wrote it (fp32 values under the contract).
template <class T, class A>
void tiled_backward(const Problem& p, const Tiling& t, const T* q, const T* k, const T* v, const T* o,
                    const double* lse, const T* d_o, T* d_q, T* d_k, T* d_v) {
  using L = Soft<A>;
  if (t.block_m < 1 || t.block_n < 1) throw std::invalid_argument("cpu_tiled: block sizes must be >= 1");
  const Exp exp_fn;
  const int64_t d = p.d, n_q = p.n_q, n_k = p.n_k;
  const int64_t group = p.heads_q / p.heads_kv;  // query heads per kv head
  const L scale = L(p.scale);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      // D_i = d_o_i·o_i for every query row of the group, accumulated in A.
      std::vector<L> D(size_t(group * n_q));                    // (group, n_q)
      std::vector<A> dq_acc(size_t(group * n_q * d), A(0.0f));  // (group, n_q, d)
      for (int64_t g = 0; g < group; ++g)
        for (int64_t i = 0; i < n_q; ++i) {
          const int64_t off = offset_q(p, b, hk * group + g, i);
          A acc = A(0.0f);
          for (int64_t c = 0; c < d; ++c) acc = mac<A>(acc, cvt<A>(d_o[off + c]), cvt<A>(o[off + c]));
          D[size_t(g * n_q + i)] = cvt<L>(acc);
        }
      for (int64_t j0 = 0; j0 < n_k; j0 += t.block_n) {
        const int64_t j1 = std::min<int64_t>(j0 + t.block_n, n_k);
        std::vector<A> dk_acc(size_t((j1 - j0) * d), A(0.0f));  // (kBlockN, d)
        std::vector<A> dv_acc(size_t((j1 - j0) * d), A(0.0f));  // (kBlockN, d)
        for (int64_t g = 0; g < group; ++g) {
          const int64_t h = hk * group + g;
          const WideHead<A> wide = widen_head<A>(p, b, h, q, k, v);
          const Head<A> head = wide.view();
          const std::vector<A> d_o_h = widen_rows<A>(d_o + offset_q(p, b, h, 0), n_q * d);  // (n_q, d)
          A* dq_h = dq_acc.data() + g * n_q * d;                                            // (n_q, d)
          for (int64_t i0 = 0; i0 < n_q; i0 += t.block_m) {
            const int64_t i1 = std::min<int64_t>(i0 + t.block_m, n_q);
            if (tile_invisible(head, i1, j0)) continue;
            for (int64_t i = i0; i < i1; ++i) {
              const int64_t jv = std::min(j1, visible_end(head, i));  // visible keys: [j0, jv)
              const L lse_i = L(lse[offset_lse(p, b, h, i)]);
              const A* q_i = head.q + i * d;          // (d)
              const A* d_o_i = d_o_h.data() + i * d;  // (d)
              for (int64_t j = j0; j < jv; ++j) {
                // P resurrected from lse; 0 (not exp(-inf - -inf)) for a row that saw no key.
                const L p_ij = rules::recompute_p(score<A>(head, i, j), lse_i, exp_fn);
                const A* v_j = head.v + j * d;  // (d)
                const A* k_j = head.k + j * d;  // (d)
                A dp = A(0.0f);
                for (int64_t c = 0; c < d; ++c) dp = mac<A>(dp, d_o_i[c], v_j[c]);
                // dP - D cancels when P is near one-hot; both are in L so the difference is one rounding.
                const L ds = p_ij * (cvt<L>(dp) - D[size_t(g * n_q + i)]);
                // P and dS are rounded to storage before the GEMMs they feed, as GPU kernels do.
                const A p_op = gemm_operand<T, A>(p_ij, t.round_p);
                const A ds_op = gemm_operand<T, A>(ds, t.round_p);
                A* dv_j = dv_acc.data() + (j - j0) * d;  // (d)
                A* dk_j = dk_acc.data() + (j - j0) * d;  // (d)
                A* dq_i = dq_h + i * d;                  // (d)
                for (int64_t c = 0; c < d; ++c) {
                  dv_j[c] = mac<A>(dv_j[c], p_op, d_o_i[c]);
                  dk_j[c] = mac<A>(dk_j[c], ds_op, q_i[c]);
                  dq_i[c] = mac<A>(dq_i[c], ds_op, k_j[c]);
                }
              }
            }
          }
        }
        for (int64_t j = j0; j < j1; ++j) {
          const int64_t off = offset_kv(p, b, hk, j);
          for (int64_t c = 0; c < d; ++c) {
            // scale multiplies the finished sums once, as the GPU epilogue does.
            d_k[off + c] = cvt<T>(cvt<L>(dk_acc[size_t((j - j0) * d + c)]) * scale);
            d_v[off + c] = cvt<T>(dv_acc[size_t((j - j0) * d + c)]);
          }
        }
      }
      for (int64_t g = 0; g < group; ++g)
        for (int64_t i = 0; i < n_q; ++i) {
          const int64_t off = offset_q(p, b, hk * group + g, i);
          for (int64_t c = 0; c < d; ++c) d_q[off + c] = cvt<T>(cvt<L>(dq_acc[size_t((g * n_q + i) * d + c)]) * scale);
        }
    }
}

}  // namespace fc::cpu
