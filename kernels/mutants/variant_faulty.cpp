// The variant mutants: cpu_tiled's FA2 forward (kernels/cpu/tiled_forward.hpp) with one fault in
// the visible-key range, the K/V gather, the problem it reads or the finalisation.
#include "kernels/mutants/variant_faulty.hpp"

#include <fmt/format.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/glue.hpp"
#include "kernels/cpu/tile.hpp"

namespace fc::mutants {
namespace {

using F = VariantFault;

// visible_keys (attention.h) with the window and alignment faults. max_q, max_k: the batch's
// longest lengths (VarlenMaxAlignment aligns with them).
KeyRange faulty_keys(F f, const Problem& p, int64_t i, int64_t n_q, int64_t n_k, int64_t max_q, int64_t max_k) {
  const bool max_align = f == F::VarlenMaxAlignment && p.varlen;
  const int64_t a = aligned_row(p.mask, i, max_align ? max_q : n_q, max_align ? max_k : n_k);
  int64_t w = a;  // the row the window is measured from
  if (f == F::WindowOtherAlignment) w = p.mask == Mask::CausalTopLeft ? i + n_k - n_q : i;
  int64_t begin = 0, end = n_k;
  if (p.mask != Mask::None && a + 1 < end) end = a + 1;
  const int64_t right_end = w + p.window_right + (f == F::WindowRightExclusive ? 0 : 1);
  if (p.window_right >= 0 && right_end < end) end = right_end;
  const int64_t left_begin = w - p.window_left - (f == F::WindowLeftWide ? 1 : 0);
  if (p.window_left >= 0 && left_begin > begin) begin = left_begin;
  return {begin, std::max(begin, end)};
}

// exp evaluated in a wider type and rounded once: within half an ulp and a hair, as good as glibc's,
// but not always its bits.
struct WideExp {
  float operator()(float x) const { return float(std::exp(double(x))); }
  double operator()(double x) const { return double(std::exp((long double)x)); }
};

// The score with softcap's tanh flushing tiny arguments to 0 (SoftcapTinyZero), else cpu::score.
template <class A, class X>
cpu::Soft<A> faulty_score(F f, const cpu::Head<X>& h, int64_t i, int64_t j) {
  using L = cpu::Soft<A>;
  if (f != F::SoftcapTinyZero || !(h.p.softcap > 0)) return cpu::score<A>(h, i, j);
  L s = cpu::scaled_score<A>(h, i, j);
  const L y = s / L(h.p.softcap);
  s = L(h.p.softcap) * (std::fabs(y) < L(0x1p-40) ? L(0) : cpu::Tanh{}(y));
  if (h.p.alibi) s -= L(h.slope) * L(alibi_distance(h.p.mask, i, j, h.n_q, h.n_k));
  return s;
}

// Inputs::key_bias with the mask faults (the same reading when f is none of them).
double faulty_bias(F f, const Inputs& in, int64_t b, int64_t h, int64_t i, int64_t j) {
  const Problem& p = in.p;
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  if (has_block_mask(p)) {
    const HostTensor& bm = in.block_mask;
    int64_t x = broadcast_index(bm, b, h, i / p.block_q, j / p.block_k);
    if (f == F::BlockMaskTransposed) {  // the (row block, column block) swapped, wrapped into the tensor
      const int64_t bb = bm.shape[0] == 1 ? 0 : b, hh = bm.shape[1] == 1 ? 0 : h;
      x = (((bb * bm.shape[1] + hh) * bm.shape[3] + j / p.block_k) * bm.shape[2] + i / p.block_q) % bm.numel();
    }
    if (bm.get(x) == 0) return kNegInf;
  }
  if (!has_mask_tensor(p)) return 0.0;
  const HostTensor& m = in.mask;
  int64_t x = broadcast_index(m, b, h, i, j);
  if (f == F::MaskHeadStride) x = broadcast_index(m, b, 0, i, j);  // head 0's slice for every head
  if (p.mask_kind == MaskKind::Bool) return (m.get(x) != 0) == (f != F::MaskBoolInverted) ? 0.0 : kNegInf;
  if (f == F::MaskF32AsF16 && m.dtype == DType::F32) {  // element x as the half at bytes [2x, 2x + 2)
    Eigen::half v;
    std::memcpy(&v, m.bytes.data() + 2 * x, 2);
    return double(static_cast<float>(v));
  }
  return m.get(x);
}

// Does the fault's second code path (a wide exp) run on these inputs?
bool wide_exp(F f, const Inputs& in) {
  const Problem& p = in.p;
  bool empty = false;
  for (int64_t b = 0; p.varlen && b < p.batch; ++b)
    empty |= seq_n_q(p, in.seqs(), b) == 0 || seq_n_k(p, in.seqs(), b) == 0;
  return (f == F::VarlenWideExp && p.varlen) || (f == F::PagedWideExp && is_paged(p)) ||
         (f == F::StridedWideExp && in.strided()) || (f == F::WindowWideExp && has_window(p)) ||
         (f == F::AlibiWideExp && p.alibi) || (f == F::EmptySeqWideExp && empty) || (f == F::PaddedWideExp && p.padded);
}

// cpu_tiled's fa2_forward_head with faulty_keys for keys(), the exp Exp, and the ZeroKeysNaN
// finalisation.
template <class T, class A, class Exp>
void forward_head(F f, const cpu::Head<A>& h, int64_t max_q, int64_t max_k, const cpu::Tiling& t, T* o, double* lse,
                  double* m_work = nullptr, double* l_work = nullptr) {
  using L = cpu::Soft<A>;
  using cpu::cvt;
  const Exp exp_fn;
  const int64_t d = h.d_v;
  auto keys = [&](int64_t i) { return faulty_keys(f, h.p, i, h.n_q, h.n_k, max_q, max_k); };
  const bool masked = per_key_mask(h.p);
  auto bias = [&](int64_t i, int64_t j) { return faulty_bias(f, *h.in, h.b, h.hq, i, j); };
  cpu::Head<A> unmasked = h;  // scores without the mask (faulty_bias adds the additive value below)
  unmasked.in = nullptr;
  for (int64_t i0 = 0; i0 < h.n_q; i0 += t.block_m) {
    const int64_t i1 = std::min<int64_t>(i0 + t.block_m, h.n_q), rows = i1 - i0;
    std::vector<L> m(size_t(rows), rules::neg_inf<L>());            // (kBlockM)
    std::vector<L> l(size_t(rows), L(0));                           // (kBlockM)
    for (int64_t r = 0; l_work && r < rows; ++r)  // StaleRowSums: the running state is not reset
      m[size_t(r)] = L(m_work[i0 + r]), l[size_t(r)] = L(l_work[i0 + r]);
    std::vector<A> acc(size_t(rows * d), A(0.0f));                  // (kBlockM, d_v)
    std::vector<L> s(size_t(std::min<int64_t>(t.block_n, h.n_k)));  // (kBlockN)
    std::vector<char> live(s.size(), 1);                            // (kBlockN) keys no mask hides
    const KeyRange blk = {keys(i0).begin, keys(i1 - 1).end};
    for (int64_t j0 = blk.begin / t.block_n * t.block_n; j0 < blk.end && blk.begin < blk.end; j0 += t.block_n) {
      const int64_t j1 = std::min<int64_t>(j0 + t.block_n, h.n_k);
      for (int64_t r = 0; r < rows; ++r) {
        const KeyRange vis = keys(i0 + r);
        const int64_t jb = std::max(j0, vis.begin), jv = std::min(j1, vis.end);
        L m_new = m[size_t(r)];
        for (int64_t j = jb; j < jv; ++j) {
          const double kb = masked ? bias(i0 + r, j) : 0.0;
          live[size_t(j - j0)] = kb != -std::numeric_limits<double>::infinity();
          if (!live[size_t(j - j0)]) continue;  // hidden by a mask: not read
          s[size_t(j - j0)] = faulty_score<A>(f, unmasked, i0 + r, j);
          if (h.p.mask_kind == MaskKind::Additive) s[size_t(j - j0)] += L(kb);
          m_new = rules::running_max(m_new, s[size_t(j - j0)]);
        }
        // MaxOverTile: the window is applied after the max, so the tile's keys that only the window
        // hides join it (a shift: the same o in exact arithmetic, other bits).
        for (int64_t j = j0; f == F::MaxOverTile && jb < jv && j < j1; ++j)
          if (visible(Problem{.mask = h.p.mask}, i0 + r, j, h.n_q, h.n_k))
            m_new = rules::running_max(m_new, faulty_score<A>(f, h, i0 + r, j));
        const L alpha = rules::rescale(m[size_t(r)], m_new, exp_fn);
        const L shift = rules::safe_shift(m_new);
        A* acc_r = acc.data() + r * d;  // (d_v)
        l[size_t(r)] *= alpha;
        for (int64_t c = 0; c < d; ++c) acc_r[c] = cvt<A>(cvt<L>(acc_r[c]) * alpha);
        for (int64_t j = jb; j < jv; ++j) {
          if (!live[size_t(j - j0)]) continue;
          const L p = exp_fn(s[size_t(j - j0)] - shift);
          l[size_t(r)] += p;
          const A p_op = cpu::gemm_operand<T, A>(p, t.p_operand);
          const A* v_j = h.v + j * d;  // (d_v)
          for (int64_t c = 0; c < d; ++c) acc_r[c] = cpu::mac<A>(acc_r[c], p_op, v_j[c]);
        }
        m[size_t(r)] = m_new;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      // The sink as cpu_tiled merges it; SinkNotInDenominator keeps the keys' (m, l) for o,
      // SinkNotInLse for lse.
      L m_keys = m[size_t(r)], l_keys = l[size_t(r)];
      if (h.p.sinks) {
        const L alpha = rules::merge_sink(m[size_t(r)], l[size_t(r)], L(h.sink), exp_fn);
        for (int64_t c = 0; c < d; ++c) acc[size_t(r * d + c)] = cvt<A>(cvt<L>(acc[size_t(r * d + c)]) * alpha);
        m_keys = rules::running_max(m_keys, L(h.sink)), l_keys *= alpha;  // the keys' sum at the new max
      }
      const L l_o = f == F::SinkNotInDenominator ? l_keys : l[size_t(r)];
      const L m_lse = f == F::SinkNotInLse ? m_keys : m[size_t(r)],
              l_lse = f == F::SinkNotInLse ? l_keys : l[size_t(r)];
      // ZeroKeysNaN: a sequence without keys divides 0 by l = 0.
      // MaskedRowNaN: a row a mask empties (its range not empty) divides too.
      const bool masked_empty = f == F::MaskedRowNaN && masked && keys(i0 + r).end > keys(i0 + r).begin;
      const L inv = (f == F::ZeroKeysNaN && h.n_k == 0) || masked_empty ? L(1) / l_o : rules::inv_l(l_o);
      const bool divides = ((f == F::SinkDivides && h.p.sinks) || (f == F::MaskDivides && masked) ||
                            (f == F::BlockMaskDivides && has_block_mask(h.p))) &&
                           l_o != L(0);
      for (int64_t c = 0; c < d; ++c) {
        const L x = cvt<L>(acc[size_t(r * d + c)]);
        o[(i0 + r) * d + c] = cvt<T>(divides ? x / l_o : x * inv);
      }
      lse[i0 + r] = double(rules::finalize_lse(m_lse, l_lse, cpu::Log{}));
      if (l_work) m_work[i0 + r] = double(m[size_t(r)]), l_work[i0 + r] = double(l[size_t(r)]);
    }
  }
}

// A strided tensor read as if it were contiguous from the start of its storage.
HostTensor as_if_contiguous(const HostTensor& t) {
  if (t.is_compact()) return t;
  HostTensor out(t.dtype, t.shape);
  std::memcpy(out.bytes.data(), t.bytes.data(), std::min(out.bytes.size(), t.bytes.size()));
  return out;
}

// Paged K/V read with page size 128: key j of sequence b at slot j % 128 of the page the table
// lists at column j / 128 (the last column past the table), wrapping around the storage.
Inputs read_with_page_128(const Inputs& in) {
  const Problem& p = in.p;
  const Seqs seqs = in.seqs();
  Inputs u = in;
  u.p.page_size = u.p.num_pages = u.p.pages_per_seq = 0;
  u.page_table = HostTensor();
  const int64_t dv = head_dim_v(p), slots = int64_t(p.num_pages) * p.page_size;
  u.k = HostTensor(p.dtype, {p.total_k, p.heads_kv, p.d});
  u.v = HostTensor(p.dtype, {p.total_k, p.heads_kv, dv});
  const HostTensor k = in.k.contiguous(), v = in.v.contiguous();
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t j = 0; j < seq_n_k(p, seqs, b); ++j) {
      const int64_t col = std::min<int64_t>(j / 128, p.pages_per_seq - 1);
      const int64_t slot = (int64_t(seqs.page_table[b * p.pages_per_seq + col]) * p.page_size + j % 128) % slots;
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        const int64_t from = slot * p.heads_kv + h, to = (int64_t(seqs.cu_k[b]) + j) * p.heads_kv + h;
        for (int64_t c = 0; c < p.d; ++c) u.k.set(to * p.d + c, k.get(from * p.d + c));
        for (int64_t c = 0; c < dv; ++c) u.v.set(to * dv + c, v.get(from * dv + c));
      }
    }
  return u;
}

// PageIndexInt16: paged K/V read through a table whose entries were narrowed to int16 (a physical page
// >= 2^15 wraps negative; the read lands on that page modulo the pool), as a contiguous batch.
// PageTable16 (staged): the table's column c read as column c % 16.
Inputs read_with_int16_pages(const Inputs& in, bool staged = false) {
  const Problem& p = in.p;
  const Seqs seqs = in.seqs();
  Inputs u = in;
  u.p.page_size = u.p.num_pages = u.p.pages_per_seq = 0;
  u.page_table = HostTensor();
  const int64_t dv = head_dim_v(p);
  u.k = HostTensor(dtype_kv(p), {p.total_k, p.heads_kv, p.d});
  u.v = HostTensor(dtype_kv(p), {p.total_k, p.heads_kv, dv});
  const HostTensor k = in.k.contiguous(), v = in.v.contiguous();
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t j = 0; j < seq_n_k(p, seqs, b); ++j) {
      const int64_t col = staged ? j / p.page_size % 16 : j / p.page_size;
      const int64_t entry = seqs.page_table[b * p.pages_per_seq + col];
      const int64_t narrow = staged ? entry : int64_t(int16_t(entry));
      const int64_t page = (narrow % p.num_pages + p.num_pages) % p.num_pages;
      const int64_t slot = page * p.page_size + j % p.page_size;
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        const int64_t from = slot * p.heads_kv + h, to = (int64_t(seqs.cu_k[b]) + j) * p.heads_kv + h;
        for (int64_t c = 0; c < p.d; ++c) u.k.set(to * p.d + c, k.get(from * p.d + c));
        for (int64_t c = 0; c < dv; ++c) u.v.set(to * dv + c, v.get(from * dv + c));
      }
    }
  return u;
}

