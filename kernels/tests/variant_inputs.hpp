// Variant inputs for the CPU-kernel tests (contract v2), and the tests' own index arithmetic for
// cutting a sequence out of a varlen / paged batch and for laying paged keys out contiguously, so
// the kernels' addressing (attention.h's q_row / kv_row) is checked against an independent one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "contract/tensor.hpp"

namespace fc::test {

struct VariantSpec {
  DType dtype = DType::F32;
  int32_t heads_q = 2, heads_kv = 1, d = 4, d_v = 0;
  Mask mask = Mask::None;
  double scale = 0.5;
  int32_t batch = 1, n_q = 5, n_k = 7;  // dense shape (len_q empty)
  std::vector<int32_t> len_q{}, len_k{};  // varlen: per-sequence lengths
  int32_t page_size = 0;                // paged (varlen only): keys per page
  bool repeat_pages = false;            // paged: the last sequence reuses the first sequence's first page
  int32_t window_left = -1, window_right = -1;
  double softcap = 0;
  std::vector<double> slopes{};  // ALiBi: one per query head (empty: none)
  uint64_t seed = 1;
  double range = 2;  // values on a 1/64 grid in [-range, range]: exact in every storage dtype
  int32_t pad = 0;   // padded varlen (not paged): pad tokens before every sequence and after the last
};

inline HostTensor ints(std::vector<int64_t> shape, const std::vector<int32_t>& x) {
  HostTensor t(DType::I32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, x[size_t(i)]);
  return t;
}

inline HostTensor grid_values(DType t, std::vector<int64_t> shape, std::mt19937_64& rng, double range) {
  std::uniform_int_distribution<int> dist(-int(64 * range), int(64 * range));
  HostTensor x(t, std::move(shape));
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, dist(rng) / 64.0);
  return x;
}

inline Inputs make_variant(const VariantSpec& s) {
  Inputs in;
  Problem& p = in.p;
  p.heads_q = s.heads_q, p.heads_kv = s.heads_kv, p.d = s.d, p.d_v = s.d_v == s.d ? 0 : s.d_v;
  p.dtype = s.dtype, p.mask = s.mask, p.scale = s.scale;
  p.window_left = s.window_left, p.window_right = s.window_right, p.softcap = s.softcap;
  p.batch = s.batch, p.n_q = s.n_q, p.n_k = s.n_k;
  std::mt19937_64 rng(s.seed);
  if (!s.len_q.empty()) {
    p.varlen = true, p.batch = int32_t(s.len_q.size()), p.n_q = p.n_k = 0;
    std::vector<int32_t> cu_q = {0}, cu_k = {0};
    for (size_t b = 0; b < s.len_q.size(); ++b) {
      cu_q.push_back(cu_q.back() + s.len_q[b]), cu_k.push_back(cu_k.back() + s.len_k[b]);
      p.n_q = std::max(p.n_q, s.len_q[b]), p.n_k = std::max(p.n_k, s.len_k[b]);
    }
    p.total_q = cu_q.back(), p.total_k = cu_k.back();
    in.cu_seqlens_q = ints({p.batch + 1}, cu_q);
    in.cu_seqlens_k = ints({p.batch + 1}, cu_k);
    if (s.pad > 0) {  // sequence b's tokens at pad * (b + 1) + cu[b]
      std::vector<int32_t> at_q, at_k;
      for (int32_t b = 0; b <= p.batch; ++b) at_q.push_back(s.pad * (b + 1) + cu_q[size_t(b)]);
      for (int32_t b = 0; b <= p.batch; ++b) at_k.push_back(s.pad * (b + 1) + cu_k[size_t(b)]);
      p.padded = true, p.total_q = at_q.back(), p.total_k = at_k.back();
      in.cu_seqlens_q_padded = ints({p.batch + 1}, at_q);
      in.cu_seqlens_k_padded = ints({p.batch + 1}, at_k);
    }
    if (s.page_size > 0) {
      p.page_size = s.page_size;
      p.pages_per_seq = std::max(1, (p.n_k + s.page_size - 1) / s.page_size);
      p.num_pages = p.batch * p.pages_per_seq + 1;  // one page no sequence reads
      std::vector<int32_t> table(size_t(p.batch * p.pages_per_seq));
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), rng);  // pages in any order
      if (s.repeat_pages) table[size_t((p.batch - 1) * p.pages_per_seq)] = table[0];
      in.page_table = ints({p.batch, p.pages_per_seq}, table);
    }
  }
  if (!s.slopes.empty()) {
    p.alibi = true;
    in.alibi_slopes = HostTensor::from_f64(DType::F32, {p.heads_q}, s.slopes);
  }
  in.q = grid_values(s.dtype, shape_q(p), rng, s.range);
  in.k = grid_values(s.dtype, shape_kv(p), rng, s.range);
  in.v = grid_values(s.dtype, shape_v(p), rng, s.range);
  in.d_o = grid_values(s.dtype, shape_o(p), rng, s.range);
  return in;
}

