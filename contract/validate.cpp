// validate (tensor.hpp): whether an Inputs is a consistent problem, with one line saying why not.
// The io reader, the CPU kernels and the references all rely on it before indexing through the
// per-sequence data.
#include <cmath>
#include <fmt/format.h>

#include "tensor.hpp"

namespace fc {

namespace {

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string check_tensor(const char* name, const HostTensor& t, DType dtype, const std::vector<int64_t>& shape) {
  if (t.dtype != dtype) return fmt::format("{} is {}, expected {}", name, dtype_name(t.dtype), dtype_name(dtype));
  if (t.shape != shape) return fmt::format("{} has shape {}, expected {}", name, shape_str(t.shape), shape_str(shape));
  if (!t.strides_in_bounds())
    return t.is_compact() ? fmt::format("{} holds {} bytes, not {} elements", name, t.bytes.size(), t.numel())
                          : fmt::format("{} has strides that address elements outside its storage", name);
  return "";
}

// Cumulative offsets: I32 (batch + 1), from 0, non-decreasing, ending at `total`; *longest gets the
// longest sequence.
// With padded offsets the packed tensors also hold padding: cu ends at the tokens in use (< 0: not checked).
std::string check_cu(const char* name, const HostTensor& cu, int32_t batch, int64_t total, int64_t* longest) {
  if (std::string e = check_tensor(name, cu, DType::I32, {int64_t(batch) + 1}); !e.empty()) return e;
  if (!cu.is_compact()) return fmt::format("{} must be compact", name);
  const int32_t* c = cu.data<int32_t>();
  if (c[0] != 0) return fmt::format("{}[0] = {}, expected 0", name, c[0]);
  *longest = 0;
  for (int32_t b = 0; b < batch; ++b) {
    if (c[b + 1] < c[b]) return fmt::format("{} decreases at {}: {} then {}", name, b + 1, c[b], c[b + 1]);
    *longest = std::max<int64_t>(*longest, int64_t(c[b + 1]) - c[b]);
  }
  if (total >= 0 && c[batch] != total)
    return fmt::format("{}[{}] = {}, but the packed tensors hold {} tokens", name, batch, c[batch], total);
  return "";
}

// Padded offsets of one axis: I32 (batch + 1), compact, from >= 0, each sequence's slots
// (pad[b + 1] - pad[b]) at least its length (cu[b + 1] - cu[b]), ending at the packed tensors' `total`.
std::string check_padded(const char* name, const HostTensor& pad, const HostTensor& cu, int32_t batch, int64_t total) {
  if (std::string e = check_tensor(name, pad, DType::I32, {int64_t(batch) + 1}); !e.empty()) return e;
  if (!pad.is_compact()) return fmt::format("{} must be compact", name);
  const int32_t *x = pad.data<int32_t>(), *c = cu.data<int32_t>();
  if (x[0] < 0) return fmt::format("{}[0] = {} is negative", name, x[0]);
  for (int32_t b = 0; b < batch; ++b) {
    const int64_t slots = int64_t(x[b + 1]) - x[b], len = int64_t(c[b + 1]) - c[b];
    if (slots < len)
      return fmt::format("{} gives sequence {} {} token slots ({}[{}] = {}, [{}] = {}) for its {} tokens", name, b,
                         slots, name, b, x[b], b + 1, x[b + 1], len);
  }
  if (x[batch] != total)
    return fmt::format("{}[{}] = {}, but the packed tensors hold {} tokens", name, batch, x[batch], total);
  return "";
}

// A (B_m, H_m, rows, cols) mask: B_m in {1, batch}, H_m in {1, heads_q} (the problem's bm, hm), compact.
std::string check_mask_shape(const char* name, const HostTensor& t, const Problem& p, int64_t bm, int64_t hm,
                             int64_t rows, int64_t cols) {
  const std::vector<int64_t>& s = t.shape;
  if (!(bm == 1 || bm == p.batch) || !(hm == 1 || hm == p.heads_q))
    return fmt::format("{}'s broadcast ({}, {}): B_m is 1 or {}, H_m 1 or {}", name, bm, hm, p.batch, p.heads_q);
  if (s != std::vector<int64_t>{bm, hm, rows, cols})
    return fmt::format("{} has shape {}, expected [{}, {}, {}, {}] (B_m 1 or {}, H_m 1 or {})", name, shape_str(s), bm,
                       hm, rows, cols, p.batch, p.heads_q);
  if (!t.is_compact()) return fmt::format("{} must be compact", name);
  if (int64_t(t.bytes.size()) != t.numel() * dtype_size(t.dtype))
    return fmt::format("{} holds {} bytes, not {} elements", name, t.bytes.size(), t.numel());
  return "";
}

std::string check_masks(const Inputs& in) {
  const Problem& p = in.p;
  if (per_key_mask(p) && (p.varlen || p.page_size > 0))
    return "mask tensors and block masks are for dense problems (no varlen, no paged K/V)";
  if (has_mask_tensor(p)) {
    if (p.mask_kind != MaskKind::Bool && p.mask_kind != MaskKind::Additive) return "unknown mask kind";
    const DType want = p.mask_kind == MaskKind::Bool ? DType::BOOL : p.mask_dtype;
    if (p.mask_kind == MaskKind::Additive && !kernel_float(want))
      return fmt::format("an additive mask is {}, not {}", dtype_names(kernel_float), dtype_name(want));
    if (in.mask.dtype != want)
      return fmt::format("mask is {}, expected {}", dtype_name(in.mask.dtype), dtype_name(want));
    if (std::string e = check_mask_shape("mask", in.mask, p, p.mask_b, p.mask_h, p.n_q, p.n_k); !e.empty()) return e;
    for (int64_t x = 0; x < in.mask.numel(); ++x) {
      if (p.mask_kind == MaskKind::Bool) {
        if (in.mask.bytes[size_t(x)] > 1)
          return fmt::format("mask[{}] holds byte {}: a BOOL element is 0 or 1", x, in.mask.bytes[size_t(x)]);
        continue;
      }
      const double v = in.mask.get(x);
      if (!(std::isfinite(v) || v == -std::numeric_limits<double>::infinity()))
        return fmt::format("mask[{}] = {} is neither finite nor -inf", x, v);
    }
  } else if (!in.mask.shape.empty()) {
    return "mask given for a problem without a mask tensor";
  }
  if (has_block_mask(p)) {
    if (p.block_q <= 0 || p.block_k <= 0)
      return fmt::format("block sizes ({}, {}) must both be positive", p.block_q, p.block_k);
    if (in.block_mask.dtype != DType::BOOL)
      return fmt::format("block_mask is {}, expected BOOL", dtype_name(in.block_mask.dtype));
    const int64_t rows = (int64_t(p.n_q) + p.block_q - 1) / p.block_q, cols = (int64_t(p.n_k) + p.block_k - 1) / p.block_k;
    if (std::string e = check_mask_shape("block_mask", in.block_mask, p, p.block_b, p.block_h, rows, cols); !e.empty())
      return e;
    for (int64_t x = 0; x < in.block_mask.numel(); ++x)
      if (in.block_mask.bytes[size_t(x)] > 1)
        return fmt::format("block_mask[{}] holds byte {}: a BOOL element is 0 or 1", x, in.block_mask.bytes[size_t(x)]);
  } else if (!in.block_mask.shape.empty()) {
    return "block_mask given for a problem without a block mask";
  } else if (p.block_k != 0) {
    return fmt::format("block sizes ({}, {}) must both be positive", p.block_q, p.block_k);
  }
  return "";
}

std::string check_variants(const Inputs& in) {
  const Problem& p = in.p;
  if (p.varlen) {
    if (p.total_q < 0 || p.total_k < 0) return "negative token totals";
    int64_t longest_q = 0, longest_k = 0;
    const int64_t total_q = p.padded ? -1 : p.total_q, total_k = p.padded ? -1 : p.total_k;
    if (std::string e = check_cu("cu_seqlens_q", in.cu_seqlens_q, p.batch, total_q, &longest_q); !e.empty()) return e;
    if (std::string e = check_cu("cu_seqlens_k", in.cu_seqlens_k, p.batch, total_k, &longest_k); !e.empty()) return e;
    if (longest_q != p.n_q || longest_k != p.n_k)
      return fmt::format("n_q = {}, n_k = {}, but the longest sequences have {} queries and {} keys", p.n_q, p.n_k,
                         longest_q, longest_k);
  } else if (!in.cu_seqlens_q.shape.empty() || !in.cu_seqlens_k.shape.empty()) {
    return "cu_seqlens given for a dense problem";
  }
  if (p.padded) {
    if (!p.varlen)
      return "padded offsets (cu_seqlens_q_padded, cu_seqlens_k_padded) need varlen (cu_seqlens_q, cu_seqlens_k)";
    if (p.page_size > 0)
      return "padded offsets with paged K/V: the page table places the keys (give no cu_seqlens_k_padded)";
    if (std::string e =
            check_padded("cu_seqlens_q_padded", in.cu_seqlens_q_padded, in.cu_seqlens_q, p.batch, p.total_q);
        !e.empty())
      return e;
    if (std::string e =
            check_padded("cu_seqlens_k_padded", in.cu_seqlens_k_padded, in.cu_seqlens_k, p.batch, p.total_k);
        !e.empty())
      return e;
  } else if (!in.cu_seqlens_q_padded.shape.empty() || !in.cu_seqlens_k_padded.shape.empty()) {
    return "padded offsets given for a problem without padding";
  }
  if (p.page_size > 0) {
    if (!p.varlen) return "paged K/V needs varlen (cu_seqlens_q, cu_seqlens_k)";
    const std::vector<int64_t> shape = {p.batch, p.pages_per_seq};
    if (std::string e = check_tensor("page_table", in.page_table, DType::I32, shape); !e.empty()) return e;
    if (!in.page_table.is_compact()) return "page_table must be compact";
    const int32_t* t = in.page_table.data<int32_t>();
    for (int64_t x = 0; x < in.page_table.numel(); ++x)
      if (t[x] < 0 || t[x] >= p.num_pages)
        return fmt::format("page_table[{}][{}] = {} is not a page in [0, {})", x / p.pages_per_seq, x % p.pages_per_seq,
                           t[x], p.num_pages);
  } else if (!in.page_table.shape.empty()) {
    return "page_table given for a problem whose k, v are not paged";
  }
  if (p.alibi) {
    if (std::string e = check_tensor("alibi_slopes", in.alibi_slopes, DType::F32, {p.heads_q}); !e.empty()) return e;
    for (int64_t h = 0; h < p.heads_q; ++h)
      if (!std::isfinite(in.alibi_slopes.get(h)))
        return fmt::format("alibi_slopes[{}] = {} is not finite", h, in.alibi_slopes.get(h));
  } else if (!in.alibi_slopes.shape.empty()) {
    return "alibi_slopes given for a problem without ALiBi";
  }
  if (p.sinks) {
    if (std::string e = check_tensor("sinks", in.sinks, DType::F32, {p.heads_q}); !e.empty()) return e;
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const double s = in.sinks.get(h);
      if (!(std::isfinite(s) || s == -std::numeric_limits<double>::infinity()))
        return fmt::format("sinks[{}] = {} is neither finite nor -inf", h, s);
    }
  } else if (!in.sinks.shape.empty()) {
    return "sinks given for a problem without sinks";
  }
  return check_masks(in);
}

}  // namespace

