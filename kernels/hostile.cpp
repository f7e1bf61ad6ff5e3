#include "kernels/hostile.hpp"

#include <cstring>

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
  if (count) *count = c;
  return out;
}

int layout_shift() { return shift_now; }
LayoutShift::LayoutShift(int by) : previous_(shift_now) { shift_now = by; }
LayoutShift::~LayoutShift() { shift_now = previous_; }

}  // namespace fc
