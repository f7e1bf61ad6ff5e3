#include "properties/variant_gen.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace fc::props {
namespace {

HostTensor ints(std::vector<int64_t> shape, const std::vector<int32_t>& x) {
  HostTensor t(DType::I32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, x[size_t(i)]);
  return t;
}

int32_t pick(Rng& rng, std::initializer_list<int32_t> xs) { return *(xs.begin() + rng() % xs.size()); }

std::vector<int32_t> lengths_of(const HostTensor& cu) {
  std::vector<int32_t> out;
  for (int64_t b = 0; b + 1 < cu.numel(); ++b) out.push_back(int32_t(cu.get(b + 1) - cu.get(b)));
  return out;
}

}  // namespace

SeqLens draw_lengths(Rng& rng, int32_t batch, int32_t n_q, int32_t n_k) {
  SeqLens s;
  const int32_t extra = int32_t(rng() % 4);
  const bool tiny = rng() % 8 == 0;  // every length 0 or 1: fewer tokens than sequences
  auto len = [&](int32_t n) -> int32_t {
    if (tiny) return std::min<int32_t>(n, int32_t(rng() % 2));
    switch (rng() % 6) {
      case 0: return 0;
      case 1: return std::min(1, n);
      case 2:
      case 3: return n;
      default: return int32_t(rng() % uint64_t(n + 1));
    }
  };
  for (int32_t b = 0; b < batch + extra; ++b) {
    s.src.push_back(b < batch ? b : int32_t(rng() % uint64_t(batch)));
    s.q.push_back(len(n_q));
    s.k.push_back(len(n_k));
  }
  return s;
}

std::string describe(const SeqLens& s) {
  std::string out = "varlen (len_q, len_k):";
  for (size_t b = 0; b < s.q.size(); ++b) out += fmt::format(" ({}, {})", s.q[b], s.k[b]);
  return out;
}

Inputs to_varlen(const Inputs& dense, const SeqLens& lens) {
  const Problem& d = dense.p;
  Inputs v;
  Problem& p = v.p;
  p = d;
  p.varlen = true;
  p.batch = int32_t(lens.q.size());
  std::vector<int32_t> cu_q = {0}, cu_k = {0};
  for (size_t b = 0; b < lens.q.size(); ++b)
    cu_q.push_back(cu_q.back() + lens.q[b]), cu_k.push_back(cu_k.back() + lens.k[b]);
  p.n_q = *std::max_element(lens.q.begin(), lens.q.end());
  p.n_k = *std::max_element(lens.k.begin(), lens.k.end());
  p.total_q = cu_q.back(), p.total_k = cu_k.back();
  v.cu_seqlens_q = ints({p.batch + 1}, cu_q);
  v.cu_seqlens_k = ints({p.batch + 1}, cu_k);
  v.alibi_slopes = dense.alibi_slopes;
  v.sinks = dense.sinks;
  const int64_t dv = head_dim_v(p);
  auto pack = [&](const HostTensor& from, int64_t heads, int64_t n_dense, int64_t width, bool queries) {
    HostTensor to(from.dtype, {queries ? p.total_q : p.total_k, heads, width});
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t len = queries ? lens.q[size_t(b)] : lens.k[size_t(b)],
                    at = queries ? cu_q[size_t(b)] : cu_k[size_t(b)];
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < len; ++i)
          for (int64_t c = 0; c < width; ++c)
            to.set(((at + i) * heads + h) * width + c,
                   from.get(((lens.src[size_t(b)] * heads + h) * n_dense + i) * width + c));
    }
    return to;
  };
  v.q = pack(dense.q, d.heads_q, d.n_q, d.d, true);
  v.k = pack(dense.k, d.heads_kv, d.n_k, d.d, false);
  v.v = pack(dense.v, d.heads_kv, d.n_k, dv, false);
  if (dense.has_d_o()) v.d_o = pack(dense.d_o, d.heads_q, d.n_q, dv, true);
  return v;
}