// The tests' own layout arithmetic: flat element index of (b, h, i, c) in a query-side tensor of
// width w, of key j's element c in a key-side one, and of lse (b, h, i).
inline int64_t seq_len(const HostTensor& cu, int64_t b) { return int64_t(cu.get(b + 1) - cu.get(b)); }
inline int64_t q_at(const Inputs& in, int64_t b, int64_t h, int64_t i, int64_t c, int64_t w) {
  const Problem& p = in.p;
  if (!p.varlen) return ((b * p.heads_q + h) * p.n_q + i) * w + c;
  const HostTensor& at = p.padded ? in.cu_seqlens_q_padded : in.cu_seqlens_q;
  return ((int64_t(at.get(b)) + i) * p.heads_q + h) * w + c;
}
inline int64_t kv_at(const Inputs& in, int64_t b, int64_t h, int64_t j, int64_t c, int64_t w) {
  const Problem& p = in.p;
  if (p.page_size > 0) {
    const int64_t page = int64_t(in.page_table.get(b * p.pages_per_seq + j / p.page_size));
    return ((page * p.page_size + j % p.page_size) * p.heads_kv + h) * w + c;
  }
  if (!p.varlen) return ((b * p.heads_kv + h) * p.n_k + j) * w + c;
  const HostTensor& at = p.padded ? in.cu_seqlens_k_padded : in.cu_seqlens_k;
  return ((int64_t(at.get(b)) + j) * p.heads_kv + h) * w + c;
}
inline int64_t lse_at(const Inputs& in, int64_t b, int64_t h, int64_t i) {
  const Problem& p = in.p;
  if (!p.varlen) return (b * p.heads_q + h) * p.n_q + i;
  return h * p.total_q + int64_t((p.padded ? in.cu_seqlens_q_padded : in.cu_seqlens_q).get(b)) + i;
}

// Sequence b of a varlen / paged batch as a dense batch-1 problem (its lengths must be >= 1).
inline Inputs sequence_of(const Inputs& in, int64_t b) {
  const Problem& p = in.p;
  Inputs out;
  Problem& s = out.p;
  s = p;
  s.batch = 1, s.varlen = false, s.padded = false, s.total_q = s.total_k = 0;
  s.page_size = s.num_pages = s.pages_per_seq = 0;
  s.n_q = int32_t(seq_len(in.cu_seqlens_q, b)), s.n_k = int32_t(seq_len(in.cu_seqlens_k, b));
  const int64_t d = p.d, dv = head_dim_v(p);
  auto cut_q = [&](const HostTensor& t, int64_t w) {
    HostTensor x(t.dtype, {1, p.heads_q, s.n_q, w});
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < s.n_q; ++i)
        for (int64_t c = 0; c < w; ++c) x.set((h * s.n_q + i) * w + c, t.get(q_at(in, b, h, i, c, w)));
    return x;
  };
  auto cut_kv = [&](const HostTensor& t, int64_t w) {
    HostTensor x(t.dtype, {1, p.heads_kv, s.n_k, w});
    for (int64_t h = 0; h < p.heads_kv; ++h)
      for (int64_t j = 0; j < s.n_k; ++j)
        for (int64_t c = 0; c < w; ++c) x.set((h * s.n_k + j) * w + c, t.get(kv_at(in, b, h, j, c, w)));
    return x;
  };
  out.q = cut_q(in.q, d), out.d_o = cut_q(in.d_o, dv);
  out.k = cut_kv(in.k, d), out.v = cut_kv(in.v, dv);
  out.alibi_slopes = in.alibi_slopes;
  return out;
}

// A paged batch with the same keys laid out contiguously (plain varlen).
inline Inputs unpaged(const Inputs& in) {
  Inputs out = in;
  Problem& p = out.p;
  p.page_size = p.num_pages = p.pages_per_seq = 0;
  out.page_table = HostTensor();
  const int64_t d = p.d, dv = head_dim_v(p);
  out.k = HostTensor(in.k.dtype, {p.total_k, p.heads_kv, d});
  out.v = HostTensor(in.v.dtype, {p.total_k, p.heads_kv, dv});
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_kv; ++h)
      for (int64_t j = 0; j < seq_len(in.cu_seqlens_k, b); ++j) {
        const int64_t row = (int64_t(in.cu_seqlens_k.get(b)) + j) * p.heads_kv + h;
        for (int64_t c = 0; c < d; ++c) out.k.set(row * d + c, in.k.get(kv_at(in, b, h, j, c, d)));
        for (int64_t c = 0; c < dv; ++c) out.v.set(row * dv + c, in.v.get(kv_at(in, b, h, j, c, dv)));
      }
  return out;
}

}  // namespace fc::test
