#include "reports/variant_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

namespace fc::report {

namespace {

const std::vector<std::string> kVariantRegimes = {"varlen",        "paged",     "window",        "softcap",
                                                  "alibi",         "d_v",       "strides",       "sinks",
                                                  "padded_varlen", "mask_bool", "mask_additive", "block_mask"};
// Contract v3's regimes: in the full plan only (the quick plan, and so the committed baseline, is
// contract v2's).
const std::vector<std::string> kFullOnly = {"sinks", "padded_varlen", "mask_bool", "mask_additive", "block_mask"};

std::string mask_tag(Mask m) { return m == Mask::CausalTopLeft ? "_tl" : m == Mask::CausalBottomRight ? "_br" : ""; }

CaseSpec make_case(DType t, const std::string& regime, int32_t heads_q, int32_t heads_kv, int32_t n_q, int32_t n_k,
                   int32_t d, Mask mask, const std::string& tag) {
  CaseSpec c;
  c.regime = regime;
  c.p = Problem{1, heads_q, heads_kv, n_q, n_k, d, t, mask, default_scale(d)};
  const std::string shape = n_q == n_k ? fmt::format("n{}", n_q) : fmt::format("q{}k{}", n_q, n_k);
  c.id = fmt::format("{}/{}/{}{}{}", dtype_name(t), regime, shape, mask_tag(mask), tag);
  c.backward = int64_t(n_q) * n_k <= int64_t(1024) * 1024;
  return c;
}

// A varlen batch of longest length n: a sequence with no query (but keys), a full one, one query
// with no key (o = 0, lse = -inf), a middling one, an empty one and one with 3 fewer queries than
// keys (where the alignments differ).
CaseSpec varlen_case(DType t, const std::string& regime, int32_t n, Mask mask, const std::string& tag) {
  CaseSpec c = make_case(t, regime, 2, 2, n, n, 64, mask, tag);
  c.len_q = {0, n, 1, n / 2 + 5, 0, n - 3};
  c.len_k = {n / 2, n, 0, n / 2 + 5, 0, n};
  Problem& p = c.p;
  p.varlen = true;
  p.batch = int32_t(c.len_q.size());
  p.total_q = std::accumulate(c.len_q.begin(), c.len_q.end(), int64_t(0));
  p.total_k = std::accumulate(c.len_k.begin(), c.len_k.end(), int64_t(0));
  return c;
}

// Pages each sequence's keys need, and the table's width.
std::vector<int32_t> pages_needed(const CaseSpec& c) {
  std::vector<int32_t> need;
  for (int32_t len : c.len_k) need.push_back((len + c.p.page_size - 1) / c.p.page_size);
  return need;
}

CaseSpec paged_case(DType t, int32_t n, int32_t page_size, Mask mask) {
  CaseSpec c = varlen_case(t, "paged", n, mask, fmt::format("_p{}", page_size));
  Problem& p = c.p;
  p.page_size = page_size;
  p.pages_per_seq = (p.n_k + page_size - 1) / page_size;
  const std::vector<int32_t> need = pages_needed(c);
  p.num_pages = std::accumulate(need.begin(), need.end(), 0) + 1;  // one spare page no sequence reads
  return c;
}

CaseSpec window_case(DType t, int32_t n_q, int32_t n_k, Mask mask, int32_t left, int32_t right) {
  CaseSpec c = make_case(t, "window", 2, 2, n_q, n_k, 64, mask,
                         right < 0 ? fmt::format("_w{}", left) : fmt::format("_w{}_{}", left, right));
  c.p.window_left = left, c.p.window_right = right;
  return c;
}

CaseSpec softcap_case(DType t, int32_t n, int32_t sigma, double cap) {
  CaseSpec c = make_case(t, "softcap", 2, 2, n, n, 64, Mask::None, fmt::format("_s{}_c{}", sigma * sigma, cap));
  c.sigma = sigma;  // scores of standard deviation sigma^2: the cap bites from a few sigma^2 up
  c.p.softcap = cap;
  return c;
}

CaseSpec alibi_case(DType t, int32_t n, int32_t heads, Mask mask) {
  CaseSpec c = make_case(t, "alibi", heads, heads, n, n, 64, mask, fmt::format("_h{}", heads));
  c.p.alibi = true;
  return c;
}

CaseSpec d_v_case(DType t, int32_t n, int32_t d, int32_t d_v, Mask mask) {
  CaseSpec c = make_case(t, "d_v", 2, 2, n, n, d, mask, fmt::format("_d{}_dv{}", d, d_v));
  c.p.d_v = d_v;
  return c;
}

CaseSpec strides_case(DType t, int32_t n, const std::string& layout) {
  CaseSpec c = make_case(t, "strides", 2, 2, n, n, 64, Mask::None, "_" + layout);
  c.layout = layout;
  return c;
}

// Attention sinks, one fp32 logit per query head: none (-inf), about log n_k (the sink weighs as much
// as the keys), far above the scores (o near 0, lse the sink's) and far below (no effect).
CaseSpec sinks_case(DType t, int32_t n, std::vector<double> sinks, Mask mask) {
  const int32_t heads = int32_t(sinks.size());
  CaseSpec c = make_case(t, "sinks", heads, heads, n, n, 64, mask, fmt::format("_h{}", heads));
  c.p.sinks = true;
  c.sinks = std::move(sinks);
  return c;
}

// A varlen batch (varlen_case) stored padded: pad_q[b], pad_k[b] tokens before sequence b, the last
// entry after the last sequence.
CaseSpec padded_case(DType t, int32_t n, Mask mask, std::vector<int32_t> pad_q, std::vector<int32_t> pad_k) {
  CaseSpec c = varlen_case(t, "padded_varlen", n, mask, "");
  c.p.padded = true;
  c.p.total_q += std::accumulate(pad_q.begin(), pad_q.end(), int64_t(0));
  c.p.total_k += std::accumulate(pad_k.begin(), pad_k.end(), int64_t(0));
  c.pad_q = std::move(pad_q), c.pad_k = std::move(pad_k);
  return c;
}

// Mask tensors and block masks (dense problems, the certified float64 oracle's like every other).
CaseSpec masked_case(DType t, const std::string& regime, int32_t batch, int32_t heads, int32_t n_q, int32_t n_k,
                     Mask mask, const std::string& pattern, const std::string& tag) {
  CaseSpec c =
      make_case(t, regime, heads, heads, n_q, n_k, 64, mask, fmt::format("_b{}h{}{}_{}", batch, heads, tag, pattern));
  c.p.batch = batch;
  c.mask_pattern = pattern;
  return c;
}

CaseSpec mask_case(DType t, MaskKind kind, DType mask_dtype, int32_t batch, int32_t heads, int32_t n_q, int32_t n_k,
                   Mask mask, int32_t mask_b, int32_t mask_h, const std::string& pattern) {
  const bool additive = kind == MaskKind::Additive;
  CaseSpec c = masked_case(
      t, additive ? "mask_additive" : "mask_bool", batch, heads, n_q, n_k, mask, pattern,
      fmt::format("_m{}x{}{}", mask_b, mask_h, additive ? std::string("_") + dtype_name(mask_dtype) : std::string()));
  c.p.mask_kind = kind;
  c.p.mask_dtype = additive ? mask_dtype : DType::F32;
  c.p.mask_b = mask_b, c.p.mask_h = mask_h;
  return c;
}

CaseSpec block_case(DType t, int32_t batch, int32_t heads, int32_t n_q, int32_t n_k, Mask mask, int32_t block_q,
                    int32_t block_k, int32_t block_b, int32_t block_h) {
  CaseSpec c = masked_case(t, "block_mask", batch, heads, n_q, n_k, mask, "random",
                           fmt::format("_bl{}x{}_m{}x{}", block_q, block_k, block_b, block_h));
  c.p.block_q = block_q, c.p.block_k = block_k;
  c.p.block_b = block_b, c.p.block_h = block_h;
  return c;
}

uint64_t id_hash(const std::string& id) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : id) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

}  // namespace

