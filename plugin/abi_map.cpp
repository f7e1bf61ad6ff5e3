#include "plugin/abi_map.hpp"

#include "kernels/hostile.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace fc::plugin {
namespace {

constexpr uint64_t kAlign = 256;       // DLPack: data aligned to 256 bytes, as cudaMalloc's
constexpr uint64_t kGuard = 64;        // bytes after each tensor that must stay untouched
constexpr unsigned char kFill = 0xFF;  // NaN in F16, BF16, F32 and F64

uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
int64_t elem_size(const ArenaSlot& s) { return s.dtype.bits / 8; }

bool is_output(const CallPlan& plan, int32_t id) {
  return plan.backward ? (id == kDq || id == kDk || id == kDv) : (id == kO || id == kLse);
}

// A tensor of `shape` in `layout` (the contract's shapes: dense (batch, heads, n, x), varlen (total,
// heads, x), paged (pages, page_size, heads, x)). Compact: row-major. Bshd: the heads axis and the one
// before it swapped in storage (dense: PyTorch's (batch, n, heads, x) buffer). Padded: gaps of 3, 5
// and 7 elements after each row, each run of the next axis and the next (row stride > x).
ArenaSlot tensor_slot(DLDataType dt, const std::vector<int64_t>& shape, Layout layout) {
  ArenaSlot s;
  s.present = 1, s.ndim = int32_t(shape.size()), s.dtype = dt;
  const int n = s.ndim;
  std::copy(shape.begin(), shape.end(), s.shape);
  int64_t st[4] = {0, 0, 0, 0};
  int64_t step = 1;
  for (int a = n - 1; a >= 0; --a) st[a] = step, step *= std::max<int64_t>(shape[size_t(a)], 1);
  if (layout == Layout::Bshd && n >= 3) {  // storage (..., axis n-2, axis n-3, x)
    const int64_t x = shape[size_t(n - 1)], m = std::max<int64_t>(shape[size_t(n - 3)], 1);
    st[n - 3] = x, st[n - 2] = m * x;
    step = m * std::max<int64_t>(shape[size_t(n - 2)], 1) * x;
    for (int a = n - 4; a >= 0; --a) st[a] = step, step *= std::max<int64_t>(shape[size_t(a)], 1);
  }
  if (layout == Layout::Padded) {
    const int64_t gap[3] = {3, 5, 7};
    for (int a = n - 2, g = 0; a >= 0; --a, ++g) st[a] = shape[size_t(a + 1)] * st[a + 1] + gap[std::min(g, 2)];
  }
  s.has_strides = layout != Layout::Compact && n >= 2;
  std::copy(st, st + n, s.strides);
  return s;
}

// lse (batch, heads_q, n_q), varlen (heads_q, total_q): compact, or padded (gaps of 2 after each row
// of a head, 1 after each batch).
ArenaSlot lse_slot(DType t, const std::vector<int64_t>& shape, Layout layout) {
  ArenaSlot s = tensor_slot(dl_dtype(t), shape, Layout::Compact);
  if (layout == Layout::Padded) {
    const int n = s.ndim;
    s.strides[n - 2] = s.shape[n - 1] + 2;
    if (n == 3) s.strides[0] = s.shape[1] * s.strides[1] + 1;
    s.has_strides = 1;
  }
  return s;
}

uint64_t span_elems(const ArenaSlot& s) {
  uint64_t last = 0;
  for (int i = 0; i < s.ndim; ++i) {
    if (s.shape[i] == 0) return 0;
    last += uint64_t(s.shape[i] - 1) * uint64_t(s.strides[i]);
  }
  return last + 1;
}

// Calls f(byte offset in the arena of the row's first element, bytes of the row) for every innermost
// row of a present slot (the innermost stride is 1 in every layout).
template <class F>
void for_rows(const ArenaSlot& s, F f) {
  const int64_t es = elem_size(s), row = s.shape[s.ndim - 1] * es;
  int64_t outer = 1;
  for (int i = 0; i < s.ndim - 1; ++i) outer *= s.shape[i];
  for (int64_t r = 0; r < outer; ++r) {
    int64_t rem = r, at = 0;
    for (int i = s.ndim - 2; i >= 0; --i) at += (rem % s.shape[i]) * s.strides[i], rem /= s.shape[i];
    f(s.offset + uint64_t(at * es), row, r * row);
  }
}

void check_tensor(const ArenaSlot& s, const HostTensor& t, int32_t id) {
  int64_t n = 1;
  for (int i = 0; i < s.ndim; ++i) n *= s.shape[i];
  if (t.numel() != n || int64_t(t.bytes.size()) != n * elem_size(s))
    throw std::logic_error(fmt::format("abi_map: {} has {} elements, the plan {}", slot_name(id), t.numel(), n));
}

// The logical coordinates of a slot's element with row-major index e, "(i0, i1, ...)".
std::string coords(const ArenaSlot& s, int64_t e) {
  std::vector<int64_t> x(size_t(s.ndim));
  for (int i = s.ndim - 1; i >= 0; --i) x[size_t(i)] = s.shape[i] > 0 ? e % s.shape[i] : 0, e /= std::max<int64_t>(s.shape[i], 1);
  return fmt::format("({})", fmt::join(x, ", "));
}

int64_t numel_of(const ArenaSlot& s) {
  int64_t n = 1;
  for (int i = 0; i < s.ndim; ++i) n *= s.shape[i];
  return n;
}

// One line naming the tensor and the element next to a stray byte the kernel wrote: past an output's
// last element (its element index), before its first, in the gaps of its strided span (after which
// element), into an input, or outside every tensor. The guards: kGuard bytes after every tensor, and
// before every tensor but the arena's first the previous one's guard and alignment padding.
std::string bytes_text(uint64_t n) { return fmt::format("{} byte{}", n, n == 1 ? "" : "s"); }

std::string stray_write(const CallPlan& plan, uint64_t bad) {
  for (int32_t id = 0; id < kSlots; ++id) {  // inside a span first
    const ArenaSlot& s = plan.slot[id];
    if (!s.present || bad < s.offset || bad >= s.offset + s.span) continue;
    if (!is_output(plan, id)) return fmt::format("the kernel modified its input {}", slot_name(id));
    // The row whose start is the last at or before `bad`: the byte lies in the gap after its last element.
    int64_t last = -1;
    uint64_t end = 0;
    for_rows(s, [&](uint64_t at, int64_t bytes, int64_t from) {
      if (bytes > 0 && at <= bad && at + uint64_t(bytes) > end)
        end = at + uint64_t(bytes), last = (from + bytes) / elem_size(s) - 1;
    });
    if (last < 0) return fmt::format("the kernel wrote into the gaps of {} (byte {} of its strided span)", slot_name(id), bad - s.offset);
    return fmt::format("the kernel wrote into the gaps between the elements of {}: {} after its element {} "
                       "(byte {} of its strided span)",
                       slot_name(id), bytes_text(bad - end + 1), coords(s, last), bad - s.offset);
  }
  for (int pass = 0; pass < 2; ++pass)  // outputs first: a byte between two tensors is charged to the output
    for (int32_t id = 0; id < kSlots; ++id) {
      const ArenaSlot& s = plan.slot[id];
      if (!s.present || (pass == 0) != is_output(plan, id)) continue;
      const int64_t es = elem_size(s);
      if (bad >= s.offset + s.span && bad < s.offset + s.span + kGuard) {
        const uint64_t past = bad - s.offset - s.span;
        return fmt::format("the kernel wrote {} past the end of {}: its element {} ({} past its last, {})",
                           bytes_text(past + 1), slot_name(id), numel_of(s) + int64_t(past) / es, int64_t(past) / es + 1,
                           numel_of(s) > 0 ? "whose index is " + std::to_string(numel_of(s) - 1) : "it has none");
      }
      if (is_output(plan, id) && bad < s.offset && bad + kGuard >= s.offset) {
        const uint64_t before = s.offset - bad;
        return fmt::format("the kernel wrote {} before the start of {}: its element {}", bytes_text(before), slot_name(id),
                           -int64_t((before + uint64_t(es) - 1) / uint64_t(es)));
      }
    }
  return fmt::format("the kernel wrote outside every tensor (arena byte {})", bad);
}

}  // namespace

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Compact: return "compact";
    case Layout::Bshd: return "bshd";
    case Layout::Padded: return "padded";
  }
  return "?";
}