// StrideGapRead: each row of a strided tensor's innermost axis gains 0 * (the storage element one
// step past its last element) on that last element, where that element is a gap.
HostTensor with_gap_read(const HostTensor& t) {
  if (t.is_compact() || t.shape.empty() || t.numel() == 0) return t;
  std::vector<bool> used(t.bytes.size() / size_t(dtype_size(t.dtype)), false);
  for (int64_t i = 0; i < t.numel(); ++i) used[size_t(t.storage_index(i))] = true;
  HostTensor out = t.contiguous(), gap = t;
  gap.shape = {int64_t(used.size())}, gap.strides.clear(), gap.offset = 0;  // the storage as a flat tensor
  const int64_t w = t.shape.back(), step = t.strides.back();
  for (int64_t last = w - 1; last < t.numel(); last += w) {
    const int64_t next = t.storage_index(last) + step;
    if (next < 0 || next >= int64_t(used.size()) || used[size_t(next)]) continue;
    out.set(last, out.get(last) + 0.0 * gap.get(next));
  }
  return out;
}

// PageTailRead: the slots of each sequence's last page past its end, 0 * their values added to the
// sequence's last key (k and v).
Inputs with_tail_read(const Inputs& in) {
  const Problem& p = in.p;
  const Seqs seqs = in.seqs();
  Inputs r = in;
  r.k = in.k.contiguous(), r.v = in.v.contiguous();
  const int64_t dv = head_dim_v(p);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t n = seq_n_k(p, seqs, b);
    if (n == 0 || n % p.page_size == 0) continue;
    const int64_t page = seqs.page_table[b * p.pages_per_seq + (n - 1) / p.page_size];
    const int64_t last = page * p.page_size + (n - 1) % p.page_size;
    for (int64_t slot = last + 1; slot < (page + 1) * p.page_size; ++slot)
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        for (int64_t c = 0; c < p.d; ++c) {
          const int64_t at = (last * p.heads_kv + h) * p.d + c;
          r.k.set(at, r.k.get(at) + 0.0 * in.k.get((slot * p.heads_kv + h) * p.d + c));
        }
        for (int64_t c = 0; c < dv; ++c) {
          const int64_t at = (last * p.heads_kv + h) * dv + c;
          r.v.set(at, r.v.get(at) + 0.0 * in.v.get((slot * p.heads_kv + h) * dv + c));
        }
      }
  }
  return r;
}