Padding draw_padding(Rng& rng, const SeqLens& lens) {
  Padding pad;
  auto amount = [&]() -> int32_t {
    switch (rng() % 7) {
      case 0:
      case 1: return 0;
      case 2: return 1;
      case 3: return 2;
      case 4: return 3;
      case 5: return 7;
      default: return int32_t(rng() % 17);
    }
  };
  if (rng() % 4 == 0) pad.lead_q = 1 + int32_t(rng() % 5);
  if (rng() % 4 == 0) pad.lead_k = 1 + int32_t(rng() % 5);
  for (size_t b = 0; b < lens.q.size(); ++b) pad.q.push_back(amount()), pad.k.push_back(amount());
  // Some sequence with tokens away from its compact start on each axis: else leading padding.
  auto shifted = [&](const std::vector<int32_t>& len, const std::vector<int32_t>& after, int32_t lead) {
    int64_t shift = lead;
    for (size_t b = 0; b < len.size(); shift += after[b], ++b)
      if (len[b] > 0 && shift > 0) return true;
    return false;
  };
  if (!shifted(lens.q, pad.q, pad.lead_q)) pad.lead_q += 1 + int32_t(rng() % 3);
  if (!shifted(lens.k, pad.k, pad.lead_k)) pad.lead_k += 1 + int32_t(rng() % 3);
  return pad;
}

std::string describe(const Padding& pad) {
  std::string out = fmt::format("padded (after each sequence, q, k): lead ({}, {})", pad.lead_q, pad.lead_k);
  for (size_t b = 0; b < pad.q.size(); ++b) out += fmt::format(" ({}, {})", pad.q[b], pad.k[b]);
  return out;
}

Inputs to_padded(const Inputs& varlen, const Padding& pad, Rng& rng) {
  Inputs out = varlen;
  Problem& p = out.p;
  const std::vector<int32_t> len_q = lengths_of(varlen.cu_seqlens_q), len_k = lengths_of(varlen.cu_seqlens_k);
  std::vector<int32_t> at_q = {pad.lead_q}, at_k = {pad.lead_k};
  for (size_t b = 0; b < len_q.size(); ++b)
    at_q.push_back(at_q.back() + len_q[b] + pad.q[b]), at_k.push_back(at_k.back() + len_k[b] + pad.k[b]);
  p.padded = true;
  p.total_q = at_q.back(), p.total_k = at_k.back();
  out.cu_seqlens_q_padded = ints({p.batch + 1}, at_q);
  out.cu_seqlens_k_padded = ints({p.batch + 1}, at_k);
  std::uniform_int_distribution<int> big(64 * 8, 128 * 8);
  auto place = [&](const HostTensor& from, int64_t width, bool queries) {
    const int64_t heads = queries ? p.heads_q : p.heads_kv;
    HostTensor to(from.dtype, {queries ? p.total_q : p.total_k, heads, width});
    for (int64_t x = 0; x < to.numel(); ++x) to.set(x, (rng() % 2 ? 1 : -1) * big(rng) / 8.0);  // padding
    const std::vector<int32_t>& len = queries ? len_q : len_k;
    const std::vector<int32_t>& at = queries ? at_q : at_k;
    const HostTensor& cu = queries ? varlen.cu_seqlens_q : varlen.cu_seqlens_k;
    for (size_t b = 0; b < len.size(); ++b)
      for (int64_t i = 0; i < int64_t(len[b]) * heads * width; ++i)
        to.set(int64_t(at[b]) * heads * width + i, from.get(int64_t(cu.get(int64_t(b))) * heads * width + i));
    return to;
  };
  const int64_t dv = head_dim_v(p);
  out.q = place(varlen.q.contiguous(), p.d, true);
  out.k = place(varlen.k.contiguous(), p.d, false);
  out.v = place(varlen.v.contiguous(), dv, false);
  if (varlen.has_d_o()) out.d_o = place(varlen.d_o.contiguous(), dv, true);
  return out;
}