Layout layout_for(const Problem& p, LayoutPolicy policy) {
  if (policy == LayoutPolicy::Compact) return Layout::Compact;
  uint64_t h = 0x9E3779B97F4A7C15ull;  // splitmix64 over the problem's fields
  auto mix = [&h](uint64_t x) {
    h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
  };
  uint64_t scale_bits = 0;
  std::memcpy(&scale_bits, &p.scale, sizeof scale_bits);
  for (uint64_t x : {uint64_t(p.batch), uint64_t(p.heads_q), uint64_t(p.heads_kv), uint64_t(p.n_q), uint64_t(p.n_k),
                     uint64_t(p.d), uint64_t(p.dtype), uint64_t(p.mask), scale_bits})
    mix(x);
  if (mixed_dtypes(p)) mix(uint64_t(dtype_kv(p)) << 8 | uint64_t(dtype_o(p)));  // uniform problems: as before
  return Layout((h + uint64_t(layout_shift())) % 3);  // a LayoutShift rotates it (kernels/hostile.hpp)
}

const char* slot_name(int32_t id) {
  static const char* const names[kSlots] = {
      "q",   "k",   "v",   "o",   "lse",  "cu_seqlens_q", "cu_seqlens_k", "page_table", "alibi_slopes",
      "d_o", "d_q", "d_k", "d_v", "sinks", "mask", "block_mask", "cu_seqlens_q_padded", "cu_seqlens_k_padded"};
  return id >= 0 && id < kSlots ? names[id] : "?";
}