// The problem's sizes, without its dtype, mask or strides: the key LayoutByShape and StaleRowSums
// cache under.
std::string size_key(const Problem& p) {
  return fmt::format("{} {} {} {} {} {} {} {} {} {}", p.batch, p.heads_q, p.heads_kv, p.n_q, p.n_k, p.d, head_dim_v(p),
                     p.total_q, p.total_k, p.page_size);
}

std::mutex cache_mutex;  // LayoutByShape's and StaleRowSums' caches (the audit calls kernels from many threads)

// LayoutByShape: the first call of a size key records q, k, v's strides and offsets; a later call of
// that key reads its storage through them (an element they put outside the storage reads 0).
HostTensor through(const HostTensor& t, const std::vector<int64_t>& strides, int64_t offset) {
  HostTensor v = t;
  v.strides = strides, v.offset = offset;
  if (v.strides.size() != v.shape.size() && !v.strides.empty()) return HostTensor(t.dtype, t.shape);
  if (!v.strides.empty() && !v.strides_in_bounds()) return HostTensor(t.dtype, t.shape);
  if (v.strides.empty() && t.bytes.size() < size_t(t.numel() * dtype_size(t.dtype))) return HostTensor(t.dtype, t.shape);
  if (v.strides.empty()) {  // compact strides over a strided storage: its first elements, row-major
    HostTensor out(t.dtype, t.shape);
    std::memcpy(out.bytes.data(), t.bytes.data(), out.bytes.size());
    return out;
  }
  return v;
}

