// Pieces shared by the tiled CPU emulation's forward and backward: the tiling parameters, one head's
// views, the score s_ij and the tile-skipping rule.
//
// Hand-written loops rather than Eigen products, on purpose: the emulation must fix where every
// rounding happens (one fp16 rounding per multiply-add when accumulating in fp16, P rounded to
// storage at one precise point) and keep one summation order for every tile shape, which Eigen's
// blocked, vectorised GEMM does not promise. cpu_naive is the Eigen-product baseline.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/scalar.hpp"
#include "kernels/registry.hpp"
#include "kernels/rules.h"

namespace fc::cpu {

inline constexpr int32_t kDefaultBlockM = 64;
inline constexpr int32_t kDefaultBlockN = 64;

struct Tiling {
  int32_t block_m = kDefaultBlockM;  // kBlockM: query rows per tile
  int32_t block_n = kDefaultBlockN;  // kBlockN: keys per tile
  LoopOrder order = LoopOrder::FA2;  // FA2: Q tile outer; FA1: KV tile outer (forward only)
  bool round_p = true;               // round P (and dS) to storage before the GEMMs that use them
};

// The tiling a registry Config asks for (0 = default 64 x 64).
inline Tiling tiling_of(const Config& c) {
  if (c.block_m < 0 || c.block_n < 0) throw std::invalid_argument("cpu_tiled: negative block size");
  Tiling t;
  t.block_m = c.block_m == 0 ? kDefaultBlockM : c.block_m;
  t.block_n = c.block_n == 0 ? kDefaultBlockN : c.block_n;
  t.order = c.order;
  return t;
}

// One (batch, query head) slice of the inputs, element type X, and where its k, v rows live.
template <class X>
struct Head {
  const X* q;  // (n_q, d)
  const X* k;  // (n_k, d) the kv head this query head reads
  const X* v;  // (n_k, d)
  int64_t n_q, n_k, d;
  Mask mask;
  double scale;
};

// One head's q, k, v converted once to the accumulation type A, so that inner loops convert
// nothing: exact when A is at least as wide as the storage type, and otherwise the very rounding
// each use would apply (A = fp16 with fp32 or bf16 storage).
template <class A>
struct WideHead {
  std::vector<A> q;  // (n_q, d)
  std::vector<A> k;  // (n_k, d)
  std::vector<A> v;  // (n_k, d)
  int64_t n_q, n_k, d;
  Mask mask;
  double scale;
  Head<A> view() const { return {q.data(), k.data(), v.data(), n_q, n_k, d, mask, scale}; }
};

template <class A, class T>
std::vector<A> widen_rows(const T* x, int64_t n) {
  std::vector<A> out(static_cast<size_t>(n));  // (n) the same elements in A
  for (int64_t e = 0; e < n; ++e) out[size_t(e)] = cvt<A>(x[e]);
  return out;
}

template <class A, class T>
WideHead<A> widen_head(const Problem& p, int64_t b, int64_t h, const T* q, const T* k, const T* v) {
  const int64_t kv = kv_head(p, int32_t(h));
  return {widen_rows<A>(q + offset_q(p, b, h, 0), int64_t(p.n_q) * p.d),
          widen_rows<A>(k + offset_kv(p, b, kv, 0), int64_t(p.n_k) * p.d),
          widen_rows<A>(v + offset_kv(p, b, kv, 0), int64_t(p.n_k) * p.d),
          p.n_q,
          p.n_k,
          p.d,
          p.mask,
          p.scale};
}

// s_ij = scale · q_i·k_j: the dot product accumulated in A, in index order; the scale is applied
// once, in the softmax type, to the finished accumulator (as GPU epilogues do).
template <class A, class X>
Soft<A> score(const Head<X>& h, int64_t i, int64_t j) {
  const X* q_i = h.q + i * h.d;  // (d)
  const X* k_j = h.k + j * h.d;  // (d)
  A acc = A(0.0f);
  for (int64_t c = 0; c < h.d; ++c) acc = mac<A>(acc, cvt<A>(q_i[c]), cvt<A>(k_j[c]));
  return cvt<Soft<A>>(acc) * Soft<A>(h.scale);
}

// Keys visible to row i: the prefix [0, visible_end(i)).
template <class X>
int64_t visible_end(const Head<X>& h, int64_t i) {
  return n_visible(h.mask, i, h.n_q, h.n_k);
}

// A tile of rows [i0, i1) x keys [j0, ...) is fully invisible, and skipped, when even its last row
// (which sees the most keys: visibility is a prefix growing with i) sees none of it.
template <class X>
bool tile_invisible(const Head<X>& h, int64_t i1, int64_t j0) {
  return visible_end(h, i1 - 1) <= j0;
}

// The operand a GEMM reads for a probability-like value x (P or dS): rounded to storage first when
// the kernel stores it in a storage-typed register fragment, as GPU kernels feed their MMAs.
template <class T, class A>
A gemm_operand(Soft<A> x, bool round_to_storage) {
  return round_to_storage ? cvt<A>(cvt<T>(x)) : cvt<A>(x);
}

}  // namespace fc::cpu