DLDataType dl_dtype(DType t) {
  if (!in_dtype_table(t)) return {kDLFloat, 32, 1};
  return {dtype_info(t).dl_code, dtype_info(t).dl_bits, 1};
}
static_assert(dtype_info(DType::F16).dl_code == kDLFloat && dtype_info(DType::BF16).dl_code == kDLBfloat &&
                  dtype_info(DType::I32).dl_code == kDLInt && dtype_info(DType::BOOL).dl_code == FC_DL_BOOL,
              "kDTypeTable's DLPack codes are DLPack's");

int32_t abi_code(DType t) { return abi_float(t) ? int32_t(dtype_info(t).abi) : int32_t(FC_DTYPE_UNKNOWN); }

DType dtype_of_abi(int32_t code, DType dflt) {
  for (const DTypeInfo& x : kDTypeTable)
    if (code != FC_DTYPE_UNKNOWN && abi_float(x.t) && x.abi == code) return x.t;
  return dflt;
}

bool abi_dtype_code(int32_t code) { return dtype_of_abi(code, kDtypeAsQ) != kDtypeAsQ; }

int32_t abi_mask_dtype_bits() {
  int32_t bits = 0;
  for (DType t : kernel_floats())
    if (abi_code(t) != FC_DTYPE_UNKNOWN) bits |= 1 << abi_code(t);
  return bits;
}

std::string abi_dtype_names(bool (*keep)(DType)) { return "FC_DTYPE_" + dtype_names(keep); }

// Every field of fc::Problem the ABI carries (the variants' per-sequence data travel as tensors).
fc_problem to_abi(const Problem& p) {
  fc_problem a{};
  a.batch = p.batch, a.heads_q = p.heads_q, a.heads_kv = p.heads_kv;
  a.n_q = p.n_q, a.n_k = p.n_k;
  a.d = p.d, a.d_v = head_dim_v(p);
  a.mask = int32_t(p.mask);
  a.window_left = p.window_left, a.window_right = p.window_right;
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.mask_kind = int32_t(p.mask_kind);  // version 5 (the tensors join in problem_args)
  a.block_q = p.block_q, a.block_k = p.block_k;
  return a;
}

