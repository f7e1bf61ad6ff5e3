// flashcheck contract (docs/SEMANTICS.md). Included by every kernel, reference and property; usable from
// host C++ and CUDA device code alike. Nothing here knows about Eigen, Boost or any storage type.
#pragma once

#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#define FC_HD __host__ __device__
#else
#define FC_HD
#endif

namespace fc {

// Storage dtypes. F64 exists on the CPU only (references, cpu_tiled with fp64 storage).
// I32 is for the variants' offsets and page tables only, never a problem's storage; BOOL (one byte,
// 0 or 1) for boolean mask tensors only.
enum class DType : int32_t { F32 = 0, F16 = 1, BF16 = 2, F64 = 3, I32 = 4, BOOL = 5 };
FC_HD inline bool is_float(DType t) { return t != DType::I32 && t != DType::BOOL; }

// The dtype table: every fact about a dtype that code looks up, one row per DType in enum order
// (dtype_info(t) is t's row). The names, sizes, DLPack codes, precisions and ranges elsewhere (io/,
// reports/, fuzz/, the plugin ABI map, the Python package's generated dtypes.py) come from it.
struct DTypeInfo {
  DType t;
  const char* name;  // the safetensors spelling
  int32_t bytes;     // per element
  bool is_float;
  int32_t precision;  // significand bits p, the implicit one included (unit roundoff 2^-p); 0: an integer
  int32_t min_exp;    // floats: the smallest normal is 2^min_exp (the smallest subnormal 2^(min_exp - p + 1))
  int32_t max_exp;    // the largest finite value lies in [2^max_exp, 2^(max_exp + 1)); integers: its bits
  double max_finite;  // the largest finite value
  uint8_t dl_code;    // DLPack's DLDataType code (kDLInt 0, kDLFloat 2, kDLBfloat 4, kDLBool 6) ...
  uint8_t dl_bits;    // ... and bits (lanes 1)
  uint8_t abi;        // the plugin ABI's code (enum fc_dtype_code, include/flashcheck/plugin.h); 0: none
  int8_t sweep;       // its place in the audit sweep (-1: not swept); a swept dtype is a kernel float (below)
};
inline constexpr DTypeInfo kDTypeTable[] = {
    {DType::F32, "F32", 4, true, 24, -126, 127, 0x1.fffffep127, 2, 32, 3, 2},
    {DType::F16, "F16", 2, true, 11, -14, 15, 65504.0, 2, 16, 1, 0},
    {DType::BF16, "BF16", 2, true, 8, -126, 127, 0x1.fep127, 4, 16, 2, 1},
    {DType::F64, "F64", 8, true, 53, -1022, 1023, 0x1.fffffffffffffp1023, 2, 64, 4, -1},
    {DType::I32, "I32", 4, false, 0, 0, 31, 2147483647.0, 0, 32, 0, -1},
    {DType::BOOL, "BOOL", 1, false, 0, 0, 0, 1.0, 6, 8, 0, -1},
};
constexpr bool dtype_table_in_enum_order() {
  for (int32_t i = 0; i < int32_t(std::size(kDTypeTable)); ++i)
    if (int32_t(kDTypeTable[i].t) != i) return false;
  return true;
}
static_assert(dtype_table_in_enum_order(), "kDTypeTable: one row per DType, in enum order");
// The swept rows are floats with places 0, 1, ..., each once; ABI codes are distinct.
constexpr bool dtype_table_places_ok() {
  const int32_t n = int32_t(std::size(kDTypeTable));
  int32_t swept = 0;
  for (int32_t i = 0; i < n; ++i) {
    const DTypeInfo& x = kDTypeTable[i];
    if (x.sweep >= 0 && (!x.is_float || x.sweep >= n)) return false;
    swept += x.sweep >= 0;
    for (int32_t j = 0; j < i; ++j)
      if ((x.sweep >= 0 && kDTypeTable[j].sweep == x.sweep) || (x.abi != 0 && kDTypeTable[j].abi == x.abi))
        return false;
  }
  for (int32_t i = 0; i < n; ++i)
    if (kDTypeTable[i].sweep >= swept) return false;
  return true;
}
static_assert(dtype_table_places_ok(), "kDTypeTable: sweep places 0..n-1 on floats, each once; distinct ABI codes");
// Whether t has a row (kDtypeAsQ, or a value read from outside, may not); t's row, when it has one.
constexpr bool in_dtype_table(DType t) { return int32_t(t) >= 0 && int32_t(t) < int32_t(std::size(kDTypeTable)); }
constexpr const DTypeInfo& dtype_info(DType t) { return kDTypeTable[int32_t(t)]; }
// A kernel float: a storage dtype of the audit sweep, the merge kind and additive mask tensors (F16,
// BF16, F32). F64 is the references' and cpu_tiled's alone; I32 and BOOL are index dtypes.
constexpr bool kernel_float(DType t) { return in_dtype_table(t) && dtype_info(t).sweep >= 0; }
// A storage float of the plugin ABI (the kernel floats and F64).
constexpr bool abi_float(DType t) { return in_dtype_table(t) && dtype_info(t).is_float && dtype_info(t).abi != 0; }
// A Problem's dtype_kv or dtype_o that is q's (the default: one dtype for every tensor). Not a dtype:
// read a problem's dtypes through dtype_q, dtype_kv and dtype_o.
inline constexpr DType kDtypeAsQ = static_cast<DType>(-1);

// The storage dtypes of one problem's tensors (docs/SEMANTICS.md, "Per-tensor dtypes"): q (and d_q),
// k and v (and d_k, d_v), o (and d_o); lse is fp32 (fp64 when q is F64) whatever they are.
struct DtypeSet {
  DType q = DType::F32, kv = DType::F32, o = DType::F32;
  FC_HD bool uniform() const { return q == kv && q == o; }
  FC_HD bool operator==(const DtypeSet& b) const { return q == b.q && kv == b.kv && o == b.o; }
};

// Masks. top-left: key j visible to query i iff j <= i (PyTorch SDPA is_causal).
// bottom-right: j <= i + n_k - n_q (FlashAttention >= 2.1): the last query sees every key.
enum class Mask : int32_t { None = 0, CausalTopLeft = 1, CausalBottomRight = 2 };

// Mask tensors (contract v3, docs/SEMANTICS.md "Mask tensors"): none, boolean (true: the key takes
// part, PyTorch SDPA's attn_mask convention) or additive (a float added to the score after softcap
// and ALiBi; -inf hides the key). The tensor is (B_m, H_m, n_q, n_k) with B_m in {1, batch} and H_m
// in {1, heads_q}, broadcast like SDPA's; dense problems only.
enum class MaskKind : int32_t { None = 0, Bool = 1, Additive = 2 };

// One attention problem. Dense: q, o, d_o, d_q (batch, heads_q, n_q, d); k, v, d_k, d_v
// (batch, heads_kv, n_k, d); lse (batch, heads_q, n_q), float32 natural-log; contiguous row-major
// unless a tensor carries strides (contract/tensor.hpp). The fields after `scale` are the variants of
// contract v2 (docs/SEMANTICS.md); their defaults are dense attention, and a kernel sees a variant
// only if it declares it (KernelInfo::variants).
struct Problem {
  int32_t batch = 1;
  int32_t heads_q = 1;
  int32_t heads_kv = 1;  // heads_q % heads_kv == 0 (MQA/GQA)
  int32_t n_q = 1;       // varlen: the longest sequence's query count
  int32_t n_k = 1;       // varlen: the longest sequence's key count
  int32_t d = 1;         // head dim of q, k
  DType dtype = DType::F32;  // storage of q (and d_q); of every tensor unless dtype_kv, dtype_o say otherwise
  Mask mask = Mask::None;
  double scale = 1.0;         // s_ij = scale * q_i . k_j; callers default it with default_scale(d)
  int32_t d_v = 0;            // head dim of v, o, d_o, d_v; 0: d
  int32_t window_left = -1;   // sliding window: key j visible to row i iff i' - left <= j <= i' + right
  int32_t window_right = -1;  // (i' = aligned_row); -1: unbounded on that side
  double softcap = 0;         // c > 0: s <- c tanh(s / c) on the scaled score, before ALiBi and masking
  bool alibi = false;         // s_ij -= slope_h |i' - j| after softcap; slopes fp32, one per query head
  bool varlen = false;        // sequences packed on one token axis by cu_seqlens_q / cu_seqlens_k
  int64_t total_q = 0;        // varlen: cu_seqlens_q[batch], the packed query tokens
  int64_t total_k = 0;        // varlen: cu_seqlens_k[batch], the keys (paged: the keys in use)
  int32_t page_size = 0;      // paged K/V (varlen only): keys per page; 0: k, v not paged
  int32_t num_pages = 0;      // paged: physical pages of k and v
  int32_t pages_per_seq = 0;  // paged: columns of the page table
  // Per-tensor dtypes (read them through dtype_q, dtype_kv, dtype_o; set them with set_dtypes).
  DType dtype_kv = kDtypeAsQ;  // storage of k, v (and d_k, d_v); kDtypeAsQ: dtype
  DType dtype_o = kDtypeAsQ;   // storage of o (and d_o); kDtypeAsQ: dtype
  // Contract v3 (docs/SEMANTICS.md, "Attention sinks"): one fp32 logit sink_h per query head joins
  // every row's softmax denominator and has no value; lse includes it. false: no sinks.
  bool sinks = false;
  // Contract v3 (docs/SEMANTICS.md, "Padded varlen"): varlen sequence b's tokens start at
  // cu_seqlens_q_padded[b] / cu_seqlens_k_padded[b] of the packed tensors (total_q, total_k: their
  // last entries) while cu_seqlens_q / cu_seqlens_k give the lengths; the tokens between are padding
  // (never read, never written). Varlen only, not with paged K/V. false: sequences packed end to end.
  bool padded = false;
  // Contract v3 (docs/SEMANTICS.md, "Mask tensors", "Block-sparse masks"); dense problems only.
  MaskKind mask_kind = MaskKind::None;  // Inputs::mask: BOOL, or mask_dtype (additive)
  DType mask_dtype = DType::F32;        // additive: F32, F16 or BF16 (boolean: BOOL; none: unused)
  int32_t block_q = 0, block_k = 0;     // block-sparse mask (Inputs::block_mask): both > 0; 0: none
  int32_t mask_b = 1, mask_h = 1;       // the mask tensor's B_m (1 or batch) and H_m (1 or heads_q)
  int32_t block_b = 1, block_h = 1;     // the block mask's
};

FC_HD inline bool has_mask_tensor(const Problem& p) { return p.mask_kind != MaskKind::None; }
FC_HD inline bool has_block_mask(const Problem& p) { return p.block_q > 0; }
// Visibility is not one key range per row: a mask tensor or a block mask tests each key of the range.
FC_HD inline bool per_key_mask(const Problem& p) { return has_mask_tensor(p) || has_block_mask(p); }

// The dtypes of a problem's tensors; mixed_dtypes: they are not all one.
FC_HD inline DType dtype_q(const Problem& p) { return p.dtype; }
FC_HD inline DType dtype_kv(const Problem& p) { return int32_t(p.dtype_kv) < 0 ? p.dtype : p.dtype_kv; }
FC_HD inline DType dtype_o(const Problem& p) { return int32_t(p.dtype_o) < 0 ? p.dtype : p.dtype_o; }
FC_HD inline DtypeSet dtypes_of(const Problem& p) { return {dtype_q(p), dtype_kv(p), dtype_o(p)}; }
FC_HD inline bool mixed_dtypes(const Problem& p) { return !dtypes_of(p).uniform(); }
// Sets p's dtypes; a uniform set is stored as today's single dtype (dtype_kv, dtype_o kDtypeAsQ), so a
// problem has one representation whichever way its dtypes were given.
FC_HD inline void set_dtypes(Problem& p, DtypeSet t) {
  p.dtype = t.q;
  p.dtype_kv = t.kv == t.q ? kDtypeAsQ : t.kv;
  p.dtype_o = t.o == t.q ? kDtypeAsQ : t.o;
}

// Query head h reads kv head h / (heads_q / heads_kv).
FC_HD inline int32_t kv_head(const Problem& p, int32_t h) { return h / (p.heads_q / p.heads_kv); }

// Head dim of v, o, d_o and d_v.
FC_HD inline int32_t head_dim_v(const Problem& p) { return p.d_v > 0 ? p.d_v : p.d; }
FC_HD inline bool has_window(const Problem& p) { return p.window_left >= 0 || p.window_right >= 0; }
FC_HD inline bool is_paged(const Problem& p) { return p.page_size > 0; }

// Is key j visible to query i?  The one definition of the three masks (dense, no window).
FC_HD inline bool visible(Mask mask, int64_t i, int64_t j, int64_t n_q, int64_t n_k) {
  switch (mask) {
    case Mask::None: return true;
    case Mask::CausalTopLeft: return j <= i;
    case Mask::CausalBottomRight: return j <= i + n_k - n_q;
  }
  return false;
}

// Number of keys visible to query i under a mask alone: they form the prefix [0, n_visible).
FC_HD inline int64_t n_visible(Mask mask, int64_t i, int64_t n_q, int64_t n_k) {
  int64_t last = n_k - 1;  // last visible key index
  if (mask == Mask::CausalTopLeft) last = i;
  if (mask == Mask::CausalBottomRight) last = i + n_k - n_q;
  if (last >= n_k) last = n_k - 1;
  return last < 0 ? 0 : last + 1;
}

// The row i' that aligns query i with the keys (FlashAttention's convention): i under
// causal_top_left, i + n_k - n_q under causal_bottom_right and under no mask. The window and ALiBi
// are measured from it; n_q, n_k are the sequence's own.
FC_HD inline int64_t aligned_row(Mask mask, int64_t i, int64_t n_q, int64_t n_k) {
  return mask == Mask::CausalTopLeft ? i : i + n_k - n_q;
}

// The keys visible to query i: the causal mask (j <= i') intersected with the window
// (i' - left <= j <= i' + right) and [0, n_k). Always one range [begin, end), possibly empty. With a
// mask tensor or a block mask (per_key_mask) it is the range of the built-in mask and window, a
// superset of the visible keys: each key of it is then tested (Inputs::key_bias, contract/tensor.hpp).
struct KeyRange {
  int64_t begin = 0, end = 0;
};
FC_HD inline KeyRange visible_keys(const Problem& p, int64_t i, int64_t n_q, int64_t n_k) {
  const int64_t a = aligned_row(p.mask, i, n_q, n_k);
  int64_t begin = 0, end = n_k;
  if (p.mask != Mask::None && a + 1 < end) end = a + 1;
  if (p.window_right >= 0 && a + p.window_right + 1 < end) end = a + p.window_right + 1;
  if (p.window_left >= 0 && a - p.window_left > begin) begin = a - p.window_left;
  if (end < begin) end = begin;
  return {begin, end};
}
FC_HD inline bool visible(const Problem& p, int64_t i, int64_t j, int64_t n_q, int64_t n_k) {
  const KeyRange r = visible_keys(p, i, n_q, n_k);
  return r.begin <= j && j < r.end;
}

// Softcap of a scaled score: c tanh(s / c) (c > 0). Tanh is the tanh of the caller's arithmetic.
template <class T, class Tanh>
FC_HD inline T softcapped(T s, T c, Tanh tanh_fn) {
  return c * tanh_fn(s / c);
}

// ALiBi's distance |i' - j|: the bias of key j in row i is -slope_h times it.
FC_HD inline int64_t alibi_distance(Mask mask, int64_t i, int64_t j, int64_t n_q, int64_t n_k) {
  const int64_t x = aligned_row(mask, i, n_q, n_k) - j;
  return x < 0 ? -x : x;
}

// The per-sequence structure of a problem: null pointers for dense attention. Varlen:
// cu_q, cu_k are the cumulative offsets (batch + 1 entries, cu[0] = 0); paged: page_table is
// (batch, pages_per_seq), row b mapping sequence b's logical pages to physical ones.
struct Seqs {
  const int32_t* cu_q = nullptr;
  const int32_t* cu_k = nullptr;
  const int32_t* page_table = nullptr;
  const int32_t* pad_q = nullptr;  // padded varlen: cu_seqlens_q_padded (batch + 1), the sequences' first tokens
  const int32_t* pad_k = nullptr;  // padded varlen: cu_seqlens_k_padded (batch + 1)
};

// Sequence b's query and key counts.
FC_HD inline int64_t seq_n_q(const Problem& p, const Seqs& s, int64_t b) {
  return p.varlen ? int64_t(s.cu_q[b + 1]) - s.cu_q[b] : p.n_q;
}
FC_HD inline int64_t seq_n_k(const Problem& p, const Seqs& s, int64_t b) {
  return p.varlen ? int64_t(s.cu_k[b + 1]) - s.cu_k[b] : p.n_k;
}

// Sequence b's first token on the packed query and key axes (varlen): cu_seqlens, or with padded
// offsets cu_seqlens_*_padded.
FC_HD inline int64_t seq_start_q(const Problem& p, const Seqs& s, int64_t b) {
  return p.padded ? s.pad_q[b] : s.cu_q[b];
}
FC_HD inline int64_t seq_start_k(const Problem& p, const Seqs& s, int64_t b) {
  return p.padded ? s.pad_k[b] : s.cu_k[b];
}

// Rows of the contract's tensors: the element (b, h, i, c) of a query-side tensor (q, o, d_o, d_q)
// is at q_row(...) * width + c, width d or d_v; likewise kv_row for k, v, d_k, d_v.
//   dense  (batch, heads, n, width):            row (b heads + h) n + i
//   varlen (total, heads, width):               row (cu[b] + i) heads + h (padded: padded[b] + i)
//   paged  (num_pages, page_size, heads, width): row (page_table[b][j / page_size] page_size +
//                                                    j % page_size) heads + h
FC_HD inline int64_t q_row(const Problem& p, const Seqs& s, int64_t b, int64_t h, int64_t i) {
  return p.varlen ? (seq_start_q(p, s, b) + i) * p.heads_q + h : (b * p.heads_q + h) * p.n_q + i;
}
FC_HD inline int64_t kv_row(const Problem& p, const Seqs& s, int64_t b, int64_t h_kv, int64_t j) {
  if (p.page_size > 0) {
    const int64_t page = s.page_table[b * p.pages_per_seq + j / p.page_size];
    return (page * p.page_size + j % p.page_size) * p.heads_kv + h_kv;
  }
  return p.varlen ? (seq_start_k(p, s, b) + j) * p.heads_kv + h_kv : (b * p.heads_kv + h_kv) * p.n_k + j;
}
// lse: dense (batch, heads_q, n_q); varlen (heads_q, total_q), token seq_start_q(b) + i.
FC_HD inline int64_t lse_index(const Problem& p, const Seqs& s, int64_t b, int64_t h, int64_t i) {
  return p.varlen ? h * p.total_q + seq_start_q(p, s, b) + i : (b * p.heads_q + h) * p.n_q + i;
}

// Row counts of the query-side and key-side tensors, and element counts of the contract's tensors.
FC_HD inline int64_t rows_q(const Problem& p) {
  return p.varlen ? p.total_q * p.heads_q : int64_t(p.batch) * p.heads_q * p.n_q;
}
FC_HD inline int64_t rows_kv(const Problem& p) {
  if (p.page_size > 0) return int64_t(p.num_pages) * p.page_size * p.heads_kv;
  return p.varlen ? p.total_k * p.heads_kv : int64_t(p.batch) * p.heads_kv * p.n_k;
}
inline int64_t numel_q(const Problem& p) { return rows_q(p) * p.d; }             // q, d_q
inline int64_t numel_o(const Problem& p) { return rows_q(p) * head_dim_v(p); }   // o, d_o
inline int64_t numel_kv(const Problem& p) { return rows_kv(p) * p.d; }           // k, d_k
inline int64_t numel_v(const Problem& p) { return rows_kv(p) * head_dim_v(p); }  // v, d_v
inline int64_t numel_lse(const Problem& p) { return rows_q(p); }

// Dense flat offsets (no varlen, no paging), kept for the dense kernels.
FC_HD inline int64_t offset_q(const Problem& p, int64_t b, int64_t h, int64_t i) {
  return ((b * p.heads_q + h) * p.n_q + i) * p.d;  // row i of q/d_q
}
FC_HD inline int64_t offset_kv(const Problem& p, int64_t b, int64_t h_kv, int64_t j) {
  return ((b * p.heads_kv + h_kv) * p.n_k + j) * p.d;  // row j of k/d_k
}
FC_HD inline int64_t offset_lse(const Problem& p, int64_t b, int64_t h, int64_t i) {
  return (b * p.heads_q + h) * p.n_q + i;
}

// One of the floating dtypes F32, F16, BF16, F64.
FC_HD inline bool known_float(DType t) { return int32_t(t) >= 0 && int32_t(t) <= 3; }

// Mask tensors and block masks: a known kind, an additive dtype of F32, F16 or BF16, block sizes
// both positive or both 0, and dense problems only (no varlen, no paging).
inline bool masks_well_formed(const Problem& p) {
  const int32_t kind = int32_t(p.mask_kind);
  if (kind < 0 || kind > 2) return false;
  if (p.mask_kind == MaskKind::Additive &&
      !(p.mask_dtype == DType::F32 || p.mask_dtype == DType::F16 || p.mask_dtype == DType::BF16))
    return false;
  if ((p.block_q > 0) != (p.block_k > 0) || p.block_q < 0 || p.block_k < 0) return false;
  auto bcast = [](int32_t x, int32_t full) { return x == 1 || x == full; };
  if (!bcast(p.mask_b, p.batch) || !bcast(p.mask_h, p.heads_q) || !bcast(p.block_b, p.batch) ||
      !bcast(p.block_h, p.heads_q))
    return false;
  return !per_key_mask(p) || (!p.varlen && p.page_size == 0);
}

// Is the problem well-formed? Positive sizes (varlen: lengths may be 0), GQA divisibility, a finite
// scale (any sign), windows >= -1, a softcap of 0 or within fp32's normal range (kernels keep c in
// fp32), floating dtypes (dtype_kv, dtype_o also kDtypeAsQ), paging only with varlen and a page table
// wide enough for the longest sequence, padded offsets only with varlen and unpaged K/V. The per-sequence data are checked by validate (tensor.hpp).
inline bool well_formed(const Problem& p) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  const bool sizes = p.batch > 0 && p.heads_q > 0 && p.heads_kv > 0 && p.d > 0 && p.d_v >= 0 &&
                     (p.varlen ? p.n_q >= 0 && p.n_k >= 0 && p.total_q >= 0 && p.total_k >= 0
                               : p.n_q > 0 && p.n_k > 0 && p.total_q == 0 && p.total_k == 0);
  const bool paging = p.page_size == 0 ? p.num_pages == 0 && p.pages_per_seq == 0
                                       : p.varlen && p.page_size > 0 && p.num_pages > 0 && p.pages_per_seq >= 0 &&
                                             int64_t(p.pages_per_seq) * p.page_size >= p.n_k;
  const bool padding = !p.padded || (p.varlen && p.page_size == 0);
  return sizes && paging && padding && p.heads_q % p.heads_kv == 0 && p.scale == p.scale && p.scale != inf &&
         p.scale != -inf && p.window_left >= -1 && p.window_right >= -1 &&
         (p.softcap == 0 || (p.softcap >= 0x1p-126 && p.softcap <= 0x1.fffffep127)) && known_float(p.dtype) &&
         (p.dtype_kv == kDtypeAsQ || known_float(p.dtype_kv)) && (p.dtype_o == kDtypeAsQ || known_float(p.dtype_o)) &&
         masks_well_formed(p);
}

// Default scale 1/sqrt(d).
double default_scale(int32_t d);

const char* dtype_name(DType t);              // "F16" "BF16" "F32" "F64" "I32" "BOOL" (safetensors spelling)
const char* mask_kind_name(MaskKind k);       // "none" "bool" "additive"
bool parse_mask_kind(const char* s, MaskKind* out);
const char* mask_name(Mask m);                // "none" "causal_top_left" "causal_bottom_right"
bool parse_dtype(const char* s, DType* out);  // the floating dtypes only
bool parse_mask(const char* s, Mask* out);
int dtype_size(DType t);     // bytes per element
double max_finite(DType t);  // largest finite value of the dtype
// The dtypes that keep selects, in reading order: the audit sweep's (F16, BF16, F32), then the rest
// in the table's order. dtype_names joins their names for a message: "F16, BF16, F32 or F64".
std::vector<DType> dtypes_in_order(bool (*keep)(DType));
std::string dtype_names(bool (*keep)(DType));
// kernel_float's dtypes in the table's order (F32, F16, BF16: the order generators draw mask dtypes in),
// and in the sweep's (F16, BF16, F32: the audit's cases, the probes' order).
std::vector<DType> kernel_floats();
std::vector<DType> sweep_dtypes();

}  // namespace fc