std::string validate(const Inputs& in) {
  const Problem& p = in.p;
  if (!(p.batch > 0 && p.heads_q > 0 && p.heads_kv > 0 && p.d > 0 && p.d_v >= 0 && p.heads_q % p.heads_kv == 0))
    return "not a well-formed attention problem";
  if (std::string e = check_variants(in); !e.empty()) return e;
  if (p.window_left < -1 || p.window_right < -1)
    return fmt::format("window ({}, {}): each side is >= 0, or -1 for unbounded", p.window_left, p.window_right);
  if (!(p.softcap >= 0 && std::isfinite(p.softcap))) return fmt::format("softcap {} is not finite and >= 0", p.softcap);
  // Kernels hold c as an fp32 value: below fp32's normal range it is 0 or subnormal there (s / c turns
  // 0 / 0), above it c is inf (inf * tanh(0) = NaN).
  if (p.softcap > 0 && !(p.softcap >= 0x1p-126 && p.softcap <= 0x1.fffffep127))
    return fmt::format("softcap {} is outside fp32's normal range [2^-126, 3.4e38], where kernels keep c", p.softcap);
  if (p.page_size > 0 && int64_t(p.pages_per_seq) * p.page_size < p.n_k)
    return fmt::format("the longest sequence has {} keys but the page table holds {} pages of {}", p.n_k,
                       p.pages_per_seq, p.page_size);
  if (!well_formed(p)) return "not a well-formed attention problem";
  if (std::string e = check_tensor("q", in.q, p.dtype, shape_q(p)); !e.empty()) return e;
  if (std::string e = check_tensor("k", in.k, dtype_kv(p), shape_kv(p)); !e.empty()) return e;
  if (std::string e = check_tensor("v", in.v, dtype_kv(p), shape_v(p)); !e.empty()) return e;
  if (in.has_d_o())
    if (std::string e = check_tensor("d_o", in.d_o, dtype_o(p), shape_o(p)); !e.empty()) return e;
  return "";
}

}  // namespace fc