Inputs with_cached_layout(const Inputs& in) {
  struct CachedLayout {
    std::vector<int64_t> strides[3];
    int64_t offset[3] = {0, 0, 0};
  };
  static std::map<std::string, CachedLayout> cache;
  const std::lock_guard<std::mutex> lock(cache_mutex);
  const std::string key = size_key(in.p);
  Inputs r = in;
  HostTensor* ts[3] = {&r.q, &r.k, &r.v};
  const auto it = cache.find(key);
  if (it == cache.end()) {
    CachedLayout l;
    for (int x = 0; x < 3; ++x) l.strides[x] = ts[x]->strides, l.offset[x] = ts[x]->offset;
    cache.emplace(key, std::move(l));
    return r;
  }
  for (int x = 0; x < 3; ++x) *ts[x] = through(*ts[x], it->second.strides[x], it->second.offset[x]);
  return r;
}

// WritesPastO: 0 stored at o's element numel() (row shape[0] of the first axis, one past the end),
// where the storage has it (a guarded output); an allocation of exactly o's size is left alone.
void write_past_end(HostTensor& o) {
  if (o.numel() == 0) return;
  const int64_t at = o.is_compact() ? o.numel() : o.offset + o.shape[0] * o.strides[0];
  const size_t es = size_t(dtype_size(o.dtype));
  if (at >= 0 && size_t(at + 1) * es <= o.bytes.size()) std::memset(o.bytes.data() + size_t(at) * es, 0, es);
}

