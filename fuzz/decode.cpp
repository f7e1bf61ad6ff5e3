#include "fuzz/decode.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "properties/generators.hpp"
#include "reference/bounds.hpp"

namespace fc::fuzz {

using props::Regime;
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The dtype's exponent range: smallest subnormal and largest finite exponents (base 2).
void exponent_range(DType t, int* lo, int* hi) {
  if (!in_dtype_table(t)) return;
  const DTypeInfo& x = dtype_info(t);
  *lo = x.is_float ? x.min_exp - x.precision + 1 : 0;  // an index dtype (I32, BOOL) is never a case's storage
  *hi = x.max_exp;
}

double smallest_subnormal(DType t) {
  int lo = 0, hi = 0;
  exponent_range(t, &lo, &hi);
  return std::ldexp(1.0, lo);
}

// Sets element i of t from raw bits (the dtype's own encoding).
void set_bits(HostTensor& t, int64_t i, uint64_t bits) {
  const int n = dtype_size(t.dtype);
  std::memcpy(t.bytes.data() + size_t(i) * size_t(n), &bits, size_t(n));  // little-endian (io asserts it)
}

double special(ByteSource& src, DType t) {
  const double values[] = {std::numeric_limits<double>::quiet_NaN(),
                           kInf,
                           -kInf,
                           max_finite(t),
                           -max_finite(t),
                           ref::min_normal(t),
                           -ref::min_normal(t),
                           smallest_subnormal(t),
                           -smallest_subnormal(t),
                           -0.0};
  return src.pick(values, std::size(values));
}

// 2^e, exactly (a subnormal or +inf outside the normal range): f·pow2(e) is std::ldexp(f, e), rounded
// once, without a libm call in the per-element loops for the normal exponents.
double pow2(int e) {
  return e >= -1022 && e <= 1023 ? std::bit_cast<double>(uint64_t(e + 1023) << 52) : std::ldexp(1.0, e);
}

// The stored bytes of value x in dtype t (set()'s rounding), for copying into many elements.
struct Encoded {
  unsigned char b[8] = {};
};
Encoded encode(DType t, double x) {
  HostTensor one(t, {1});
  one.set(0, x);
  Encoded e;
  std::memcpy(e.b, one.bytes.data(), one.bytes.size());
  return e;
}
void put(HostTensor& t, int64_t i, const Encoded& e, size_t size) {
  std::memcpy(t.bytes.data() + size_t(i) * size, e.b, size);
}

// Elements [0, n) of compact t, each draw()'s value, an integer in [lo, hi]: the range's encodings
// are made once.
template <class Draw>
void fill_ints(HostTensor& t, int64_t n, int lo, int hi, Draw draw) {
  std::vector<Encoded> table;
  for (int x = lo; x <= hi; ++x) table.push_back(encode(t.dtype, double(x)));
  const size_t size = size_t(dtype_size(t.dtype));
  for (int64_t i = 0; i < n; ++i) put(t, i, table[size_t(draw() - lo)], size);
}

// t: a fresh compact tensor (decode_shape's), zero-filled.
void fill(ByteSource& src, HostTensor& t, const std::vector<Values>& modes) {
  const auto mode =
      modes.empty() ? Values(src.range(0, int(Values::kCount) - 1)) : src.pick(modes.data(), modes.size());
  const int64_t n = t.numel();
  int e_lo = 0, e_hi = 0;
  exponent_range(t.dtype, &e_lo, &e_hi);
  switch (mode) {
    case Values::Zero: break;  // HostTensor starts zero-filled
    case Values::SmallInt:
      fill_ints(t, n, -4, 4, [&] { return int(src.range(-4, 4)); });
      break;
    case Values::Grid: {
      const double step = pow2(-int(src.range(0, 14)));
      for (int64_t i = 0; i < n; ++i) t.set(i, double(int16_t(src.bits(2))) * step);  // rounded once
      break;
    }
    case Values::Scaled: {
      const int e = int(src.range(e_lo, e_hi));  // one exponent anywhere in the range, then +-3 around it
      for (int64_t i = 0; i < n; ++i) {
        const double f = 1 + double(src.bits(1)) / 256;
        const double x = f * pow2(std::clamp(e + int(src.range(-3, 0)), e_lo, e_hi));
        t.set(i, src.flip() ? -x : x);  // set() rounds to the dtype (to inf past its max)
      }
      break;
    }
    case Values::Raw:
      for (int64_t i = 0; i < n; ++i) set_bits(t, i, src.bits(dtype_size(t.dtype)));
      break;
    case Values::Sprinkle: {
      fill_ints(t, n, -2, 2, [&] { return int(src.range(-2, 2)); });
      for (int64_t k = src.range(1, 3); k > 0 && n > 0; --k) t.set(src.range(0, n - 1), special(src, t.dtype));
      break;
    }
    case Values::Constant: {
      const double x = std::ldexp(1 + double(src.bits(1)) / 256, int(src.range(-8, 8))) * (src.flip() ? -1 : 1);
      const Encoded e = encode(t.dtype, x);
      const size_t size = size_t(dtype_size(t.dtype));
      for (int64_t i = 0; i < n; ++i) put(t, i, e, size);
      break;
    }
    case Values::kCount: break;
  }
}

double decode_scale(ByteSource& src, int32_t d) {
  switch (src.range(0, 5)) {
    case 0: return default_scale(d);
    case 1: return 1.0;
    case 2: return std::ldexp(src.flip() ? -1.0 : 1.0, int(src.range(-24, 24)));  // +-2^e: exact products
    case 3: return double(src.range(-128, 128)) / 64;                             // a grid, 0 included
    case 4: return default_scale(d) * std::ldexp(1.0, int(src.range(-4, 4)));
    default: {  // any finite double's bits
      uint64_t b = src.bits(8);
      double x = 0;
      std::memcpy(&x, &b, 8);
      return std::isfinite(x) ? x : default_scale(d);
    }
  }
}

Config decode_config(ByteSource& src, const Kernel& k, int32_t n_max) {
  if (k.info.any_tile) {
    Config c;
    c.block_m = int32_t(src.range(1, n_max + 1));
    c.block_n = int32_t(src.range(1, n_max + 1));
    c.order = src.flip() ? LoopOrder::FA1 : LoopOrder::FA2;
    return c;
  }
  return k.info.configs.empty() ? Config{} : src.pick(k.info.configs.data(), k.info.configs.size());
}

// The regime the data show, tried from the most specific label (properties' classify decides).
Regime label(const props::Case& c) {
  using R = Regime;
  return props::first_shown(c.in, {R::FullyMasked, R::Fp16Max, R::Subnormal, R::SubnormalP, R::Huge, R::FarBelow,
                                   R::AllEqual, R::Ties, R::Outliers});
}

const char* const kValuesNames[] = {"zero", "small_int", "grid", "scaled", "raw", "sprinkle", "constant"};
static_assert(std::size(kValuesNames) == size_t(Values::kCount));

}  // namespace