Inputs unpadded(const Inputs& padded) {
  Inputs out = padded;
  Problem& p = out.p;
  p.padded = false;
  out.cu_seqlens_q_padded = HostTensor(), out.cu_seqlens_k_padded = HostTensor();
  p.total_q = int64_t(padded.cu_seqlens_q.get(p.batch)), p.total_k = int64_t(padded.cu_seqlens_k.get(p.batch));
  const Seqs seqs = padded.seqs();
  auto pack = [&](const HostTensor& from, int64_t width, bool queries) {
    const int64_t heads = queries ? p.heads_q : p.heads_kv;
    HostTensor to(from.dtype, {queries ? p.total_q : p.total_k, heads, width});
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t len = queries ? seq_n_q(padded.p, seqs, b) : seq_n_k(padded.p, seqs, b);
      const int64_t src = queries ? seq_start_q(padded.p, seqs, b) : seq_start_k(padded.p, seqs, b);
      const int64_t dst = queries ? seqs.cu_q[b] : seqs.cu_k[b];
      for (int64_t i = 0; i < len * heads * width; ++i)
        to.set(dst * heads * width + i, from.get(src * heads * width + i));
    }
    return to;
  };
  const int64_t dv = head_dim_v(p);
  out.q = pack(padded.q.contiguous(), p.d, true);
  out.k = pack(padded.k.contiguous(), p.d, false);
  out.v = pack(padded.v.contiguous(), dv, false);
  if (padded.has_d_o()) out.d_o = pack(padded.d_o.contiguous(), dv, true);
  return out;
}

int32_t draw_page_size(Rng& rng) { return pick(rng, {1, 2, 3, 5, 7, 16, 17, 48, 64, 100, 128, 256}); }

Inputs to_paged(const Inputs& varlen, int32_t page_size, bool repeats, Rng& rng, std::string* how) {
  Inputs out = varlen;
  Problem& p = out.p;
  const std::vector<int32_t> len_k = lengths_of(varlen.cu_seqlens_k);
  const int32_t ps = page_size;
  const int32_t per_seq = std::max(1, (p.n_k + ps - 1) / ps);
  std::vector<int32_t> need(size_t(p.batch));
  for (size_t b = 0; b < need.size(); ++b) need[b] = (len_k[b] + ps - 1) / ps;
  const int32_t spare = 1 + int32_t(rng() % 2);
  const int32_t pages = std::accumulate(need.begin(), need.end(), 0) + spare;
  std::vector<int32_t> ids(static_cast<size_t>(pages));
  std::iota(ids.begin(), ids.end(), 0);
  const int order = int(rng() % 3);
  if (order == 1) std::reverse(ids.begin(), ids.end());
  if (order == 2) std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table(size_t(p.batch) * per_seq);
  size_t next = 0;
  for (size_t b = 0; b < need.size(); ++b)
    for (int32_t c = 0; c < per_seq; ++c)  // columns past the sequence's keys: any page (never read)
      table[b * per_seq + c] = c < need[b] ? ids[next++] : int32_t(rng() % uint64_t(pages));
  std::string shared;
  if (repeats && rng() % 2 == 0) {  // a later sequence's first page is an earlier one's
    std::vector<size_t> with_keys;
    for (size_t b = 0; b < need.size(); ++b)
      if (need[b] > 0) with_keys.push_back(b);
    if (with_keys.size() >= 2) {
      table[with_keys.back() * per_seq] = table[with_keys.front() * per_seq];
      shared = fmt::format(", page {} shared by sequences {} and {}", table[with_keys.front() * per_seq],
                           with_keys.front(), with_keys.back());
    }
  }
  p.page_size = ps, p.num_pages = pages, p.pages_per_seq = per_seq;
  out.page_table = ints({p.batch, per_seq}, table);
  const int64_t dv = head_dim_v(p), heads = p.heads_kv;
  std::uniform_int_distribution<int> big(64 * 8, 128 * 8);
  auto scatter = [&](const HostTensor& from, int64_t width) {
    HostTensor to(from.dtype, {pages, ps, heads, width});
    for (int64_t x = 0; x < to.numel(); ++x) to.set(x, (rng() % 2 ? 1 : -1) * big(rng) / 8.0);  // unread slots
    for (int64_t b = 0, at = 0; b < p.batch; at += len_k[size_t(b)], ++b)
      for (int64_t j = 0; j < len_k[size_t(b)]; ++j) {
        const int64_t slot = int64_t(table[size_t(b) * per_seq + j / ps]) * ps + j % ps;
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t c = 0; c < width; ++c)
            to.set((slot * heads + h) * width + c, from.get(((at + j) * heads + h) * width + c));
      }
    return to;
  };
  out.k = scatter(varlen.k, p.d);
  out.v = scatter(varlen.v, dv);
  if (how)
    *how = fmt::format("paged: page size {}, {} pages, table {}{}", ps, pages,
                       order == 0   ? "in order"
                       : order == 1 ? "reversed"
                                    : "shuffled",
                       shared);
  return out;
}