// WritesLseGap: -inf stored one element past the last query of each innermost row of lse, where that
// element is outside every logical element (a gap of a strided lse); a compact lse is left alone.
void write_lse_gaps(HostTensor& lse) {
  if (lse.is_compact() || lse.numel() == 0) return;
  const int64_t w = lse.shape.back(), es = dtype_size(lse.dtype), elems = int64_t(lse.bytes.size()) / es;
  std::vector<bool> used(size_t(elems), false);
  for (int64_t i = 0; i < lse.numel(); ++i) used[size_t(lse.storage_index(i))] = true;
  for (int64_t last = w - 1; last < lse.numel(); last += w) {
    const int64_t next = lse.storage_index(last) + lse.strides.back();
    if (next < 0 || next >= elems || used[size_t(next)]) continue;
    const double inf = -std::numeric_limits<double>::infinity();
    if (lse.dtype == DType::F64) std::memcpy(lse.bytes.data() + size_t(next * es), &inf, 8);
    else {
      const float f = float(inf);
      std::memcpy(lse.bytes.data() + size_t(next * es), &f, 4);  // lse is F32 (F64 for F64 queries)
    }
  }
}

// The inputs as the faulty kernel reads them.
Inputs as_read(F f, const Inputs& in) {
  Inputs r = in;
  if (f == F::SoftcapDropped) r.p.softcap = 0;
  if (f == F::AlibiForcesCausal && in.p.alibi && in.p.mask == Mask::None) r.p.mask = Mask::CausalBottomRight;
  if (f == F::StridesIgnored) r.q = as_if_contiguous(in.q), r.k = as_if_contiguous(in.k), r.v = as_if_contiguous(in.v);
  if (f == F::PageSize128 && is_paged(in.p) && in.p.page_size != 128) r = read_with_page_128(r);
  if (f == F::StrideGapRead) r.q = with_gap_read(in.q), r.k = with_gap_read(in.k), r.v = with_gap_read(in.v);
  if (f == F::PageTailRead && is_paged(in.p)) r = with_tail_read(r);
  if (f == F::LayoutByShape) r = with_cached_layout(r);
  if (f == F::PaddedReadsCu) r.p.padded = false;  // q_row, kv_row, lse_index from cu_seqlens
  if (f == F::PageIndexInt16 && is_paged(in.p) && in.p.num_pages > (1 << 15)) r = read_with_int16_pages(r);
  if (f == F::PageTable16 && is_paged(in.p) && int64_t(in.p.n_k) > 16 * int64_t(in.p.page_size))
    r = read_with_int16_pages(r, true);
  return r;
}