CallPlan plan_call(const Problem& p, Layout layout, bool backward) {
  CallPlan plan;
  plan.problem = to_abi(p);
  plan.backward = backward;
  plan.layout = int32_t(layout);
  const DLDataType tq = dl_dtype(dtype_q(p)), tkv = dl_dtype(dtype_kv(p)), to = dl_dtype(dtype_o(p));
  const DLDataType i32 = dl_dtype(DType::I32);
  plan.slot[kQ] = tensor_slot(tq, shape_q(p), layout);    // (batch, heads_q, n_q, d); varlen (total_q, heads_q, d)
  plan.slot[kK] = tensor_slot(tkv, shape_kv(p), layout);  // (batch, heads_kv, n_k, d); varlen, paged: tensor.hpp
  plan.slot[kV] = tensor_slot(tkv, shape_v(p), layout);   // k's with d_v
  plan.slot[kO] = tensor_slot(to, shape_o(p), layout);    // q's with d_v
  plan.slot[kLse] = lse_slot(lse_dtype(p), shape_lse(p), layout);  // (batch, heads_q, n_q); varlen (heads_q, total_q)
  if (p.varlen) {
    plan.slot[kCuSeqlensQ] = tensor_slot(i32, {int64_t(p.batch) + 1}, Layout::Compact);  // (batch + 1)
    plan.slot[kCuSeqlensK] = tensor_slot(i32, {int64_t(p.batch) + 1}, Layout::Compact);  // (batch + 1)
  }
  if (is_paged(p)) plan.slot[kPageTable] = tensor_slot(i32, {p.batch, p.pages_per_seq}, Layout::Compact);
  if (p.alibi) plan.slot[kAlibi] = tensor_slot(dl_dtype(DType::F32), {p.heads_q}, Layout::Compact);  // (heads_q)
  if (p.sinks) plan.slot[kSinks] = tensor_slot(dl_dtype(DType::F32), {p.heads_q}, Layout::Compact);  // (heads_q)
  if (has_mask_tensor(p))  // (B_m, H_m, n_q, n_k)
    plan.slot[kMask] = tensor_slot(dl_dtype(p.mask_kind == MaskKind::Bool ? DType::BOOL : p.mask_dtype),
                                   {p.mask_b, p.mask_h, p.n_q, p.n_k}, Layout::Compact);
  if (has_block_mask(p))  // (B_m, H_m, ceil(n_q / block_q), ceil(n_k / block_k))
    plan.slot[kBlockMask] = tensor_slot(dl_dtype(DType::BOOL),
                                        {p.block_b, p.block_h, (int64_t(p.n_q) + p.block_q - 1) / p.block_q,
                                         (int64_t(p.n_k) + p.block_k - 1) / p.block_k},
                                        Layout::Compact);
  if (p.padded) {
    plan.slot[kCuSeqlensQPadded] = tensor_slot(i32, {int64_t(p.batch) + 1}, Layout::Compact);  // (batch + 1)
    plan.slot[kCuSeqlensKPadded] = tensor_slot(i32, {int64_t(p.batch) + 1}, Layout::Compact);  // (batch + 1)
  }
  if (backward) {
    plan.slot[kDo] = plan.slot[kO], plan.slot[kDq] = plan.slot[kQ];
    plan.slot[kDk] = plan.slot[kK], plan.slot[kDv] = plan.slot[kV];
  }
  uint64_t at = 0;
  for (ArenaSlot& s : plan.slot) {
    if (!s.present) continue;
    s.offset = at;
    s.span = span_elems(s) * uint64_t(elem_size(s));
    at = align_up(s.offset + s.span + kGuard);
  }
  plan.bytes = std::max<uint64_t>(at, kAlign);
  return plan;
}

