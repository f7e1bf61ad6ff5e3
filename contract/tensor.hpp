// Host tensors: raw little-endian bytes in one of the contract's dtypes, plus a shape and, for a
// strided view, strides. The common currency between tensor files, kernels, references and reports.
// Host only.
#pragma once

#include <bit>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention.h"

namespace fc {

// A tensor of `shape` whose element (x_0, ..., x_{r-1}) lives at storage element
// offset + sum_a x_a strides[a] of `bytes`. Compact tensors (the default, and every tensor a file
// holds) have no strides: row-major, offset 0, bytes = numel() elements. Strided tensors (the "any
// strides" variant: BSHD views of BHSD data, padding between rows, reversed axes) keep their
// storage as it is; numel, get, set and to_f64 always speak of the logical row-major order.
struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // the storage
  std::vector<int64_t> strides;      // elements per step of each dimension; empty: compact
  int64_t offset = 0;                // storage element of element (0, ..., 0) (strided only)

  HostTensor() = default;
  HostTensor(DType t, std::vector<int64_t> s);  // compact, zero-filled

  int64_t numel() const;
  bool is_compact() const { return strides.empty(); }
  // Storage element of the element at logical row-major index i.
  int64_t storage_index(int64_t i) const;
  double get(int64_t i) const;    // exact widening to double (logical index; inline below)
  void set(int64_t i, double x);  // round-to-nearest-even into dtype (I32: x must be an integer)
  std::vector<double> to_f64() const;
  static HostTensor from_f64(DType t, std::vector<int64_t> s, const std::vector<double>& x);
  // The same values, compact (a copy).
  HostTensor contiguous() const;
  // The same values laid out with `strides` and `offset` in a storage of `storage_elems` elements
  // (zero elsewhere). Throws std::invalid_argument when an element would fall outside the storage.
  HostTensor restrided(std::vector<int64_t> strides, int64_t offset, int64_t storage_elems) const;
  // The same values with the axes stored in `order` (outermost first), `step` elements between
  // neighbours of the innermost axis, pad[a] unused elements after each run of axis a, `front` unused
  // elements before the first, and the axes in `reversed` walked backwards (negative strides).
  HostTensor laid_out(const std::vector<size_t>& order, int64_t step, const std::vector<int64_t>& pad,
                      const std::vector<size_t>& reversed, int64_t front = 0) const;
  // Whether every element the strides address lies inside the storage.
  bool strides_in_bounds() const;

  // Element pointer of a compact tensor; a strided one throws (read it through storage() and
  // storage_index(), or contiguous()), so code written for compact data cannot misread a view.
  template <class T>
  T* data() {
    if (!strides.empty()) throw std::logic_error("HostTensor::data() on a strided tensor");
    return reinterpret_cast<T*>(bytes.data());
  }
  template <class T>
  const T* data() const {
    if (!strides.empty()) throw std::logic_error("HostTensor::data() on a strided tensor");
    return reinterpret_cast<const T*>(bytes.data());
  }
  template <class T>
  const T* storage() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
  template <class T>
  T* storage() {
    return reinterpret_cast<T*>(bytes.data());
  }
};

namespace detail {
// The value of 16-bit float bits as a double, exactly; a NaN keeps its sign and payload and is quiet
// (what widening through float does).
inline double f16_value(uint16_t h) {
  const uint64_t sign = uint64_t(h >> 15) << 63, m = h & 0x3ffu;
  const unsigned e = (h >> 10) & 0x1fu;
  if (e == 0) return std::bit_cast<double>(sign | std::bit_cast<uint64_t>(double(m) * 0x1p-24));  // 0, subnormal
  if (e == 0x1f) return std::bit_cast<double>(sign | 0x7ff0000000000000ull | (m << 42) | (m ? 1ull << 51 : 0));
  return std::bit_cast<double>(sign | (uint64_t(e + 1023 - 15) << 52) | (m << 42));
}
inline double bf16_value(uint16_t h) { return double(std::bit_cast<float>(uint32_t(h) << 16)); }
[[noreturn]] void bad_dtype();
}  // namespace detail

// Element access sits on every per-element loop of the harness (decoding, cleaning, judging): the
// compact case and the dtype switch inline.
inline double HostTensor::get(int64_t i) const {
  const int64_t at = strides.empty() ? i : storage_index(i);
  switch (dtype) {
    case DType::F16: return detail::f16_value(storage<uint16_t>()[at]);
    case DType::BF16: return detail::bf16_value(storage<uint16_t>()[at]);
    case DType::F32: return double(storage<float>()[at]);
    case DType::F64: return storage<double>()[at];
    case DType::I32: return double(storage<int32_t>()[at]);
    case DType::BOOL: return double(storage<unsigned char>()[at] != 0);
  }
  detail::bad_dtype();
}

// A problem's dtypes as messages name them: "F16" when one for every tensor, else "q=F32 kv=F16 o=F32".
std::string dtypes_str(const Problem& p);