const std::vector<std::string>& variant_regime_names() { return kVariantRegimes; }

bool full_plan_only(const std::string& regime) {
  return std::find(kFullOnly.begin(), kFullOnly.end(), regime) != kFullOnly.end();
}

std::vector<int32_t> padded_starts(const CaseSpec& c, bool keys) {
  const std::vector<int32_t>& len = keys ? c.len_k : c.len_q;
  const std::vector<int32_t>& pad = keys ? c.pad_k : c.pad_q;
  std::vector<int32_t> at;
  for (size_t b = 0, x = 0; b <= len.size(); ++b) {
    x += size_t(pad[b]);
    at.push_back(int32_t(x));
    if (b < len.size()) x += size_t(len[b]);
  }
  return at;  // batch + 1 entries, the last the total
}

std::vector<CaseSpec> variant_cases(DType t, bool quick) {
  using M = Mask;
  std::vector<CaseSpec> out;
  if (quick) {  // one small case of each, both windows' alignments (CI runs it several times)
    out.push_back(varlen_case(t, "varlen", 32, M::CausalBottomRight, ""));
    out.push_back(paged_case(t, 32, 7, M::None));
    out.push_back(window_case(t, 32, 16, M::CausalTopLeft, 9, 0));
    out.push_back(window_case(t, 16, 32, M::CausalBottomRight, 9, 0));
    out.push_back(softcap_case(t, 32, 4, 8));
    out.push_back(alibi_case(t, 32, 4, M::None));  // both sides of the row: |i' - j| in full
    out.push_back(d_v_case(t, 32, 128, 64, M::None));
    out.push_back(strides_case(t, 32, "mixed"));
    return out;
  }
  // N up to 512 only: the variants' cells cover the contract, the normal regime covers length.
  out.push_back(varlen_case(t, "varlen", 128, M::None, ""));
  out.push_back(varlen_case(t, "varlen", 256, M::CausalBottomRight, ""));
  for (int32_t ps : {1, 7, 16, 64}) out.push_back(paged_case(t, 128, ps, ps % 2 ? M::None : M::CausalBottomRight));
  // Windows one key past a 64-key tile, under each alignment (and the rows that see no key); FA's
  // (left, 0) with the causal mask; a two-sided window without one; a long row's window.
  out.push_back(window_case(t, 256, 128, M::CausalTopLeft, 65, 0));
  out.push_back(window_case(t, 128, 256, M::CausalBottomRight, 65, 0));
  out.push_back(window_case(t, 256, 128, M::CausalBottomRight, 65, 0));
  out.push_back(window_case(t, 128, 128, M::None, 31, 31));
  out.push_back(window_case(t, 512, 512, M::CausalBottomRight, 127, -1));
  out.push_back(softcap_case(t, 128, 1, 2));
  out.push_back(softcap_case(t, 128, 4, 30));
  out.push_back(softcap_case(t, 128, 8, 50));
  out.push_back(alibi_case(t, 128, 8, M::None));
  out.push_back(alibi_case(t, 512, 2, M::CausalBottomRight));
  out.push_back(d_v_case(t, 128, 128, 64, M::None));
  out.push_back(d_v_case(t, 128, 64, 128, M::CausalBottomRight));
  out.push_back(strides_case(t, 128, "bshd"));
  out.push_back(strides_case(t, 128, "mixed"));
  // Contract v3. Sinks of every kind, the causal mask with two of them.
  const double inf = std::numeric_limits<double>::infinity();
  out.push_back(sinks_case(t, 128, {-inf, 4.75, 40, -40}, M::None));
  out.push_back(sinks_case(t, 128, {0, 2.5}, M::CausalBottomRight));
  // Padding before the first sequence, between sequences (empty ones too) and after the last.
  out.push_back(padded_case(t, 64, M::None, {2, 0, 1, 3, 0, 7, 16}, {0, 3, 1, 0, 2, 16, 5}));
  out.push_back(padded_case(t, 128, M::CausalBottomRight, {0, 1, 2, 3, 7, 0, 1}, {1, 0, 7, 2, 3, 16, 0}));
  // Masks broadcast over the batch or the heads, random (one row all hidden) or key padding, alone and
  // with the causal mask; additive ones in F32 and in the case's dtype.
  out.push_back(mask_case(t, MaskKind::Bool, DType::F32, 1, 2, 32, 16, M::None, 1, 2, "random"));
  out.push_back(mask_case(t, MaskKind::Bool, DType::F32, 2, 1, 16, 32, M::CausalBottomRight, 2, 1, "key_padding"));
  out.push_back(mask_case(t, MaskKind::Additive, DType::F32, 1, 2, 32, 16, M::None, 1, 1, "random"));
  out.push_back(mask_case(t, MaskKind::Additive, t, 2, 1, 16, 32, M::CausalTopLeft, 1, 1, "key_padding"));
  // Block masks of square-ish and ragged blocks (the last block row and column partial).
  out.push_back(block_case(t, 1, 2, 32, 16, M::None, 8, 4, 1, 2));
  out.push_back(block_case(t, 2, 1, 16, 32, M::CausalBottomRight, 3, 7, 1, 1));
  return out;
}