Inputs to_long_paged(const Inputs& like, Rng& rng, std::string* how, int64_t work) {
  Inputs out;
  Problem& p = out.p;
  p = like.p;
  p.varlen = true, p.padded = false;
  p.batch = 1 + int32_t(rng() % 2);
  out.alibi_slopes = like.alibi_slopes, out.sinks = like.sinks;
  const int64_t dv = head_dim_v(p), width = p.d + dv;
  std::vector<int32_t> len_q, len_k;
  for (int32_t b = 0; b < p.batch; ++b) len_q.push_back(1 + int32_t(rng() % 4));
  const int64_t per_key = int64_t(*std::max_element(len_q.begin(), len_q.end())) * p.heads_q * width;
  const int64_t max_keys = std::max<int64_t>(1, work / per_key);
  int32_t ps = pick(rng, {1, 2, 16, 64, 128, 256, 256});
  const bool high = rng() % 2 == 0;                      // pages at indices >= 2^15, where the pool fits
  const int64_t pool_row = int64_t(p.heads_kv) * width;  // elements of k and v per page slot
  const int64_t high_ps = kLongPagedPool / (pool_row * ((int64_t(1) << 15) + 520));
  const bool at_high = high && high_ps >= 1;
  if (at_high)
    while (ps > high_ps) ps /= 2;
  while (ps > 1 && max_keys / ps < 17) ps /= 2;  // keep more than 16 pages where the work allows
  const int64_t pages_max = std::clamp<int64_t>(max_keys / ps, 1, 512);
  int64_t pages = pages_max;
  if (pages_max > 17 && rng() % 8 != 0) {  // log-uniform in [17, pages_max]; one in eight at the maximum
    const double lo = std::log(17.0), hi = std::log(double(pages_max));
    pages = std::clamp<int64_t>(int64_t(std::exp(lo + double(rng() % 1001) / 1000 * (hi - lo))), 17, pages_max);
  }
  len_k.push_back(int32_t((pages - 1) * ps + 1 + int64_t(rng() % uint64_t(ps))));
  if (p.batch == 2) len_k.push_back(int32_t(rng() % uint64_t(4 * ps + 1)));
  std::vector<int32_t> need;
  for (int32_t n : len_k) need.push_back((n + ps - 1) / ps);
  const int32_t used = std::accumulate(need.begin(), need.end(), 0), spare = 1 + int32_t(rng() % 2);
  const int32_t base = at_high ? int32_t(1) << 15 : 0;
  p.num_pages = base + used + spare;
  p.page_size = ps;
  const int32_t longest = *std::max_element(need.begin(), need.end());
  const bool wide = rng() % 4 == 0;  // a table of more than 2^16 entries
  p.pages_per_seq = std::max(1, wide ? std::max(longest, (1 << 16) / p.batch + 1) : longest);
  std::vector<int32_t> ids(size_t(used + spare));
  std::iota(ids.begin(), ids.end(), base);
  if (rng() % 2)
    std::shuffle(ids.begin(), ids.end(), rng);
  else
    std::reverse(ids.begin(), ids.end());
  std::vector<int32_t> table(size_t(p.batch) * size_t(p.pages_per_seq));
  size_t next = 0;
  for (size_t b = 0; b < need.size(); ++b)
    for (int32_t c = 0; c < p.pages_per_seq; ++c)
      table[b * size_t(p.pages_per_seq) + size_t(c)] =
          c < need[b] ? ids[next++] : int32_t(rng() % uint64_t(p.num_pages));
  out.page_table = ints({p.batch, p.pages_per_seq}, table);
  std::vector<int32_t> cu_q = {0}, cu_k = {0};
  for (size_t b = 0; b < len_q.size(); ++b)
    cu_q.push_back(cu_q.back() + len_q[b]), cu_k.push_back(cu_k.back() + len_k[b]);
  p.n_q = *std::max_element(len_q.begin(), len_q.end()), p.n_k = *std::max_element(len_k.begin(), len_k.end());
  p.total_q = cu_q.back(), p.total_k = cu_k.back();
  out.cu_seqlens_q = ints({p.batch + 1}, cu_q), out.cu_seqlens_k = ints({p.batch + 1}, cu_k);
  auto grid = [&](DType t, std::vector<int64_t> shape) {
    HostTensor x(t, std::move(shape));
    for (int64_t i = 0; i < x.numel(); ++i) x.set(i, double(int(rng() % 33) - 16) / 8);
    return x;
  };
  out.q = grid(dtype_q(p), shape_q(p));
  if (like.has_d_o()) out.d_o = grid(dtype_o(p), shape_o(p));
  out.k = HostTensor(dtype_kv(p), shape_kv(p)), out.v = HostTensor(dtype_kv(p), shape_v(p));
  const Seqs seqs = out.seqs();
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t j = 0; j < len_k[size_t(b)]; ++j)
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        const int64_t row = kv_row(p, seqs, b, h, j);
        for (int64_t c = 0; c < p.d; ++c) out.k.set(row * p.d + c, double(int(rng() % 33) - 16) / 8);
        for (int64_t c = 0; c < dv; ++c) out.v.set(row * dv + c, double(int(rng() % 33) - 16) / 8);
      }
  if (how)
    *how = fmt::format(
        "long paged: page size {}, sequence 0 on {} pages ({} keys), {} pages from index {}, table "
        "{} x {}",
        ps, need[0], len_k[0], p.num_pages, base, p.batch, p.pages_per_seq);
  return out;
}

