// The per-row numerics both CUDA forwards share (tiled_forward.cu on mma.sync, wgmma_forward.cu on
// wgmma): parameters, the online-softmax step over one 16-row block of scores, and the epilogue.
// Both keep scores, P and o in the same per-warp register layout (mma.cuh's C and A fragments), so
// the delicate lines -- one rounding of the scaled score, the max and the exponent on the same
// value, the empty-row guards -- are written once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "contract/attention.h"
#include "kernels/cuda/launchers.hpp"
#include "kernels/cuda/mma.cuh"
#include "contract/rules.h"

namespace fc::cuda {

template <class T>
struct FwdParams {
  const T* q;  // (b, h_q, n_q, d)
  const T* k;  // (b, h_kv, n_k, d)
  const T* v;  // (b, h_kv, n_k, d)
  T* o;        // (b, h_q, n_q, d)
  float* lse;  // (b, h_q, n_q)
  int n_q, n_k, heads_q, heads_kv;
  Mask mask;
  float scale_log2;  // scale * log2(e): scores are kept in base-2 units so exp is one exp2
};

template <class T>
FwdParams<T> make_fwd_params(const Problem& pr, const ForwardArgs& a) {
  return FwdParams<T>{static_cast<const T*>(a.q),
                      static_cast<const T*>(a.k),
                      static_cast<const T*>(a.v),
                      static_cast<T*>(a.o),
                      a.lse,
                      pr.n_q,
                      pr.n_k,
                      pr.heads_q,
                      pr.heads_kv,
                      pr.mask,
                      float(pr.scale * rules::kLog2e)};
}

// The online-softmax step for a 16-row block of this warp against kNB * 8 keys [n0, n0 + 8 kNB), in
// two halves so a kernel may run the first while the previous block's P v is still on the tensor
// cores (wgmma_forward.cu) -- or both back to back (tiled_forward.cu); the numbers are the same.
//
// softmax_update: s (raw q.k, C layout) becomes the fp32 weights P = exp2(x - m_new); the running max
// m and partial sum l (rows g and g + 8; l per thread, quad-summed at the end) move to the new max;
// corr = exp2(m_old - m_new) is what o must still be scaled by. row0: the block's first query row.
// need_mask: some key of the block is masked or past n_k. kClampNk = false is a CUDA mutant's fault
// (mutant_traits.hpp): the causal limit only, keys past n_k kept.
template <class T, int kNB, bool kClampNk = true>
__device__ __forceinline__ void softmax_update(float (&s)[kNB][4], float (&m)[2], float (&l)[2], float (&corr)[2],
                                               const FwdParams<T>& p, bool need_mask, int64_t row0, int64_t n0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // x = (q.k) * (scale log2 e): one rounding. The running max and the exponent below both use this
  // same x, so x - m is exactly 0 at the row's max (its weight is exactly 1).
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nb][e] = __fmul_rn(s[nb][e], p.scale_log2);  // never contracted into the FADD below
  if (need_mask) {
    // Visible keys form a prefix [0, n_visible(i)) (attention.h), which also stops at n_k: one
    // compare per score against the row's limit, relative to this block's first key.
    int lim[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int64_t nv = n_visible(p.mask, row0 + g + 8 * r, p.n_q, p.n_k) - n0;
      if constexpr (!kClampNk)
        nv = p.mask == Mask::None ? 8 * kNB : row0 + g + 8 * r + rules::causal_offset(p.mask, p.n_q, p.n_k) + 1 - n0;
      lim[r] = nv < 0 ? 0 : nv > 8 * kNB ? 8 * kNB : int(nv);
    }
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (nb * 8 + 2 * t + e % 2 >= lim[e / 2]) s[nb][e] = rules::neg_inf<float>();
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // The running max as one fmaxf per score (rules::running_max is a compare and a select). Same
    // value: m starts at -inf and a max never produces NaN, and both forms skip a NaN score (whose
    // own weight exp2(NaN - m) = NaN then poisons the row, as the contract wants).
    float mx = m[r];
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) mx = fmaxf(fmaxf(mx, s[nb][2 * r]), s[nb][2 * r + 1]);
    mx = quad_max(mx);
    corr[r] = rules::rescale(m[r], mx, [](float x) { return exp2_approx(x); });
    const float shift = rules::safe_shift(mx);  // all -inf so far: exp2(-inf - 0) = 0, not NaN
    m[r] = mx;
    float sum = 0.f;
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
      s[nb][2 * r] = exp2_approx(s[nb][2 * r] - shift);
      s[nb][2 * r + 1] = exp2_approx(s[nb][2 * r + 1] - shift);
      sum += s[nb][2 * r] + s[nb][2 * r + 1];  // l sums the fp32 weights; P is rounded to T only as the mma operand
    }
    l[r] = l[r] * corr[r] + sum;
  }
}