template <class T, class A>
void faulty_forward(F f, const Inputs& given, const cpu::Tiling& t, Outputs& out) {
  const Inputs in = as_read(f, given);
  const Problem& p = in.p;
  const Seqs seqs = in.seqs();
  // StaleRowSums: one running max m and sum l per (sequence, head, row) of the shape, kept from call to
  // call (m from -inf, l from 0 when allocated).
  static std::map<std::string, std::vector<double>> sums;
  std::unique_lock<std::mutex> lock(cache_mutex, std::defer_lock);
  std::vector<double>* work = nullptr;
  if (f == F::StaleRowSums) {
    lock.lock();
    const size_t rows = size_t(int64_t(p.batch) * p.heads_q * p.n_q);
    auto [it, fresh] = sums.try_emplace(size_key(p), 2 * rows, 0.0);
    if (fresh) std::fill(it->second.begin(), it->second.begin() + std::ptrdiff_t(rows), -INFINITY);
    work = &it->second;
  }
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t row0 = (b * p.heads_q + h) * p.n_q, rows = int64_t(p.batch) * p.heads_q * p.n_q;
      double* m_work = work ? work->data() + row0 : nullptr;
      double* l_work = work ? work->data() + rows + row0 : nullptr;
      const cpu::WideHead<A> wide = cpu::widen_head<A, T>(in, b, h);
      std::vector<T> o_h(size_t(wide.n_q * wide.d_v));  // (n_q, d_v)
      std::vector<double> lse_h(size_t(wide.n_q));      // (n_q)
      if (wide_exp(f, given))
        forward_head<T, A, WideExp>(f, wide.view(), p.n_q, p.n_k, t, o_h.data(), lse_h.data());
      else
        forward_head<T, A, cpu::Exp>(f, wide.view(), p.n_q, p.n_k, t, o_h.data(), lse_h.data(), m_work, l_work);
      for (int64_t i = 0; i < wide.n_q; ++i) {
        cpu::write_row<T>(out.o, q_row(p, seqs, b, h, i), wide.d_v, o_h.data() + i * wide.d_v);
        out.lse.set(lse_index(p, seqs, b, h, i), lse_h[size_t(i)]);
      }
    }
  if (f == F::WritesPastO) write_past_end(out.o);
  if (f == F::WritesLseGap) write_lse_gaps(out.lse);
}

}  // namespace