Inputs unpaged(const Inputs& paged) {
  Inputs out = paged;
  Problem& p = out.p;
  p.page_size = p.num_pages = p.pages_per_seq = 0;
  out.page_table = HostTensor();
  const Seqs seqs = paged.seqs();
  const int64_t dv = head_dim_v(p);
  out.k = HostTensor(paged.k.dtype, {p.total_k, p.heads_kv, p.d});
  out.v = HostTensor(paged.v.dtype, {p.total_k, p.heads_kv, dv});
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_kv; ++h)
      for (int64_t j = 0; j < seq_n_k(paged.p, seqs, b); ++j) {
        const int64_t from = kv_row(paged.p, seqs, b, h, j), to = (int64_t(seqs.cu_k[b]) + j) * p.heads_kv + h;
        for (int64_t c = 0; c < p.d; ++c) out.k.set(to * p.d + c, paged.k.get(from * p.d + c));
        for (int64_t c = 0; c < dv; ++c) out.v.set(to * dv + c, paged.v.get(from * dv + c));
      }
  return out;
}

std::vector<int32_t> slot_reads(const Inputs& paged) {
  const Problem& p = paged.p;
  const Seqs seqs = paged.seqs();
  std::vector<int32_t> reads(size_t(p.num_pages) * p.page_size, 0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t j = 0; j < seq_n_k(p, seqs, b); ++j) ++reads[size_t(kv_row(p, seqs, b, 0, j) / p.heads_kv)];
  return reads;
}

