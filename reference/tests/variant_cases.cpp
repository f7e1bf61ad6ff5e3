// See variant_cases.hpp.
#include "variant_cases.hpp"

#include <cmath>
#include <random>

namespace fc::ref::testing {

int64_t n_q_of(const Problem& p, const SeqData& s, int64_t b) {
  return p.varlen ? s.cu_seqlens_q[size_t(b + 1)] - s.cu_seqlens_q[size_t(b)] : p.n_q;
}
int64_t n_k_of(const Problem& p, const SeqData& s, int64_t b) {
  return p.varlen ? s.cu_seqlens_k[size_t(b + 1)] - s.cu_seqlens_k[size_t(b)] : p.n_k;
}

int64_t q_index(const Problem& p, const SeqData& s, int64_t b, int64_t h, int64_t i, int64_t c, int64_t w) {
  if (!p.varlen) return b * p.heads_q * p.n_q * w + h * p.n_q * w + i * w + c;  // (batch, heads, n, w)
  const int64_t token = (p.padded ? s.cu_seqlens_q_padded : s.cu_seqlens_q)[size_t(b)] + i;  // (total, heads, w)
  return token * p.heads_q * w + h * w + c;
}

int64_t kv_index(const Problem& p, const SeqData& s, int64_t b, int64_t h, int64_t j, int64_t c, int64_t w) {
  if (p.page_size > 0) {  // (pages, page_size, heads, w): logical page j / page_size of sequence b
    const int64_t page = s.page_table[size_t(b * p.pages_per_seq + j / p.page_size)];
    return page * p.page_size * p.heads_kv * w + (j % p.page_size) * p.heads_kv * w + h * w + c;
  }
  if (!p.varlen) return b * p.heads_kv * p.n_k * w + h * p.n_k * w + j * w + c;
  const int64_t token = (p.padded ? s.cu_seqlens_k_padded : s.cu_seqlens_k)[size_t(b)] + j;
  return token * p.heads_kv * w + h * w + c;
}

int64_t lse_at(const Problem& p, const SeqData& s, int64_t b, int64_t h, int64_t i) {
  if (!p.varlen) return (b * p.heads_q + h) * p.n_q + i;  // (batch, heads, n)
  return h * p.total_q + (p.padded ? s.cu_seqlens_q_padded : s.cu_seqlens_q)[size_t(b)] + i;  // (heads, total)
}

void set_varlen(Problem& p, SeqData& s, const std::vector<int32_t>& len_q, const std::vector<int32_t>& len_k) {
  p.varlen = true;
  p.batch = int32_t(len_q.size());
  s.cu_seqlens_q = {0}, s.cu_seqlens_k = {0};
  p.n_q = p.n_k = 0;
  for (size_t b = 0; b < len_q.size(); ++b) {
    s.cu_seqlens_q.push_back(s.cu_seqlens_q.back() + len_q[b]);
    s.cu_seqlens_k.push_back(s.cu_seqlens_k.back() + len_k[b]);
    p.n_q = std::max(p.n_q, len_q[b]), p.n_k = std::max(p.n_k, len_k[b]);
  }
  p.total_q = s.cu_seqlens_q.back(), p.total_k = s.cu_seqlens_k.back();
}

void set_padded(Problem& p, SeqData& s, const std::vector<int32_t>& pad_q, const std::vector<int32_t>& pad_k) {
  p.padded = true;
  s.cu_seqlens_q_padded = pad_q, s.cu_seqlens_k_padded = pad_k;
  p.total_q = pad_q.back(), p.total_k = pad_k.back();
}

Tensors64 fill(const Problem& p, SeqData seq, double qk_sigma, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  auto draw = [&](int64_t n, double s) {
    std::vector<double> x(static_cast<size_t>(n));
    for (auto& e : x) e = std::round(64 * s * dist(rng)) / 64;
    return x;
  };
  Tensors64 in;
  in.q = draw(numel_q(p), qk_sigma);
  in.k = draw(numel_kv(p), qk_sigma);
  in.v = draw(numel_v(p), 1.0);
  in.d_o = draw(numel_o(p), 1.0);
  in.seq = std::move(seq);
  return in;
}

namespace {

Problem base(int32_t batch, int32_t hq, int32_t hkv, int32_t n_q, int32_t n_k, int32_t d, Mask m) {
  Problem p;
  p.batch = batch, p.heads_q = hq, p.heads_kv = hkv, p.n_q = n_q, p.n_k = n_k, p.d = d;
  p.dtype = DType::F64, p.mask = m, p.scale = 1 / std::sqrt(double(d));
  return p;
}

}  // namespace

std::vector<VariantCase> variant_cases() {
  std::vector<VariantCase> cs;
  auto add = [&](std::string name, Problem p, SeqData s, double sigma, uint64_t seed) {
    cs.push_back({std::move(name), p, fill(p, std::move(s), sigma, seed)});
  };
  {  // lengths 3, 0, 5, 1 against 4, 2, 0, 6: an empty query sequence, a sequence with no keys
    Problem p = base(1, 2, 1, 1, 1, 4, Mask::CausalBottomRight);
    SeqData s;
    set_varlen(p, s, {3, 0, 5, 1}, {4, 2, 0, 6});
    add("varlen GQA 2/1, causal_bottom_right, zero-length sequences", p, s, 1, 21);
  }
  {  // total tokens < batch
    Problem p = base(1, 1, 1, 1, 1, 3, Mask::None);
    SeqData s;
    set_varlen(p, s, {0, 2, 0, 0, 1}, {1, 0, 0, 3, 2});
    add("varlen, total tokens < batch, no mask", p, s, 1, 22);
  }
  {  // paged: page size 3, pages in reversed order and one page shared by two sequences
    Problem p = base(1, 2, 2, 1, 1, 4, Mask::CausalTopLeft);
    SeqData s;
    set_varlen(p, s, {4, 2, 3}, {7, 5, 7});
    p.page_size = 3, p.num_pages = 6, p.pages_per_seq = 3;
    s.page_table = {5, 4, 3, 2, 1, 0, 1, 5, 5};  // page 1 shared; page 5 used by sequences 0 and 2, twice by 2
    add("paged size 3, reversed and repeated pages, causal_top_left", p, s, 1, 23);
  }
  {
    Problem p = base(2, 2, 1, 7, 9, 4, Mask::None);
    p.window_left = 2, p.window_right = 1;
    add("window (2, 1), no mask, n_q < n_k", p, {}, 1, 24);
  }
  {
    Problem p = base(1, 1, 1, 9, 6, 4, Mask::CausalBottomRight);
    p.window_left = 0, p.window_right = 3;
    add("window (0, 3) with causal_bottom_right, n_q > n_k", p, {}, 1, 25);
  }
  {
    Problem p = base(1, 2, 2, 6, 8, 4, Mask::CausalTopLeft);
    p.window_left = 3, p.window_right = 0;
    add("window (3, 0) with causal_top_left", p, {}, 1, 26);
  }
  {  // scores ~ +-16 against a cap of 2: most scores saturate
    Problem p = base(1, 2, 1, 5, 7, 4, Mask::None);
    p.softcap = 2;
    add("softcap 2, scores well past it", p, {}, 4, 27);
  }
  {
    Problem p = base(1, 1, 1, 6, 6, 4, Mask::CausalTopLeft);
    p.softcap = 50;
    add("softcap 50, causal_top_left", p, {}, 2, 28);
  }
  {
    Problem p = base(1, 3, 1, 5, 8, 4, Mask::None);
    p.alibi = true;
    SeqData s;
    s.alibi_slopes = {0.5, 0.25, 0.0078125};
    add("ALiBi, GQA 3/1, no mask, n_q < n_k", p, s, 1, 29);
  }
  {
    Problem p = base(1, 2, 2, 7, 5, 4, Mask::CausalBottomRight);
    p.alibi = true, p.softcap = 3;
    p.window_left = 2;
    SeqData s;
    s.alibi_slopes = {-0.75, 3.0};
    add("ALiBi after softcap, window (2, -1), causal_bottom_right", p, s, 2, 30);
  }
  {
    Problem p = base(1, 2, 1, 5, 6, 5, Mask::CausalTopLeft);
    p.d_v = 3;
    add("d_v = 3, d = 5", p, {}, 1, 31);
  }
  {  // everything at once
    Problem p = base(1, 4, 2, 1, 1, 4, Mask::CausalBottomRight);
    SeqData s;
    set_varlen(p, s, {2, 5, 0}, {6, 4, 3});
    p.page_size = 2, p.num_pages = 6, p.pages_per_seq = 3;  // page 5 is never read
    s.page_table = {4, 0, 2, 1, 3, 1, 0, 0, 4};
    p.window_left = 3, p.window_right = 2, p.softcap = 5, p.alibi = true, p.d_v = 6;
    s.alibi_slopes = {0.25, 0.5, 1.0, 0.125};
    add("varlen paged window softcap ALiBi d_v, GQA 4/2", p, s, 1.5, 32);
  }
  // Attention sinks (contract v3), appended so that the cases above keep their indices.
  {  // rows 0, 1 see no key: o = 0, lse = the sink; head 1's sink at -inf is no sink
    Problem p = base(1, 2, 1, 6, 4, 4, Mask::CausalBottomRight);
    p.sinks = true;
    SeqData s;
    s.sinks = {1.5, -INFINITY};
    add("sinks 1.5 and -inf, GQA 2/1, causal_bottom_right with rows of no key", p, s, 1, 33);
  }
  {  // a sink above every score, a sequence of no key, ALiBi and a window
    Problem p = base(1, 2, 2, 1, 1, 4, Mask::CausalBottomRight);
    SeqData s;
    set_varlen(p, s, {3, 2, 4, 0}, {5, 0, 3, 2});
    p.sinks = true, p.alibi = true, p.window_left = 1;
    s.sinks = {8.0, -3.0};
    s.alibi_slopes = {0.25, 0.5};
    add("sinks 8 and -3, varlen with sequences of no key and of no query, ALiBi, window (1, -1), causal_bottom_right",
        p, s, 1, 34);
  }
  {  // huge scores take certified's MPFR path: a sink below the row max and one above every score
    Problem p = base(1, 2, 1, 3, 5, 4, Mask::None);
    p.sinks = true;
    SeqData s;
    s.sinks = {0.0, 0x1p53};
    add("sinks 0 and 2^53 under scores near 2^48 (MPFR rows)", p, s, 0x1p24, 35);
  }
  // Padded varlen (contract v3).
  {  // lengths q (3, 0, 5, 2), k (4, 2, 0, 6) at padded offsets: leading padding, an empty sequence between
    Problem p = base(1, 2, 1, 1, 1, 4, Mask::CausalBottomRight);
    SeqData s;
    set_varlen(p, s, {3, 0, 5, 2}, {4, 2, 0, 6});
    set_padded(p, s, {2, 7, 9, 14, 17}, {0, 4, 9, 10, 17});
    p.d_v = 6;
    add("padded varlen GQA 2/1, causal_bottom_right, zero-length sequences, d_v 6", p, s, 1, 36);
  }
  return cs;
}

Dense dense_sequence(const Problem& p, const Tensors64& in, int64_t b) {
  Dense out;
  Problem& q = out.p;
  q = p;
  q.batch = 1, q.varlen = false, q.padded = false, q.total_q = q.total_k = 0;
  q.page_size = q.num_pages = q.pages_per_seq = 0;
  q.n_q = int32_t(n_q_of(p, in.seq, b)), q.n_k = int32_t(n_k_of(p, in.seq, b));
  const int64_t d = p.d, dv = head_dim_v(p);
  auto copy_q = [&](const std::vector<double>& src, int64_t w) {
    std::vector<double> x;
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < q.n_q; ++i)
        for (int64_t c = 0; c < w; ++c) x.push_back(src[size_t(q_index(p, in.seq, b, h, i, c, w))]);
    return x;
  };
  auto copy_kv = [&](const std::vector<double>& src, int64_t w) {
    std::vector<double> x;
    for (int64_t h = 0; h < p.heads_kv; ++h)
      for (int64_t j = 0; j < q.n_k; ++j)
        for (int64_t c = 0; c < w; ++c) x.push_back(src[size_t(kv_index(p, in.seq, b, h, j, c, w))]);
    return x;
  };
  out.in.q = copy_q(in.q, d);
  out.in.d_o = in.d_o.empty() ? std::vector<double>{} : copy_q(in.d_o, dv);
  out.in.k = copy_kv(in.k, d);
  out.in.v = copy_kv(in.v, dv);
  if (p.alibi) out.in.seq.alibi_slopes = in.seq.alibi_slopes;
  if (p.sinks) out.in.seq.sinks = in.seq.sinks;
  return out;
}

}  // namespace fc::ref::testing