// Round x to the nearest value of dtype t (ties to even), returned as double.
double round_to(DType t, double x);

// Canonical shapes of the contract's tensors for a problem (docs/SEMANTICS.md):
std::vector<int64_t> shape_q(const Problem& p);    // q, d_q: (batch, heads_q, n_q, d); varlen (total_q, heads_q, d)
std::vector<int64_t> shape_o(const Problem& p);    // o, d_o: the same with d_v
std::vector<int64_t> shape_kv(const Problem& p);   // k, d_k: (batch, heads_kv, n_k, d); varlen (total_k, heads_kv, d);
                                                   // paged (num_pages, page_size, heads_kv, d)
std::vector<int64_t> shape_v(const Problem& p);    // v, d_v: the same with d_v
std::vector<int64_t> shape_lse(const Problem& p);  // (batch, heads_q, n_q); varlen (heads_q, total_q)

// lse is F32 by the contract; F64-storage runs (a CPU-only oracle-grade mode) keep it in F64 so that
// a backward recomputing P from lse stays at fp64 accuracy.
inline DType lse_dtype(DType storage) { return storage == DType::F64 ? DType::F64 : DType::F32; }
// A problem's lse dtype: by q's dtype (F64 only for F64 queries), whatever k, v and o are.
inline DType lse_dtype(const Problem& p) { return lse_dtype(dtype_q(p)); }

// A problem's inputs: q in dtype_q(p), k and v in dtype_kv(p), d_o in dtype_o(p); d_o optional (empty shape = absent); the variants'
// per-sequence data, present exactly when the problem uses them.
struct Inputs {
  Problem p;
  HostTensor q, k, v, d_o;
  HostTensor cu_seqlens_q = {}, cu_seqlens_k = {};  // I32 (batch + 1): varlen
  HostTensor page_table = {};                       // I32 (batch, pages_per_seq): paged
  HostTensor alibi_slopes = {};                     // F32 (heads_q): ALiBi
  HostTensor sinks = {};                            // F32 (heads_q): attention sinks (finite or -inf)
  HostTensor cu_seqlens_q_padded = {}, cu_seqlens_k_padded = {};  // I32 (batch + 1): padded varlen
  // Contract v3, dense problems only: (B_m, H_m, n_q, n_k), B_m in {1, batch}, H_m in {1, heads_q}.
  HostTensor mask = {};        // BOOL (boolean) or p.mask_dtype (additive: finite or -inf)
  HostTensor block_mask = {};  // BOOL (B_m, H_m, ceil(n_q / block_q), ceil(n_k / block_k))
  bool has_d_o() const { return !d_o.shape.empty(); }
  // Pointers into cu_seqlens_q/k, page_table and the padded offsets (null where the problem does not
  // use them).
  Seqs seqs() const;
  // Whether q, k, v or d_o is a strided view.
  bool strided() const { return !q.is_compact() || !k.is_compact() || !v.is_compact() || !d_o.is_compact(); }
  // The slope of query head h (0 without ALiBi).
  double slope(int64_t h) const { return p.alibi ? alibi_slopes.get(h) : 0.0; }
  // The sink logit of query head h (-inf without sinks: no sink).
  double sink(int64_t h) const { return p.sinks ? sinks.get(h) : -std::numeric_limits<double>::infinity(); }
  // What the mask tensor and the block mask do to key j of query i in (b, h): 0 (no effect), -inf
  // (hidden: a false bit, an additive -inf) or the additive mask's value, added to the score after
  // softcap and ALiBi. The built-in mask and window are not in it (visible_keys).
  double key_bias(int64_t b, int64_t h, int64_t i, int64_t j) const;
};

// Element (b, h, r, c) of a broadcast (B_m, H_m, R, C) mask tensor: its flat index.
inline int64_t broadcast_index(const HostTensor& t, int64_t b, int64_t h, int64_t r, int64_t c) {
  const int64_t bb = t.shape[0] == 1 ? 0 : b, hh = t.shape[1] == 1 ? 0 : h;
  return ((bb * t.shape[1] + hh) * t.shape[2] + r) * t.shape[3] + c;
}

// "" when in is a consistent problem (well-formed, every tensor of the right dtype and shape, strides
// inside their storage, cu_seqlens from 0 non-decreasing to total with n_q / n_k the longest (padded:
// cu_seqlens_*_padded non-decreasing from >= 0 to total, each sequence's slots holding its tokens), page
// table entries in [0, num_pages), finite slopes), else one line saying what is wrong.
std::string validate(const Inputs& in);

// in with compact q, k, v, d_o (the same values).
Inputs contiguous(const Inputs& in);

// What a kernel returns: o in dtype_o(p), d_q in dtype_q(p), d_k and d_v in dtype_kv(p), lse in lse_dtype(p).
struct Outputs {
  HostTensor o, lse, d_q, d_k, d_v;
  bool has_grads() const { return !d_q.shape.empty(); }
};

}  // namespace fc
