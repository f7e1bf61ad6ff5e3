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

// One (batch, query head) slice of the inputs, and where its k, v rows live.
template <class T>
struct Head {
  const T* q;  // (n_q, d)
  const T* k;  // (n_k, d) the kv head this query head reads
  const T* v;  // (n_k, d)
  int64_t n_q, n_k, d;
  Mask mask;
  double scale;
};

template <class T>
Head<T> head_of(const Problem& p, int64_t b, int64_t h, const T* q, const T* k, const T* v) {
  const int64_t kv = kv_head(p, int32_t(h));
  return {q + offset_q(p, b, h, 0), k + offset_kv(p, b, kv, 0), v + offset_kv(p, b, kv, 0),
          p.n_q, p.n_k, p.d, p.mask, p.scale};
}

// s_ij = scale · q_i·k_j: the dot product accumulated in A, in index order; the scale is applied
// once, in the softmax type, to the finished accumulator (as GPU epilogues do).
template <class A, class T>
Soft<A> score(const Head<T>& h, int64_t i, int64_t j) {
  const T* q_i = h.q + i * h.d;  // (d)
  const T* k_j = h.k + j * h.d;  // (d)
  A acc = A(0.0f);
  for (int64_t c = 0; c < h.d; ++c) acc = mac<A>(acc, cvt<A>(q_i[c]), cvt<A>(k_j[c]));
  return cvt<Soft<A>>(acc) * Soft<A>(h.scale);
}

// Keys visible to row i: the prefix [0, visible_end(i)).
template <class T>
int64_t visible_end(const Head<T>& h, int64_t i) { return n_visible(h.mask, i, h.n_q, h.n_k); }

// A tile of rows [i0, i1) x keys [j0, ...) is fully invisible, and skipped, when even its last row
// (which sees the most keys: visibility is a prefix growing with i) sees none of it.
template <class T>
bool tile_invisible(const Head<T>& h, int64_t i1, int64_t j0) { return visible_end(h, i1 - 1) <= j0; }

// The operand a GEMM reads for a probability-like value x (P or dS): rounded to storage first when
// the kernel stores it in a storage-typed register fragment, as GPU kernels feed their MMAs.
template <class T, class A>
A gemm_operand(Soft<A> x, bool round_to_storage) {
  return round_to_storage ? cvt<A>(cvt<T>(x)) : cvt<A>(x);
}

}  // namespace fc::cpu