void pack(const CallPlan& plan, const HostArgs& in, unsigned char* arena) {
  std::memset(arena, kFill, plan.bytes);
  const std::pair<int32_t, const HostTensor*> inputs[] = {{kQ, in.q},
                                                          {kK, in.k},
                                                          {kV, in.v},
                                                          {kO, in.o},
                                                          {kLse, in.lse},
                                                          {kDo, in.d_o},
                                                          {kCuSeqlensQ, in.cu_q},
                                                          {kCuSeqlensK, in.cu_k},
                                                          {kPageTable, in.page_table},
                                                          {kAlibi, in.alibi},
                                                          {kSinks, in.sinks},
                                                          {kMask, in.mask},
                                                          {kBlockMask, in.block_mask},
                                                          {kCuSeqlensQPadded, in.cu_q_padded},
                                                          {kCuSeqlensKPadded, in.cu_k_padded}};
  for (const auto& entry : inputs) {
    const int32_t id = entry.first;
    const ArenaSlot& s = plan.slot[id];
    if (!s.present || !entry.second || is_output(plan, id)) continue;
    HostTensor compact;  // a strided input (the suite's own "any strides" views) gathered first
    if (!entry.second->is_compact()) compact = entry.second->contiguous();
    const HostTensor* t = entry.second->is_compact() ? entry.second : &compact;
    check_tensor(s, *t, id);
    for_rows(s, [&](uint64_t at, int64_t bytes, int64_t from) {
      if (bytes > 0)
        std::memcpy(arena + at, t->bytes.data() + from, size_t(bytes));  // an empty tensor's data may be null
    });
  }
}

namespace {

// Padded varlen: whether each token of a packed axis is padding, read from the call's own offsets
// (the arena as packed: cu_seqlens and cu_seqlens_*_padded are inputs). Empty when the plan is not padded.
std::vector<bool> padding_tokens(const CallPlan& plan, const unsigned char* before, bool keys) {
  const ArenaSlot &cu = plan.slot[keys ? kCuSeqlensK : kCuSeqlensQ],
                  &pad = plan.slot[keys ? kCuSeqlensKPadded : kCuSeqlensQPadded];
  if (!pad.present || !cu.present) return {};
  const int64_t batch = pad.shape[0] - 1;
  auto at = [&](const ArenaSlot& x, int64_t i) {
    int32_t v = 0;
    std::memcpy(&v, before + x.offset + uint64_t(i) * 4, 4);
    return int64_t(v);
  };
  const int64_t total = at(pad, batch);
  std::vector<bool> padding(size_t(std::max<int64_t>(total, 0)), true);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = at(pad, b); t < at(pad, b) + at(cu, b + 1) - at(cu, b) && t < total; ++t)
      if (t >= 0) padding[size_t(t)] = false;
  return padding;
}

// An output element on a padding token that no longer holds its bytes (a write the contract forbids),
// named; the host copy of every padding element is set to 0 (the references' value there).
std::string check_padding(const CallPlan& plan, int32_t id, const unsigned char* arena, const unsigned char* before,
                          HostTensor* t) {
  const ArenaSlot& s = plan.slot[id];
  const bool keys = id == kDk || id == kDv, lse = id == kLse;
  const std::vector<bool> padding = padding_tokens(plan, before, keys);
  if (padding.empty()) return "";
  const int64_t es = elem_size(s), n = numel_of(s);
  std::string bad;
  for (int64_t e = 0; e < n; ++e) {
    std::vector<int64_t> x(size_t(s.ndim));
    int64_t rem = e;
    for (int a = s.ndim - 1; a >= 0; --a) x[size_t(a)] = rem % s.shape[a], rem /= s.shape[a];
    const int64_t token = lse ? x[1] : x[0];  // lse (heads_q, total_q); the others (total, heads, width)
    if (token < 0 || token >= int64_t(padding.size()) || !padding[size_t(token)]) continue;
    int64_t at = 0;
    for (int a = 0; a < s.ndim; ++a) at += x[size_t(a)] * s.strides[a];
    const uint64_t byte = s.offset + uint64_t(at * es);
    if (bad.empty() && std::memcmp(arena + byte, before + byte, size_t(es)) != 0)
      bad = fmt::format("the kernel wrote {} element {}, on padding token {} that no sequence holds", slot_name(id),
                        coords(s, e), token);
    if (t) std::memset(t->bytes.data() + e * es, 0, size_t(es));
  }
  return bad;
}

}  // namespace

