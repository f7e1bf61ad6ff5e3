#include "tensor.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <stdexcept>

#include "contract/rounding.h"

namespace fc {

HostTensor::HostTensor(DType t, std::vector<int64_t> s) : dtype(t), shape(std::move(s)) {
  bytes.assign(size_t(numel()) * size_t(dtype_size(t)), 0);
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t HostTensor::storage_index(int64_t i) const {
  if (strides.empty()) return i;
  int64_t at = offset;
  for (size_t a = shape.size(); a-- > 0;) {
    at += (i % shape[a]) * strides[a];
    i /= shape[a];
  }
  return at;
}

namespace detail {
void bad_dtype() { throw std::logic_error("bad dtype"); }
}  // namespace detail

namespace {
// The bits of a 16-bit float value v (v exactly representable there, or ±inf, or NaN: the canonical
// quiet NaN with v's sign, as Eigen's conversions give).
uint16_t f16_bits(double v) {
  const uint64_t b = std::bit_cast<uint64_t>(v);
  const uint16_t sign = uint16_t((b >> 63) << 15);
  const int biased = int((b >> 52) & 0x7ff);
  if (biased == 0x7ff) return uint16_t(sign | ((b << 12) != 0 ? 0x7e00 : 0x7c00));
  if (std::fabs(v) < 0x1p-14) return uint16_t(sign | uint16_t(std::fabs(v) * 0x1p24));  // 0, subnormal: exact
  return uint16_t(sign | ((biased - 1023 + 15) << 10) | ((b >> 42) & 0x3ff));
}
uint16_t bf16_bits(double v) {
  if (std::isnan(v)) return std::signbit(v) ? 0xffc0 : 0x7fc0;
  return uint16_t(std::bit_cast<uint32_t>(float(v)) >> 16);  // float(v) exact: its low half is zero
}
}  // namespace

void HostTensor::set(int64_t i, double x) {
  const int64_t at = strides.empty() ? i : storage_index(i);
  switch (dtype) {
    // Round once, from double: going through float first would double-round.
    case DType::F16: storage<uint16_t>()[at] = f16_bits(round_to(DType::F16, x)); return;
    case DType::BF16: storage<uint16_t>()[at] = bf16_bits(round_to(DType::BF16, x)); return;
    case DType::F32: storage<float>()[at] = float(x); return;
    case DType::F64: storage<double>()[at] = x; return;
    case DType::I32: storage<int32_t>()[at] = int32_t(round_to(DType::I32, x)); return;
    case DType::BOOL: storage<unsigned char>()[at] = x != 0 ? 1 : 0; return;
  }
  detail::bad_dtype();
}

namespace {

// A compact tensor's elements as doubles, the dtype switch out of the loop (get's conversions: a long
// row's K and V are ~10^8 elements).
template <class T>
void widen(const T* x, int64_t n, double* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = double(static_cast<float>(x[i]));
}
template <>
void widen(const double* x, int64_t n, double* out) {
  if (n > 0) std::memcpy(out, x, size_t(n) * sizeof(double));  // an empty tensor's pointers may be null
}

}  // namespace

std::vector<double> HostTensor::to_f64() const {
  const int64_t n = numel();
  std::vector<double> out(static_cast<size_t>(n));
  if (strides.empty()) {
    switch (dtype) {
      case DType::F16: widen(storage<Eigen::half>(), n, out.data()); return out;
      case DType::BF16: widen(storage<Eigen::bfloat16>(), n, out.data()); return out;
      case DType::F32: widen(storage<float>(), n, out.data()); return out;
      case DType::F64: widen(storage<double>(), n, out.data()); return out;
      default: break;
    }
  }
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = get(i);
  return out;
}

HostTensor HostTensor::from_f64(DType t, std::vector<int64_t> s, const std::vector<double>& x) {
  HostTensor out(t, std::move(s));
  const int64_t n = out.numel();
  if (int64_t(x.size()) != n) throw std::invalid_argument("from_f64: size mismatch");
  for (int64_t i = 0; i < n; ++i) out.set(i, x[size_t(i)]);
  return out;
}

HostTensor HostTensor::contiguous() const {
  if (strides.empty()) return *this;
  HostTensor out(dtype, shape);
  const size_t size = size_t(dtype_size(dtype));
  for (int64_t i = 0, n = numel(); i < n; ++i)
    std::memcpy(out.bytes.data() + size_t(i) * size, bytes.data() + size_t(storage_index(i)) * size, size);
  return out;
}

bool HostTensor::strides_in_bounds() const {
  if (strides.empty()) return bytes.size() == size_t(numel()) * size_t(dtype_size(dtype));
  if (strides.size() != shape.size()) return false;
  if (numel() == 0) return true;
  int64_t lo = offset, hi = offset;  // the smallest and largest storage element addressed
  for (size_t a = 0; a < shape.size(); ++a) (strides[a] < 0 ? lo : hi) += (shape[a] - 1) * strides[a];
  return lo >= 0 && hi < int64_t(bytes.size() / size_t(dtype_size(dtype)));
}

HostTensor HostTensor::laid_out(const std::vector<size_t>& order, int64_t step, const std::vector<int64_t>& pad,
                                const std::vector<size_t>& reversed, int64_t front) const {
  std::vector<int64_t> new_strides(shape.size());
  int64_t inner = step;
  for (size_t x = order.size(); x-- > 0;) {
    new_strides[order[x]] = inner;
    inner *= shape[order[x]] + pad[order[x]];
  }
  int64_t new_offset = front;
  for (size_t a : reversed) {
    new_offset += (shape[a] - 1) * new_strides[a];
    new_strides[a] = -new_strides[a];
  }
  return restrided(std::move(new_strides), new_offset, front + inner);
}

HostTensor HostTensor::restrided(std::vector<int64_t> new_strides, int64_t new_offset, int64_t storage_elems) const {
  HostTensor out;
  out.dtype = dtype;
  out.shape = shape;
  out.strides = std::move(new_strides);
  out.offset = new_offset;
  out.bytes.assign(size_t(storage_elems) * size_t(dtype_size(dtype)), 0);
  if (!out.strides_in_bounds()) throw std::invalid_argument("restrided: an element falls outside the storage");
  const size_t size = size_t(dtype_size(dtype));
  for (int64_t i = 0, n = numel(); i < n; ++i)
    std::memcpy(out.bytes.data() + size_t(out.storage_index(i)) * size, bytes.data() + size_t(storage_index(i)) * size,
                size);
  return out;
}

double round_to(DType t, double x) {
  switch (t) {
    case DType::F16:
    case DType::BF16: return round_binary(x, dtype_info(t).precision, dtype_info(t).min_exp, dtype_info(t).max_exp);
    case DType::F32: return double(float(x));
    case DType::F64: return x;
    case DType::I32:
      if (!(std::nearbyint(x) == x && std::fabs(x) <= max_finite(DType::I32)))
        throw std::invalid_argument(fmt::format("{} is not an I32 value", x));
      return x;
    case DType::BOOL: return x != 0 ? 1.0 : 0.0;
  }
  throw std::logic_error("bad dtype");
}

std::vector<int64_t> shape_q(const Problem& p) {
  if (p.varlen) return {p.total_q, p.heads_q, p.d};
  return {p.batch, p.heads_q, p.n_q, p.d};
}
std::vector<int64_t> shape_o(const Problem& p) {
  std::vector<int64_t> s = shape_q(p);
  s.back() = head_dim_v(p);
  return s;
}
std::vector<int64_t> shape_kv(const Problem& p) {
  if (p.page_size > 0) return {p.num_pages, p.page_size, p.heads_kv, p.d};
  if (p.varlen) return {p.total_k, p.heads_kv, p.d};
  return {p.batch, p.heads_kv, p.n_k, p.d};
}
std::vector<int64_t> shape_v(const Problem& p) {
  std::vector<int64_t> s = shape_kv(p);
  s.back() = head_dim_v(p);
  return s;
}
std::vector<int64_t> shape_lse(const Problem& p) {
  if (p.varlen) return {p.heads_q, p.total_q};
  return {p.batch, p.heads_q, p.n_q};
}

Seqs Inputs::seqs() const {
  Seqs s;
  if (p.varlen) {
    s.cu_q = cu_seqlens_q.data<int32_t>();
    s.cu_k = cu_seqlens_k.data<int32_t>();
  }
  if (p.padded) s.pad_q = cu_seqlens_q_padded.data<int32_t>(), s.pad_k = cu_seqlens_k_padded.data<int32_t>();
  if (p.page_size > 0) s.page_table = page_table.data<int32_t>();
  return s;
}

double Inputs::key_bias(int64_t b, int64_t h, int64_t i, int64_t j) const {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  if (has_block_mask(p) && block_mask.get(broadcast_index(block_mask, b, h, i / p.block_q, j / p.block_k)) == 0)
    return kNegInf;
  if (!has_mask_tensor(p)) return 0.0;
  const double x = mask.get(broadcast_index(mask, b, h, i, j));
  if (p.mask_kind == MaskKind::Bool) return x != 0 ? 0.0 : kNegInf;
  return x;
}

Inputs contiguous(const Inputs& in) {
  Inputs out = in;
  for (HostTensor* t : {&out.q, &out.k, &out.v, &out.d_o})
    if (!t->is_compact()) *t = t->contiguous();
  return out;
}

std::string dtypes_str(const Problem& p) {
  if (!mixed_dtypes(p)) return dtype_name(p.dtype);
  return std::string("q=") + dtype_name(dtype_q(p)) + " kv=" + dtype_name(dtype_kv(p)) + " o=" + dtype_name(dtype_o(p));
}

}  // namespace fc