void add_structure(const CaseSpec& c, Inputs& in) {
  const Problem& p = c.p;
  if (p.varlen) {
    in.cu_seqlens_q = HostTensor(DType::I32, {p.batch + 1});
    in.cu_seqlens_k = HostTensor(DType::I32, {p.batch + 1});
    for (int32_t b = 0, q = 0, k = 0; b < p.batch; ++b) {
      in.cu_seqlens_q.set(b + 1, q += c.len_q[size_t(b)]);
      in.cu_seqlens_k.set(b + 1, k += c.len_k[size_t(b)]);
    }
  }
  if (is_paged(p)) {
    // Physical pages in an order drawn from the id (Fisher-Yates over a splitmix sequence: the same
    // table on every platform); sequences take them in turn, columns past a sequence's keys the spare.
    std::vector<int32_t> perm(size_t(p.num_pages));
    std::iota(perm.begin(), perm.end(), 0);
    uint64_t x = id_hash(c.id);
    for (size_t i = perm.size(); i > 1; --i) {
      x += 0x9e3779b97f4a7c15ull;
      const uint64_t r = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
      std::swap(perm[i - 1], perm[size_t((r ^ (r >> 29)) % i)]);
    }
    const std::vector<int32_t> need = pages_needed(c);
    in.page_table = HostTensor(DType::I32, {p.batch, p.pages_per_seq});
    size_t next = 0;
    for (int32_t b = 0; b < p.batch; ++b)
      for (int32_t col = 0; col < p.pages_per_seq; ++col)
        in.page_table.set(int64_t(b) * p.pages_per_seq + col, col < need[size_t(b)] ? perm[next++] : perm.back());
  }
  if (p.padded) {
    for (bool keys : {false, true}) {
      const std::vector<int32_t> at = padded_starts(c, keys);
      HostTensor& t = keys ? in.cu_seqlens_k_padded : in.cu_seqlens_q_padded;
      t = HostTensor(DType::I32, {p.batch + 1});
      for (int32_t b = 0; b <= p.batch; ++b) t.set(b, at[size_t(b)]);
    }
  }
  if (p.sinks) {
    in.sinks = HostTensor(DType::F32, {p.heads_q});
    for (int32_t h = 0; h < p.heads_q; ++h) in.sinks.set(h, c.sinks[size_t(h)]);
  }
  // Masks drawn from the id (raw mt19937_64 words only: the same bits on every platform).
  std::mt19937_64 rng(id_hash(c.id));
  if (has_mask_tensor(p)) {
    const bool additive = p.mask_kind == MaskKind::Additive;
    const int64_t slices = int64_t(p.mask_b) * p.mask_h, n_q = p.n_q, n_k = p.n_k;
    in.mask = HostTensor(additive ? p.mask_dtype : DType::BOOL, {p.mask_b, p.mask_h, n_q, n_k});
    const int64_t hidden_row = int64_t(rng() % uint64_t(n_q));
    for (int64_t s = 0; s < slices; ++s) {
      const int64_t visible = 1 + int64_t(rng() % uint64_t(n_k - 1));  // key padding: the first keys, not all
      for (int64_t i = 0; i < n_q; ++i)
        for (int64_t j = 0; j < n_k; ++j) {
          const bool on = c.mask_pattern == "key_padding" ? j < visible : i != hidden_row && rng() % 2;
          double x = on ? 1.0 : 0.0;
          if (additive) {  // 0, -8 .. 8 in halves, -1e4 or -3e4 (finite in every mask dtype), -inf where hidden
            const uint64_t pick = rng() % 8;
            x = !on         ? -std::numeric_limits<double>::infinity()
                : pick < 3  ? 0.0
                : pick < 6  ? std::ldexp(double(int64_t(rng() % 33) - 16), -1)
                : rng() % 2 ? -1e4
                            : -3e4;
          }
          in.mask.set((s * n_q + i) * n_k + j, x);
        }
    }
  }
  if (has_block_mask(p)) {
    const int64_t rows = (int64_t(p.n_q) + p.block_q - 1) / p.block_q;
    const int64_t cols = (int64_t(p.n_k) + p.block_k - 1) / p.block_k;
    in.block_mask = HostTensor(DType::BOOL, {p.block_b, p.block_h, rows, cols});
    const int64_t hidden_row = int64_t(rng() % uint64_t(rows));  // one block row all false
    for (int64_t x = 0; x < in.block_mask.numel(); ++x)
      in.block_mask.set(x, x / cols % rows != hidden_row && rng() % 2 ? 1.0 : 0.0);
  }
  if (p.alibi) {  // the ALiBi paper's geometric slopes 2^(-8 (h + 1) / H)
    in.alibi_slopes = HostTensor(DType::F32, {p.heads_q});
    for (int32_t h = 0; h < p.heads_q; ++h) in.alibi_slopes.set(h, std::exp2(-8.0 * double(h + 1) / p.heads_q));
  }
}