Kernel make_variant_faulty_kernel(F f, const std::string& name, const std::string& description) {
  Kernel k;
  KernelInfo& i = k.info;
  i.name = name;
  i.device = "cpu";
  i.mutant = f != F::None;
  i.description = description;
  i.dtypes = {DType::F16, DType::BF16, DType::F32, DType::F64};
  // The window after the max is this kernel's fp32 path only: in 16-bit storage the shifted weights
  // reach P's subnormals and the error model rightly rejects it (bounds_variants_test).
  if (f == F::MaxOverTile) i.dtypes = {DType::F32};
  i.masks = {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight};
  i.any_tile = true;
  for (auto [bm, bn] : {std::pair{64, 64}, std::pair{16, 16}, std::pair{17, 33}}) {
    Config c;
    c.block_m = bm, c.block_n = bn;
    i.configs.push_back(c);
  }
  i.variants = all_variants();
  i.exact = {.rows = true, .shared_scores = true, .tile_weights = true, .exact_scores = true, .mask_walk = true};
  // cpu_tiled's FA2 arithmetic (the fault is what the suite must find), in the order it forces.
  i.arithmetic = [](const Problem& p, const Config& c) {
    Config fa2 = c;
    fa2.order = LoopOrder::FA2;
    return cpu::tiled_arithmetic(p, fa2);
  };
  k.supports = [](const Problem& p) { return well_formed(p); };
  k.forward = [f](const Inputs& in, const Config& c, Outputs& out) {
    cpu::expect_forward(in, out);
    cpu::Tiling t = cpu::tiling_of(c);
    t.order = LoopOrder::FA2;  // the FA2 loop order whatever the config asks
    cpu::with_types(in.p.dtype, c.accum, [&]<class T, class A>() { faulty_forward<T, A>(f, in, t, out); });
  };
  return k;
}