const char* values_name(Values v) { return kValuesNames[int(v)]; }

bool parse_values(const std::string& s, Values* out) {
  for (int i = 0; i < int(Values::kCount); ++i)
    if (s == kValuesNames[i]) return *out = Values(i), true;
  return false;
}

props::Case decode_shape(ByteSource& src, const Kernel& k, const ShapeLimits& limits) {
  props::Case c;
  Problem& p = c.in.p;
  const KernelInfo& info = k.info;
  p.dtype = info.dtypes.empty() ? DType::F32 : src.pick(info.dtypes.data(), info.dtypes.size());
  p.mask = info.masks.empty() ? Mask::None : src.pick(info.masks.data(), info.masks.size());
  p.batch = int32_t(src.range(1, limits.max_batch));
  p.heads_kv = int32_t(src.range(1, limits.max_heads_kv));
  p.heads_q = p.heads_kv * (info.gqa ? int32_t(src.range(1, limits.max_group)) : 1);
  p.n_q = int32_t(src.range(1, limits.max_n));
  p.n_k = int32_t(src.range(1, limits.max_n));
  p.d = info.head_dims.empty() ? int32_t(src.range(1, limits.max_d))
                               : src.pick(info.head_dims.data(), info.head_dims.size());
  p.scale = decode_scale(src, p.d);
  c.cfg = decode_config(src, k, std::max(p.n_q, p.n_k));
  c.cfg2 = decode_config(src, k, std::max(p.n_q, p.n_k));
  c.aux = src.bits(8);
  c.in.q = HostTensor(p.dtype, shape_q(p));   // (batch, heads_q, n_q, d)
  c.in.k = HostTensor(p.dtype, shape_kv(p));  // (batch, heads_kv, n_k, d)
  c.in.v = HostTensor(p.dtype, shape_kv(p));  // (batch, heads_kv, n_k, d)
  if (limits.backward && info.backward && bool(k.backward) && src.flip())
    c.in.d_o = HostTensor(p.dtype, shape_q(p));  // (batch, heads_q, n_q, d)
  return c;
}

void decode_values(ByteSource& src, props::Case& c, const std::vector<Values>& modes) {
  for (HostTensor* t : {&c.in.q, &c.in.k, &c.in.v}) fill(src, *t, modes);
  if (c.in.has_d_o()) fill(src, c.in.d_o, modes);
  // The first non-finite input, for the law that poisons one position (nan_blast).
  c.regime = Regime::Normal;
  for (int32_t which = 0; which < 3 && c.regime != Regime::Poison; ++which) {
    const HostTensor& t = which == 0 ? c.in.q : which == 1 ? c.in.k : c.in.v;
    for (int64_t i = 0, end = t.numel(); i < end; ++i)
      if (!std::isfinite(t.get(i))) {
        c.regime = Regime::Poison, c.poison_tensor = which, c.poison_index = i, c.poison_value = t.get(i);
        break;
      }
  }
  if (c.regime != Regime::Poison) c.regime = label(c);
}

props::Case decode_case(ByteSource& src, const Kernel& k, const ShapeLimits& limits) {
  props::Case c = decode_shape(src, k, limits);
  decode_values(src, c);
  return c;
}

}  // namespace fc::fuzz
