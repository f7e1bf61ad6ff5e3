// Pieces shared by the tiled CPU emulation's forward and backward: the tiling parameters, one head's
// views, the score s_ij (with softcap and ALiBi), the visible key ranges and the tile-skipping rule.
//
// Hand-written loops rather than Eigen products, on purpose: the emulation must fix where every
// rounding happens (one fp16 rounding per multiply-add when accumulating in fp16, P rounded to
// storage at one precise point) and keep one summation order for every tile shape, which Eigen's
// blocked, vectorised GEMM does not promise. cpu_naive is the Eigen-product baseline.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "contract/attention.h"
#include "kernels/cpu/layout.hpp"
#include "kernels/cpu/scalar.hpp"
#include "kernels/registry.hpp"
#include "contract/rules.h"

namespace fc::cpu {

inline constexpr int32_t kDefaultBlockM = 64;
inline constexpr int32_t kDefaultBlockN = 64;

// The type P (and dS) takes as the operand of the GEMM that reads it: the storage type, as GPU kernels
// convert the fragment to feed a 16-bit MMA; the accumulation type (no rounding); or bfloat16 whatever
// the storage (a kernel that feeds an fp16 problem's P to a bf16 MMA: the accumulation audit's variant).
enum class POperand { Storage, Accum, BF16 };

struct Tiling {
  int32_t block_m = kDefaultBlockM;        // kBlockM: query rows per tile
  int32_t block_n = kDefaultBlockN;        // kBlockN: keys per tile
  LoopOrder order = LoopOrder::FA2;        // FA2: Q tile outer; FA1: KV tile outer (forward only)
  POperand p_operand = POperand::Storage;  // P's (and dS's) GEMM operand type
  int32_t splits = 1;                      // split-KV: runs of key tiles merged at the end (FA2 forward only)
};

// The tiling a registry Config asks for (0 = default 64 x 64).
inline Tiling tiling_of(const Config& c) {
  if (c.block_m < 0 || c.block_n < 0) throw std::invalid_argument("cpu_tiled: negative block size");
  Tiling t;
  t.block_m = c.block_m == 0 ? kDefaultBlockM : c.block_m;
  t.block_n = c.block_n == 0 ? kDefaultBlockN : c.block_n;
  t.order = c.order;
  if (c.splits < 0) throw std::invalid_argument("cpu_tiled: negative split count");
  t.splits = c.splits == 0 ? 1 : c.splits;
  return t;
}

// One (sequence, query head) slice of the inputs, element type X, gathered compact: q rows
// (n_q, d), and the k, v rows of the kv head this query head reads, (n_k, d) and (n_k, d_v).
// n_q, n_k are the sequence's own (varlen: possibly 0).
template <class X>
struct Head {
  const X* q;  // (n_q, d)
  const X* k;  // (n_k, d)
  const X* v;  // (n_k, d_v)
  int64_t n_q, n_k, d, d_v;
  Problem p;     // mask, window, scale, softcap (the sequence lengths are n_q, n_k above)
  double slope;  // ALiBi slope of this head; 0 without ALiBi
  double sink = -std::numeric_limits<double>::infinity();  // sink logit of this head; -inf: none
  const Inputs* in = nullptr;  // mask tensors and block masks (contract v3): read through bias()
  int64_t b = 0, hq = 0;       // the head's batch element and query head
  // The mask tensor's and block mask's bias of key j in row i: 0 (none), -inf (hidden) or the
  // additive value (Inputs::key_bias).
  double bias(int64_t i, int64_t j) const { return in && per_key_mask(p) ? in->key_bias(b, hq, i, j) : 0.0; }
  bool hidden(int64_t i, int64_t j) const { return bias(i, j) == -std::numeric_limits<double>::infinity(); }
};

// One head's q, k, v converted once to the accumulation type A, so that inner loops convert
// nothing: exact when A is at least as wide as the storage type, and otherwise the very rounding
// each use would apply (A = fp16 with fp32 or bf16 storage).
template <class A>
struct WideHead {
  std::vector<A> q;  // (n_q, d)
  std::vector<A> k;  // (n_k, d)
  std::vector<A> v;  // (n_k, d_v)
  int64_t n_q, n_k, d, d_v;
  Problem p;
  double slope;
  double sink = -std::numeric_limits<double>::infinity();
  const Inputs* in = nullptr;
  int64_t b = 0, hq = 0;
  Head<A> view() const { return {q.data(), k.data(), v.data(), n_q, n_k, d, d_v, p, slope, sink, in, b, hq}; }
};

// Rows i in [0, n) of a query-side tensor (row(i) = q_row(...)) or key-side one, widened to A.
template <class A, class T, class Row>
std::vector<A> gather_rows(const HostTensor& t, int64_t n, int64_t w, Row row) {
  std::vector<A> out(static_cast<size_t>(n * w));  // (n, w)
  for (int64_t i = 0; i < n; ++i) read_row<A, T>(t, row(i), w, out.data() + i * w);
  return out;
}

// Sequence b, query head h: its q rows and the k, v rows of its kv head, wherever they live.
template <class A, class T>
WideHead<A> widen_head(const Inputs& in, int64_t b, int64_t h) {
  const Problem& p = in.p;
  const Seqs seqs = in.seqs();
  const int64_t kv = kv_head(p, int32_t(h)), n_q = seq_n_q(p, seqs, b), n_k = seq_n_k(p, seqs, b);
  const int64_t dv = head_dim_v(p);
  auto q_rows = [&](int64_t i) { return q_row(p, seqs, b, h, i); };
  auto kv_rows = [&](int64_t j) { return kv_row(p, seqs, b, kv, j); };
  return {gather_rows<A, T>(in.q, n_q, p.d, q_rows),
          gather_rows<A, T>(in.k, n_k, p.d, kv_rows),
          gather_rows<A, T>(in.v, n_k, dv, kv_rows),
          n_q,
          n_k,
          p.d,
          dv,
          p,
          in.slope(h),
          in.sink(h),
          &in,
          b,
          h};
}

// s_ij = scale · q_i·k_j: the dot product accumulated in A, in index order; the scale is applied
// once, in the softmax type, to the finished accumulator (as GPU epilogues do).
template <class A, class X>
Soft<A> scaled_score(const Head<X>& h, int64_t i, int64_t j) {
  const X* q_i = h.q + i * h.d;  // (d)
  const X* k_j = h.k + j * h.d;  // (d)
  A acc = A(0.0f);
  for (int64_t c = 0; c < h.d; ++c) acc = mac<A>(acc, cvt<A>(q_i[c]), cvt<A>(k_j[c]));
  return cvt<Soft<A>>(acc) * Soft<A>(h.p.scale);
}

// The score the softmax uses, from the scaled one: softcap c·tanh(s/c) (before masking), then
// ALiBi's -slope·|i' - j|, each a rounding in the softmax type. *tanh_out (when given) receives
// tanh(s/c) under softcap, for the backward's derivative 1 - tanh².
template <class A, class X>
Soft<A> biased(const Head<X>& h, int64_t i, int64_t j, Soft<A> s, Soft<A>* tanh_out = nullptr) {
  using L = Soft<A>;
  if (h.p.softcap > 0) {
    const L t = Tanh{}(s / L(h.p.softcap));
    if (tanh_out) *tanh_out = t;
    s = L(h.p.softcap) * t;  // softcapped(s, c, tanh) of attention.h, with tanh kept
  }
  if (h.p.alibi) s -= L(h.slope) * L(alibi_distance(h.p.mask, i, j, h.n_q, h.n_k));
  // An additive mask tensor's value, after softcap and ALiBi: one rounding. (Hidden keys never get
  // here: the walks skip them.)
  if (h.p.mask_kind == MaskKind::Additive) s += L(h.bias(i, j));
  return s;
}

template <class A, class X>
Soft<A> score(const Head<X>& h, int64_t i, int64_t j) {
  return biased<A>(h, i, j, scaled_score<A>(h, i, j));
}

// The keys row i sees: one range [begin, end) (attention.h).
template <class X>
KeyRange keys(const Head<X>& h, int64_t i) {
  return visible_keys(h.p, i, h.n_q, h.n_k);
}

// Keys some row of [i0, i1) may see. Both ends of a row's range grow with i, so they lie in
// [keys(i0).begin, keys(i1 - 1).end); a tile outside it is skipped, as FlashAttention skips the
// key blocks before the window and after the causal diagonal.
template <class X>
KeyRange block_keys(const Head<X>& h, int64_t i0, int64_t i1) {
  return {keys(h, i0).begin, keys(h, i1 - 1).end};
}

// Is the tile of rows [i0, i1) x keys [j0, j1) fully invisible?
template <class X>
bool tile_invisible(const Head<X>& h, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const KeyRange r = block_keys(h, i0, i1);
  return r.end <= j0 || j1 <= r.begin || r.end <= r.begin;
}

// The operand a GEMM reads for a probability-like value x (P or dS): rounded to the fragment's type
// first where the kernel keeps it in a 16-bit register fragment, as GPU kernels feed their MMAs.
template <class T, class A>
A gemm_operand(Soft<A> x, POperand op) {
  switch (op) {
    case POperand::Storage: return cvt<A>(cvt<T>(x));
    case POperand::BF16: return cvt<A>(cvt<Eigen::bfloat16>(x));
    case POperand::Accum: break;
  }
  return cvt<A>(x);
}

}  // namespace fc::cpu