// rescale_and_pack: o *= corr (o must hold no in-flight GEMM), and P packed to T as A fragments pa
// (two adjacent C blocks of P are one k-step of o += P v).
template <class T, int kNB, int kDB>
__device__ __forceinline__ void rescale_and_pack(const float (&s)[kNB][4], const float (&corr)[2], float (&o)[kDB][4],
                                                 uint32_t (&pa)[kNB / 2][4]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) pa[nb / 2][(nb % 2) * 2 + r] = Storage<T>::pack(s[nb][2 * r], s[nb][2 * r + 1]);
#pragma unroll
    for (int db = 0; db < kDB; ++db) {
      o[db][2 * r] *= corr[r];
      o[db][2 * r + 1] *= corr[r];
    }
  }
}

template <class T, int kNB, int kDB, bool kClampNk = true>
__device__ __forceinline__ void online_softmax_step(float (&s)[kNB][4], float (&m)[2], float (&l)[2],
                                                    float (&o)[kDB][4], uint32_t (&pa)[kNB / 2][4],
                                                    const FwdParams<T>& p, bool need_mask, int64_t row0, int64_t n0) {
  float corr[2];
  softmax_update<T, kNB, kClampNk>(s, m, l, corr, p, need_mask, row0, n0);
  rescale_and_pack<T, kNB, kDB>(s, corr, o, pa);
}

// o / l and lse for the 16-row block starting at query row0 of head (b, h): rows past n_q are not
// written; l = 0 (no visible key) gives o = 0 and lse = -inf (contract). kPastEnd (a CUDA mutant's
// fault, Fault::TiledStorePastEnd): the row predicate off by one, so row n_q is written too.
template <class T, int kDB, bool kPastEnd = false>
__device__ __forceinline__ void store_o_lse(const FwdParams<T>& p, const float (&o)[kDB][4], const float (&m)[2],
                                            const float (&l)[2], int b, int h, int64_t row0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = row0 + g + 8 * r;
    const float l_row = quad_sum(l[r]);
    const float inv = rules::inv_l(l_row);
    if constexpr (kPastEnd) {
      if (i > p.n_q) continue;
    } else {
      if (i >= p.n_q) continue;
    }
    T* o_row = p.o + ((int64_t(b) * p.heads_q + h) * p.n_q + i) * (kDB * 8);  // (d)
#pragma unroll
    for (int db = 0; db < kDB; ++db)
      *reinterpret_cast<uint32_t*>(o_row + db * 8 + 2 * t) =
          Storage<T>::pack(o[db][2 * r] * inv, o[db][2 * r + 1] * inv);
    if (t == 0) {
      // lse = ln 2 * (m + log2 l): m is in base-2 units.
      const float lse2 = rules::finalize_lse(m[r], l_row, [](float x) { return log2f(x); });
      p.lse[(int64_t(b) * p.heads_q + h) * p.n_q + i] = lse2 * float(rules::kLn2);
    }
  }
}

}  // namespace fc::cuda