void draw_window(Rng& rng, int32_t n, int32_t block_n, int32_t* left, int32_t* right) {
  auto side = [&]() -> int32_t {
    switch (rng() % 11) {
      case 0: return -1;
      case 1: return 0;
      case 2: return 1;
      case 3: return 2;
      case 4: return block_n - 1;
      case 5: return block_n;
      case 6: return block_n + 1;
      case 7: return std::max(0, n - 1);
      case 8: return n;
      case 9: return n + 7;
      default: return int32_t(rng() % uint64_t(n + 1));
    }
  };
  do *left = side(), *right = side();
  while (*left < 0 && *right < 0);
}

HostTensor draw_strided(const HostTensor& t, Rng& rng, std::string* how) {
  if (t.numel() == 0) return t;
  const size_t rank = t.shape.size();
  std::vector<size_t> order(rank);  // storage order, outermost first
  std::iota(order.begin(), order.end(), size_t(0));
  std::shuffle(order.begin(), order.end(), rng);
  const int64_t step = 1 + int64_t(rng() % 2);  // the innermost axis' step: 1 or 2
  std::vector<int64_t> pad(rank);
  for (size_t x = rank; x-- > 0;) pad[order[x]] = int64_t(rng() % 4);
  const int64_t front = int64_t(rng() % 4);
  std::vector<size_t> reversed;
  for (size_t a = 0; a < rank; ++a)
    if (rng() % 3 == 0) reversed.push_back(a);
  HostTensor out = t.laid_out(order, step, pad, reversed, front);
  if (how)
    *how += fmt::format("strides ({}) offset {}{}", fmt::join(out.strides, ", "), out.offset,
                        reversed.empty() ? "" : "; reversed axes " + fmt::format("{}", fmt::join(reversed, " ")));
  return out;
}

double draw_softcap(Rng& rng, double max_abs) {
  static const double factors[] = {0.01, 0.1, 0.3, 0.6, 0.9, 1.1, 2, 8};
  if (!(max_abs > 0) || !std::isfinite(max_abs)) max_abs = 1;
  return std::clamp(max_abs * factors[rng() % 8], 0x1p-100, 1e37);  // within fp32's range, where kernels keep c
}

Inputs dense_sequence(const Inputs& varlen, int64_t b) {
  const Problem& p = varlen.p;
  const Seqs seqs = varlen.seqs();
  Inputs out;
  Problem& s = out.p;
  s = p;
  s.batch = 1, s.varlen = false, s.total_q = s.total_k = 0, s.page_size = s.num_pages = s.pages_per_seq = 0;
  s.padded = false;
  s.n_q = int32_t(seq_n_q(p, seqs, b)), s.n_k = int32_t(seq_n_k(p, seqs, b));
  const int64_t dv = head_dim_v(p);
  auto cut = [&](const HostTensor& t, int64_t heads, int64_t n, int64_t w, bool queries) {
    HostTensor x(t.dtype, {1, heads, n, w});
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = queries ? q_row(p, seqs, b, h, i) : kv_row(p, seqs, b, h, i);
        for (int64_t c = 0; c < w; ++c) x.set((h * n + i) * w + c, t.get(row * w + c));
      }
    return x;
  };
  out.q = cut(varlen.q, p.heads_q, s.n_q, p.d, true);
  out.k = cut(varlen.k, p.heads_kv, s.n_k, p.d, false);
  out.v = cut(varlen.v, p.heads_kv, s.n_k, dv, false);
  if (varlen.has_d_o()) out.d_o = cut(varlen.d_o, p.heads_q, s.n_q, dv, true);
  out.alibi_slopes = varlen.alibi_slopes;
  out.sinks = varlen.sinks;
  return out;
}

}  // namespace fc::props
