#include "kernels/hostile.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace fc {
namespace {

constexpr unsigned char kNaN = 0xFF;  // every float dtype's all-ones pattern is a NaN
thread_local int shift_now = 0;


// The storage elements a tensor's logical elements address.
std::vector<bool> addressed(const HostTensor& t) {
  const int64_t elems = int64_t(t.bytes.size()) / dtype_size(t.dtype);
  std::vector<bool> used(size_t(elems), false);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t at = t.storage_index(i);
    if (at >= 0 && at < elems) used[size_t(at)] = true;
  }
  return used;
}

void fill_nan(HostTensor& t, int64_t storage_elem) {
  const int sz = dtype_size(t.dtype);
  std::memset(t.bytes.data() + size_t(storage_elem) * size_t(sz), kNaN, size_t(sz));
}

int64_t poison_gaps(HostTensor& t) {
  if (t.is_compact() || !is_float(t.dtype)) return 0;
  int64_t n = 0;
  for (int64_t at : unaddressed_elements(t)) fill_nan(t, at), ++n;
  return n;
}

// The page slots (page * page_size + slot) that some sequence's keys occupy.
std::vector<bool> live_slots(const Inputs& in) {
  const Problem& p = in.p;
  const Seqs s = in.seqs();
  std::vector<bool> live(size_t(int64_t(p.num_pages) * p.page_size), false);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t j = 0; j < seq_n_k(p, s, b); ++j) {
      const int64_t page = s.page_table[b * p.pages_per_seq + j / p.page_size];
      const int64_t slot = page * p.page_size + j % p.page_size;
      if (slot >= 0 && slot < int64_t(live.size())) live[size_t(slot)] = true;
    }
  return live;
}

// k or v of a paged problem: (num_pages, page_size, heads_kv, width); every element of a dead slot.
int64_t poison_slots(HostTensor& t, const std::vector<bool>& live) {
  if (!is_float(t.dtype) || t.shape.size() != 4) return 0;
  const int64_t row = t.shape[2] * t.shape[3];  // heads_kv * width
  int64_t n = 0;
  for (size_t slot = 0; slot < live.size(); ++slot) {
    if (live[slot]) continue;
    for (int64_t x = 0; x < row; ++x) fill_nan(t, t.storage_index(int64_t(slot) * row + x)), ++n;
  }
  return n;
}

// Padded varlen: the tokens of one packed axis that some sequence holds ([padded[b], padded[b] + len_b)).
std::vector<bool> live_tokens(const HostTensor& cu, const HostTensor& padded, int64_t total) {
  std::vector<bool> live(size_t(std::max<int64_t>(total, 0)), false);
  for (int64_t b = 0; b + 1 < cu.numel() && b + 1 < padded.numel(); ++b) {
    const int64_t at = int64_t(padded.get(b)), len = int64_t(cu.get(b + 1) - cu.get(b));
    for (int64_t i = std::max<int64_t>(at, 0); i < std::min<int64_t>(at + len, total); ++i) live[size_t(i)] = true;
  }
  return live;
}

// A packed tensor (total, heads, width): every element of a token no sequence holds.
int64_t poison_tokens(HostTensor& t, const std::vector<bool>& live) {
  if (!is_float(t.dtype) || t.shape.size() != 3 || t.shape[0] != int64_t(live.size())) return 0;
  const int64_t row = t.shape[1] * t.shape[2];
  int64_t n = 0;
  for (size_t tok = 0; tok < live.size(); ++tok) {
    if (live[tok]) continue;
    for (int64_t x = 0; x < row; ++x) fill_nan(t, t.storage_index(int64_t(tok) * row + x)), ++n;
  }
  return n;
}

bool any_dead(const std::vector<bool>& live) {
  for (bool b : live)
    if (!b) return true;
  return false;
}

}  // namespace

std::vector<int64_t> unaddressed_elements(const HostTensor& t) {
  std::vector<int64_t> out;
  if (t.is_compact()) return out;
  const std::vector<bool> used = addressed(t);
  for (size_t at = 0; at < used.size(); ++at)
    if (!used[at]) out.push_back(int64_t(at));
  return out;
}