void register_variant_mutants(std::vector<Kernel>& out) {
  struct VariantMutantRow {
    F fault;
    const char* name;
    const char* description;
  };
  static const VariantMutantRow rows[] = {
      {F::WindowRightExclusive, "mutant_window_right_exclusive",
       "the window's right edge exclusive (j < i' + right): window (n, 0) drops the diagonal"},
      {F::WindowLeftWide, "mutant_window_left_wide", "the window's left edge one key too far (j >= i' - left - 1)"},
      {F::WindowOtherAlignment, "mutant_window_other_alignment",
       "the window measured from the other causal alignment's row"},
      {F::SoftcapDropped, "mutant_softcap_dropped", "softcap accepted and never applied"},
      {F::AlibiForcesCausal, "mutant_alibi_forces_causal",
       "ALiBi turns on the causal mask (bottom-right, no mask's alignment): a path written for decoder-only models"},
      {F::PageSize128, "mutant_page_size_128", "paged K/V indexed with page size 128 whatever the table's page size"},
      {F::VarlenMaxAlignment, "mutant_varlen_max_alignment",
       "varlen rows aligned with the batch's longest lengths instead of the sequence's own"},
      {F::StridesIgnored, "mutant_strides_ignored", "q, k, v read as contiguous whatever their strides"},
      {F::ZeroKeysNaN, "mutant_zero_keys_nan", "a sequence with no key gives o = 0/0 = NaN"},
      {F::VarlenWideExp, "mutant_varlen_wide_exp",
       "the varlen path computes exp in double: right values, not the dense bits"},
      {F::PagedWideExp, "mutant_paged_wide_exp",
       "the paged path computes exp in double: right values, not the contiguous bits"},
      {F::StridedWideExp, "mutant_strided_wide_exp",
       "the strided-input path computes exp in double: right values, not the compact bits"},
      {F::WindowWideExp, "mutant_window_wide_exp",
       "the windowed path computes exp in double: window (n, 0) is not causal's bits"},
      {F::AlibiWideExp, "mutant_alibi_wide_exp",
       "the ALiBi path computes exp in double: zero slopes are not no ALiBi's bits"},
      {F::EmptySeqWideExp, "mutant_empty_seq_wide_exp",
       "a batch with an empty sequence takes a path with exp in double: the other sequences' bits change"},
      {F::MaxOverTile, "mutant_max_over_tile",
       "fp32: the window applied after the row max, so keys of the tile only the window hides join it"},
      {F::SoftcapTinyZero, "mutant_softcap_tiny_zero",
       "softcap's tanh flushes |s/c| < 2^-40 to 0: right near the scores, every score 0 at a huge cap"},
      {F::StrideGapRead, "mutant_reads_stride_gap",
       "a vector load reads one element past each row of a strided q, k or v and weighs it by 0: NaN leaks from a gap"},
      {F::PageTailRead, "mutant_reads_page_tail",
       "each sequence's last page read whole, its slots past the sequence's end weighted by 0: NaN leaks from the "
       "tail"},
      {F::LayoutByShape, "mutant_layout_by_shape",
       "q, k, v strides cached by the problem's sizes: a later call of those sizes in other strides reads through "
       "the first call's"},
      {F::StaleRowSums, "mutant_stale_row_sums",
       "the rows' running max and sum kept in a per-shape workspace reset once: a second call of a shape starts "
       "from the first's"},
      {F::SinkNotInDenominator, "mutant_sink_not_in_denominator",
       "the attention sink enters lse but not o's denominator (o normalised by the keys' sum alone)"},
      {F::SinkNotInLse, "mutant_sink_not_in_lse", "the attention sink enters o's denominator but not lse"},
      {F::SinkDivides, "mutant_sink_divides",
       "the sinks' path divides o by l (the dense path multiplies by 1/l): right values, but a sink at -inf is not "
       "no sink's bits"},
      {F::PaddedReadsCu, "mutant_padded_reads_cu",
       "padded varlen: tokens located by cu_seqlens instead of cu_seqlens_*_padded (reads padding, writes the "
       "compact positions)"},
      {F::PaddedWideExp, "mutant_padded_wide_exp",
       "the padded-varlen path computes exp in double: right values, not the compact layout's bits"},
      {F::WritesPastO, "mutant_writes_past_o",
       "o's store loop runs one row too far: the element after o's last is written (harmless in an allocation of "
       "o's size, caught by the canary after it)"},
      {F::WritesLseGap, "mutant_writes_lse_gap",
       "lse stored through a row one element wider than its queries: -inf lands in the gap after each row of a "
       "padded lse (harmless in a compact one)"},
      {F::PageIndexInt16, "mutant_page_index_int16",
       "paged K/V: the page table's entries narrowed to int16, so a physical page >= 2^15 wraps and another page is "
       "read"},
      {F::PageTable16, "mutant_page_table_16",
       "paged K/V: the page table staged 16 entries at a time and never reloaded, so page 16 reads page 0's entry "
       "(wrong past 16 pages: past 4096 keys with pages of 256)"},
      {F::MaskF32AsF16, "mutant_mask_f32_as_f16",
       "an F32 additive mask tensor read as F16 elements (the shipped bug: 97 % NaN)"},
      {F::MaskHeadStride, "mutant_mask_head_stride",
       "a per-head mask tensor (H_m = heads_q) read with head stride 0, as if broadcast: every head reads head 0's"},
      {F::MaskBoolInverted, "mutant_mask_bool_inverted", "a boolean mask tensor read as true = masked out"},
      {F::BlockMaskTransposed, "mutant_block_mask_transposed",
       "the block mask read at (key block, query block): the block index transposed"},
      {F::MaskedRowNaN, "mutant_mask_hidden_row_nan", "a row whose every key a mask hides gives o = 0/0 = NaN"},
      {F::MaskDivides, "mutant_mask_divides",
       "the masked path (a mask tensor or a block mask) divides o by l (the dense path multiplies by 1/l): right "
       "values, a mask equal to causal is not causal's bits"},
      {F::BlockMaskDivides, "mutant_block_mask_divides",
       "the block-mask path divides o by l (the dense path multiplies by 1/l): right values, not the dense mask "
       "tensor's bits"},
  };
  for (const VariantMutantRow& r : rows) out.push_back(make_variant_faulty_kernel(r.fault, r.name, r.description));
}

}  // namespace fc::mutants