std::string unpack(const CallPlan& plan, const unsigned char* arena, const unsigned char* before, const HostOuts& out) {
  std::vector<std::pair<uint64_t, uint64_t>> writable;  // [begin, end) byte ranges of output elements
  const std::pair<int32_t, HostTensor*> outputs[] = {
      {kO, out.o}, {kLse, out.lse}, {kDq, out.d_q}, {kDk, out.d_k}, {kDv, out.d_v}};
  for (const auto& entry : outputs) {
    const int32_t id = entry.first;
    HostTensor* t = entry.second;  // a named copy: clang before 16 cannot capture a structured binding
    const ArenaSlot& s = plan.slot[id];
    if (!s.present || !is_output(plan, id)) continue;
    if (t) check_tensor(s, *t, id);
    for_rows(s, [&](uint64_t at, int64_t bytes, int64_t to) {
      if (t && bytes > 0) std::memcpy(t->bytes.data() + to, arena + at, size_t(bytes));  // empty: data may be null
      writable.emplace_back(at, at + uint64_t(bytes));
    });
  }
  for (const auto& entry : outputs) {  // padded varlen: the outputs' padding tokens keep their bytes
    const ArenaSlot& s = plan.slot[entry.first];
    if (!s.present || !is_output(plan, entry.first)) continue;
    if (std::string e = check_padding(plan, entry.first, arena, before, entry.second); !e.empty()) return e;
  }
  std::sort(writable.begin(), writable.end());
  uint64_t from = 0;
  auto differs = [&](uint64_t a, uint64_t b) -> int64_t {  // first differing byte in [a, b), or -1
    if (a >= b || std::memcmp(arena + a, before + a, size_t(b - a)) == 0) return -1;
    for (uint64_t x = a; x < b; ++x)
      if (arena[x] != before[x]) return int64_t(x);
    return -1;
  };
  int64_t bad = -1;
  for (const auto& [b, e] : writable) {
    if ((bad = differs(from, b)) >= 0) break;
    from = std::max(from, e);
  }
  if (bad < 0) bad = differs(from, plan.bytes);
  if (bad < 0) return "";
  return stray_write(plan, uint64_t(bad));
}

namespace {

DLTensor slot_view(const CallPlan& plan, unsigned char* base, DLDevice dev, int32_t id) {
  const ArenaSlot& s = plan.slot[id];
  DLTensor t{};
  t.device = dev;
  if (!s.present) return t;
  t.data = base ? base + s.offset : nullptr;
  t.ndim = s.ndim;
  t.dtype = s.dtype;
  t.shape = const_cast<int64_t*>(s.shape);
  t.strides = s.has_strides ? const_cast<int64_t*>(s.strides) : nullptr;
  return t;
}

}  // namespace

fc_problem problem_args(const CallPlan& plan, unsigned char* base, DLDevice dev) {
  fc_problem p = plan.problem;
  p.sinks = slot_view(plan, base, dev, kSinks);
  p.mask_tensor = slot_view(plan, base, dev, kMask), p.block_mask = slot_view(plan, base, dev, kBlockMask);
  p.cu_seqlens_q_padded = slot_view(plan, base, dev, kCuSeqlensQPadded);
  p.cu_seqlens_k_padded = slot_view(plan, base, dev, kCuSeqlensKPadded);
  return p;
}

void make_args(const CallPlan& plan, unsigned char* base, DLDevice dev, fc_forward_args* fwd, fc_backward_args* bwd) {
  auto view = [&](int32_t id) { return slot_view(plan, base, dev, id); };
  fc_forward_args f{};
  f.q = view(kQ), f.k = view(kK), f.v = view(kV), f.o = view(kO), f.lse = view(kLse);
  f.cu_seqlens_q = view(kCuSeqlensQ), f.cu_seqlens_k = view(kCuSeqlensK);
  f.page_table = view(kPageTable), f.alibi_slopes = view(kAlibi);
  if (fwd) *fwd = f;
  if (bwd) {
    bwd->fwd = f;
    bwd->d_o = view(kDo), bwd->d_q = view(kDq), bwd->d_k = view(kDk), bwd->d_v = view(kDv);
  }
}

}  // namespace fc::plugin