bool has_poisonable(const Inputs& in) {
  for (const HostTensor* t : {&in.q, &in.k, &in.v, &in.d_o})
    if (!t->is_compact() && is_float(t->dtype) && !unaddressed_elements(*t).empty()) return true;
  if (in.p.padded && in.p.varlen &&
      (any_dead(live_tokens(in.cu_seqlens_q, in.cu_seqlens_q_padded, in.p.total_q)) ||
       any_dead(live_tokens(in.cu_seqlens_k, in.cu_seqlens_k_padded, in.p.total_k))))
    return true;
  return is_paged(in.p) && in.page_table.numel() > 0 && any_dead(live_slots(in));
}

Inputs poison(const Inputs& in, PoisonCount* count) {
  PoisonCount c;
  Inputs out = in;
  for (HostTensor* t : {&out.q, &out.k, &out.v, &out.d_o}) c.gaps += poison_gaps(*t);
  if (is_paged(in.p) && in.page_table.numel() > 0) {
    const std::vector<bool> live = live_slots(in);
    c.page_slots += poison_slots(out.k, live) + poison_slots(out.v, live);
  }
  if (in.p.padded && in.p.varlen) {
    const std::vector<bool> q = live_tokens(in.cu_seqlens_q, in.cu_seqlens_q_padded, in.p.total_q);
    const std::vector<bool> k = live_tokens(in.cu_seqlens_k, in.cu_seqlens_k_padded, in.p.total_k);
    c.padding += poison_tokens(out.q, q) + poison_tokens(out.k, k) + poison_tokens(out.v, k);
    if (in.has_d_o()) c.padding += poison_tokens(out.d_o, q);
  }
  if (count) *count = c;
  return out;
}

namespace {

// The shape of guard_output's storage: kOutputGuard canaries, then `rows` rows of `w` elements each
// followed by `gap` canaries, then kOutputGuard canaries.
struct GuardLayout {
  int64_t w = 1, gap = 0, rows = 0;
  int64_t row_stride() const { return w + gap; }
  int64_t at(int64_t i) const { return kOutputGuard + i / w * row_stride() + i % w; }  // logical i's storage
  int64_t elems() const { return 2 * kOutputGuard + rows * row_stride(); }
};

GuardLayout guard_layout(const std::vector<int64_t>& shape, bool gaps) {
  GuardLayout l;
  int64_t n = 1;
  for (int64_t x : shape) n *= x;
  l.w = shape.empty() ? 1 : std::max<int64_t>(shape.back(), 1);
  l.gap = gaps && shape.size() >= 2 ? 1 : 0;
  l.rows = n / l.w;
  return l;
}

// Whether g is laid out as guard_output lays out its shape (then the fast paths below apply).
bool is_guard_layout(const HostTensor& g, const GuardLayout& l) {
  const size_t rank = g.shape.size();
  if (rank == 0 || g.strides.size() != rank || g.offset != kOutputGuard) return false;
  if (int64_t(g.bytes.size()) != l.elems() * dtype_size(g.dtype)) return false;
  std::vector<int64_t> want(rank, 1);
  for (size_t a = rank; a-- > 1;) want[a - 1] = a + 1 == rank ? l.row_stride() : g.shape[a] * want[a];
  return g.strides == want;
}

}  // namespace

HostTensor guard_output(const HostTensor& t, bool gaps, const std::vector<bool>& untouched) {
  const HostTensor src = t.is_compact() ? t : t.contiguous();
  const GuardLayout l = guard_layout(t.shape, gaps);
  const size_t es = size_t(dtype_size(t.dtype));
  HostTensor g;
  g.dtype = t.dtype, g.shape = t.shape, g.offset = kOutputGuard;
  g.strides.assign(t.shape.size(), 1);
  for (size_t a = t.shape.size(); a-- > 1;)  // row-major, the rows l.row_stride() apart
    g.strides[a - 1] = (a + 1 == t.shape.size() ? l.row_stride() : t.shape[a] * g.strides[a]);
  g.bytes.assign(size_t(l.elems()) * es, kNaN);
  for (int64_t r = 0; r < l.rows; ++r)
    std::memcpy(g.bytes.data() + size_t(l.at(r * l.w)) * es, src.bytes.data() + size_t(r * l.w) * es, size_t(l.w) * es);
  for (size_t i = 0; i < untouched.size(); ++i)
    if (untouched[i]) fill_nan(g, l.at(int64_t(i)));
  return g;
}

