// Helpers of the variant laws (laws_variants.cpp, laws_window.cpp): bitwise comparison of two runs
// sequence by sequence, whatever their layouts (dense, varlen, paged).
#pragma once

#include <fmt/format.h>

#include <cstring>
#include <string>

#include "properties/constants.hpp"
#include "properties/laws.hpp"
#include "properties/variant_gen.hpp"
#include "verdict/verdict.hpp"

namespace fc::props {

inline bool bits_equal(const HostTensor& a, int64_t x, const HostTensor& b, int64_t y) {
  const int sz = dtype_size(a.dtype);
  return a.dtype == b.dtype && std::memcmp(a.bytes.data() + x * sz, b.bytes.data() + y * sz, size_t(sz)) == 0;
}

// d_k and d_v elements: the same bits, except that +0 and -0 agree. A key's gradient is a sum over the
// rows that see it; where every term is zero its sign depends on whether the sum starts from a zeroed
// buffer or from the first term, which a paged or strided path may choose differently without any
// value changing.
inline bool grad_bits_equal(const HostTensor& a, int64_t x, const HostTensor& b, int64_t y) {
  return bits_equal(a, x, b, y) || (a.get(x) == 0 && b.get(y) == 0);
}

// The variant laws start from a dense, compact case (a variant input file is outside them).
inline void require_dense(const Case& c) {
  if (!covers(Variants{}, variants_of(c.in)))
    throw NotApplicable("the variant laws derive their variants from a dense case");
}

// The law's dense case: as drawn, or (half the cases, by a draw of its own so the law's structure
// draws stay as they were) with v and d_o cut or repeated to another head dim, where the kernel
// declares d_v != d.
inline Case with_d_v_source(const Kernel& k, const Case& c) {
  if (!k.info.variants.d_v) return c;
  Rng rng(c.aux ^ 0x9e3779b97f4a7c15ull);
  if (rng() % 2) return c;
  Case w = c;
  w.in = with_d_v(c.in, draw_d_v(rng, c.in.p.d));
  return w;
}

inline bool grads(const Kernel& k, const Case& c) { return has_backward(k, c) && k.info.exact.d_q_rows; }

inline std::string both_ran(const Run& a, const Run& b) {
  if (a.error.empty() && b.error.empty()) return "";
  return "the kernel threw: " + a.error + b.error;
}

// Sequence sa of (ia, a) against sequence sb of (ib, b), bit for bit: o, lse, and with `g` d_q and
// the sequence's d_k, d_v rows (`keys`).
inline std::string same_sequence(const Inputs& ia, const Outputs& a, int64_t sa, const Inputs& ib, const Outputs& b,
                                 int64_t sb, bool g, bool keys) {
  const Problem &pa = ia.p, &pb = ib.p;
  const Seqs qa = ia.seqs(), qb = ib.seqs();
  const int64_t n_q = seq_n_q(pa, qa, sa), n_k = seq_n_k(pa, qa, sa), d = pa.d, dv = head_dim_v(pa);
  auto differs = [&](const char* name, const HostTensor& x, int64_t at_x, const HostTensor& y, int64_t at_y,
                     const std::string& where) {
    return fmt::format("{}[{}] is {:.9g} in one run and {:.9g} in the other (the same bits expected)\n", name, where,
                       x.get(at_x), y.get(at_y));
  };
  for (int64_t h = 0; h < pa.heads_q; ++h)
    for (int64_t i = 0; i < n_q; ++i) {
      const std::string where = fmt::format("sequence {}, h={}, i={}", sa, h, i);
      const int64_t la = lse_index(pa, qa, sa, h, i), lb = lse_index(pb, qb, sb, h, i);
      if (!bits_equal(a.lse, la, b.lse, lb)) return differs("lse", a.lse, la, b.lse, lb, where);
      const int64_t ra = q_row(pa, qa, sa, h, i), rb = q_row(pb, qb, sb, h, i);
      for (int64_t c = 0; c < dv; ++c)
        if (!bits_equal(a.o, ra * dv + c, b.o, rb * dv + c))
          return differs("o", a.o, ra * dv + c, b.o, rb * dv + c, where);
      for (int64_t c = 0; g && c < d; ++c)
        if (!bits_equal(a.d_q, ra * d + c, b.d_q, rb * d + c))
          return differs("d_q", a.d_q, ra * d + c, b.d_q, rb * d + c, where);
    }
  for (int64_t h = 0; g && keys && h < pa.heads_kv; ++h)
    for (int64_t j = 0; j < n_k; ++j) {
      const std::string where = fmt::format("sequence {}, kv head {}, key {}", sa, h, j);
      const int64_t ra = kv_row(pa, qa, sa, h, j), rb = kv_row(pb, qb, sb, h, j);
      for (int64_t c = 0; c < d; ++c)
        if (!grad_bits_equal(a.d_k, ra * d + c, b.d_k, rb * d + c))
          return differs("d_k", a.d_k, ra * d + c, b.d_k, rb * d + c, where);
      for (int64_t c = 0; c < dv; ++c)
        if (!grad_bits_equal(a.d_v, ra * dv + c, b.d_v, rb * dv + c))
          return differs("d_v", a.d_v, ra * dv + c, b.d_v, rb * dv + c, where);
    }
  return "";
}

// Every output tensor of two runs, bit for bit (the same layout on both sides).
inline std::string same_outputs(const Problem& p, const Outputs& a, const Outputs& b, bool g) {
  std::string m = same_bits(p, "o", a.o, b.o) + same_bits(p, "lse", a.lse, b.lse);
  if (g) m += same_bits(p, "d_q", a.d_q, b.d_q) + same_bits(p, "d_k", a.d_k, b.d_k) + same_bits(p, "d_v", a.d_v, b.d_v);
  return m;
}

}  // namespace fc::props