void finish_layout(const CaseSpec& c, Inputs& in) {
  const Problem& p = c.p;
  if (is_paged(p)) {
    std::vector<char> read(size_t(p.num_pages) * p.page_size, 0);
    const Seqs s = in.seqs();
    for (int32_t b = 0; b < p.batch; ++b)
      for (int64_t j = 0; j < seq_n_k(p, s, b); ++j) read[size_t(kv_row(p, s, b, 0, j) / p.heads_kv)] = 1;
    for (HostTensor* t : {&in.k, &in.v}) {
      const int64_t row = t->numel() / (int64_t(p.num_pages) * p.page_size);  // heads_kv x width
      for (size_t slot = 0; slot < read.size(); ++slot)
        if (!read[slot])
          for (int64_t e = 0; e < row; ++e) t->set(int64_t(slot) * row + e, e % 2 ? 100.0 : -100.0);
    }
  }
  if (p.padded) {  // padding tokens far off: a kernel that reads one is far off
    const Seqs s = in.seqs();
    for (bool keys : {false, true}) {
      std::vector<char> used(size_t(keys ? p.total_k : p.total_q), 0);
      for (int32_t b = 0; b < p.batch; ++b) {
        const int64_t start = keys ? seq_start_k(p, s, b) : seq_start_q(p, s, b);
        const int64_t len = keys ? seq_n_k(p, s, b) : seq_n_q(p, s, b);
        for (int64_t i = 0; i < len; ++i) used[size_t(start + i)] = 1;
      }
      for (HostTensor* t : keys ? std::vector<HostTensor*>{&in.k, &in.v} : std::vector<HostTensor*>{&in.q, &in.d_o}) {
        if (t->shape.empty()) continue;
        const int64_t row = t->numel() / int64_t(used.size());  // heads x width
        for (size_t tok = 0; tok < used.size(); ++tok)
          if (!used[tok])
            for (int64_t e = 0; e < row; ++e) t->set(int64_t(tok) * row + e, e % 2 ? 100.0 : -100.0);
      }
    }
  }
  if (c.layout.empty()) return;
  for (HostTensor* t : {&in.q, &in.k, &in.v, &in.d_o}) {
    if (t->shape.empty()) continue;
    if (c.layout == "bshd")  // (batch, n, heads, width) storage, 8 elements of padding after each row
      *t = t->laid_out({0, 2, 1, 3}, 1, {0, 0, 0, 8}, {});
    else  // heads outermost, each head stored transposed (tokens innermost, every other element), tokens reversed
      *t = t->laid_out({1, 0, 3, 2}, 2, {0, 1, 1, 3}, {2});
  }
}

}  // namespace fc::report