std::string check_output_guard(const HostTensor& g, const std::string& name, const std::vector<bool>& untouched,
                               const std::function<std::string(int64_t)>& element) {
  const int64_t es = dtype_size(g.dtype), elems = int64_t(g.bytes.size()) / es, n = g.numel();
  auto changed = [&](int64_t at) {
    for (int64_t x = 0; x < es; ++x)
      if (g.bytes[size_t(at * es + x)] != kNaN) return true;
    return false;
  };
  for (size_t i = 0; i < untouched.size(); ++i)
    if (untouched[i] && changed(g.storage_index(int64_t(i))))
      return fmt::format("the kernel wrote {}, an element on a padding token that no sequence holds",
                         element(int64_t(i)));
  const int64_t first = n > 0 ? g.storage_index(0) : elems, last = n > 0 ? g.storage_index(n - 1) : -1;
  auto stray = [&](int64_t at, int64_t prev) {
    if (at < first)
      return fmt::format("the kernel wrote {} element{} before the start of {} (its element {})", first - at,
                         first - at == 1 ? "" : "s", name, at - first);
    if (at > last)
      return fmt::format("the kernel wrote past the end of {}: {} storage element{} after its last element{}", name,
                         at - last, at - last == 1 ? "" : "s", n > 0 ? fmt::format(" {}", element(n - 1)) : std::string());
    return fmt::format("the kernel wrote into the gap of {} after its element {}", name, element(prev));
  };
  const GuardLayout l = guard_layout(g.shape, g.shape.size() >= 2 && g.strides.size() >= 2 &&
                                                  g.strides[g.shape.size() - 2] > g.shape.back());
  if (is_guard_layout(g, l)) {  // the canaries: the front, each row's gap, the back
    for (int64_t at = 0; at < kOutputGuard; ++at)
      if (changed(at)) return stray(at, -1);
    for (int64_t r = 0; r < l.rows && l.gap > 0; ++r)
      for (int64_t at = l.at(r * l.w) + l.w; at < l.at(r * l.w) + l.row_stride(); ++at)
        if (changed(at)) return stray(at, r * l.w + l.w - 1);
    for (int64_t at = kOutputGuard + l.rows * l.row_stride(); at < elems; ++at)
      if (changed(at)) return stray(at, n - 1);
    return "";
  }
  throw std::invalid_argument(fmt::format("check_output_guard: {} is not laid out by guard_output", name));
}

HostTensor unguard_output(const HostTensor& g, const std::vector<bool>& untouched) {
  const GuardLayout l = guard_layout(g.shape, g.shape.size() >= 2 && g.strides.size() >= 2 &&
                                                  g.strides[g.shape.size() - 2] > g.shape.back());
  if (!is_guard_layout(g, l)) throw std::invalid_argument("unguard_output: the tensor is not laid out by guard_output");
  HostTensor out(g.dtype, g.shape);
  const size_t es = size_t(dtype_size(g.dtype));
  for (int64_t r = 0; r < l.rows; ++r)
    std::memcpy(out.bytes.data() + size_t(r * l.w) * es, g.bytes.data() + size_t(l.at(r * l.w)) * es,
                size_t(l.w) * es);
  for (size_t i = 0; i < untouched.size(); ++i)
    if (untouched[i]) out.set(int64_t(i), 0.0);
  return out;
}

std::vector<bool> padding_elements(const Inputs& in, const std::string& tensor) {
  const Problem& p = in.p;
  if (!p.padded || !p.varlen) return {};
  const bool keys = tensor == "d_k" || tensor == "d_v";
  const std::vector<bool> live = keys ? live_tokens(in.cu_seqlens_k, in.cu_seqlens_k_padded, p.total_k)
                                      : live_tokens(in.cu_seqlens_q, in.cu_seqlens_q_padded, p.total_q);
  if (!any_dead(live)) return {};
  const int64_t total = int64_t(live.size());
  if (tensor == "lse") {  // (heads_q, total_q)
    std::vector<bool> out(size_t(p.heads_q * total), false);
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t t = 0; t < total; ++t) out[size_t(h * total + t)] = !live[size_t(t)];
    return out;
  }
  const int64_t heads = keys ? p.heads_kv : p.heads_q;
  const int64_t w = tensor == "o" || tensor == "d_v" ? head_dim_v(p) : p.d, row = heads * w;
  std::vector<bool> out(size_t(total * row), false);
  for (int64_t t = 0; t < total; ++t)
    for (int64_t x = 0; x < row; ++x) out[size_t(t * row + x)] = !live[size_t(t)];
  return out;
}

int layout_shift() { return shift_now; }
LayoutShift::LayoutShift(int by) : previous_(shift_now) { shift_now = by; }
LayoutShift::~LayoutShift() { shift_now = previous_; }

}  // namespace fc
