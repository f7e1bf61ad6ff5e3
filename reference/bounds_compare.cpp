// Units of the dtypes, the rounding of a bounded value to an output type, the comparator that holds
// a tensor to its bound (non-finite values exact), and the FlashAttention rule.
#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>

#include "bounds.hpp"
#include "contract/tensor.hpp"
#include "reference/parallel.hpp"
#include "reference/rounded_bound.hpp"

namespace fc::ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double at(const std::vector<double>& v, int64_t i) { return v.empty() ? 0.0 : v[size_t(i)]; }

}  // namespace

// From the dtype table: u = 2^-p; the underflow floor, half the smallest subnormal, 2^(min_exp - p)
// (F64's 2^-1075 is not a double: its smallest subnormal stands in, which only widens the floor); the
// smallest normal 2^min_exp. An index dtype (I32, BOOL) is never a problem's storage: 1 for each.
namespace {
bool storage_float(DType t) { return in_dtype_table(t) && dtype_info(t).is_float; }
}  // namespace

double unit_roundoff(DType t) { return storage_float(t) ? std::ldexp(1.0, -dtype_info(t).precision) : 1; }

double underflow_floor(DType t) {
  if (!storage_float(t)) return 1;
  const DTypeInfo& x = dtype_info(t);
  return std::max(std::ldexp(1.0, x.min_exp - x.precision), std::numeric_limits<double>::denorm_min());
}

double min_normal(DType t) { return storage_float(t) ? std::ldexp(1.0, dtype_info(t).min_exp) : 1; }

bool coarser(DType a, DType b) { return unit_roundoff(a) > unit_roundoff(b); }

Precision precision_for(const Problem& p, const Arithmetic& ar) {
  Precision pr;
  pr.ar = ar;
  pr.mixed = mixed_dtypes(p);
  pr.tensors = dtypes_of(p);
  pr.storage = pr.mixed ? coarsest(pr.tensors) : p.dtype;
  return pr;
}

double storage_floor(const Precision& prec) {
  const DtypeSet t = prec.dtypes();
  return std::max({underflow_floor(prec.storage), underflow_floor(t.q), underflow_floor(t.kv), underflow_floor(t.o)});
}

PRounding p_rounding(const Precision& prec) {
  const Arithmetic& ar = prec.ar;
  PRounding r;
  r.first = coarser(ar.p_type, prec.storage) ? ar.p_type : prec.storage;
  r.to_first = ar.rounds_p && coarser(r.first, ar.soft);
  const DType before = r.to_first ? r.first : ar.soft;
  r.second = ar.operand, r.to_second = coarser(ar.operand, before);
  const double u1 = r.to_first ? unit_roundoff(r.first) : 0.0, u2 = r.to_second ? unit_roundoff(r.second) : 0.0;
  r.u = u1 + u2 + u1 * u2;
  return r;
}

Coarse coarse(const Precision& prec) {
  const Arithmetic& ar = prec.ar;
  Coarse c;
  c.storage = prec.storage;
  double u = 0;
  for (const Chain* ch : {&ar.s, &ar.pv, &ar.l, &ar.d_o_o, &ar.dp, &ar.dq, &ar.dkv}) {
    const bool whole_ulp = ch->adder == Adder::TensorCore || ch->truncates;
    u = std::max(u, unit_roundoff(ch->acc) * (whole_ulp ? 2 : 1));
  }
  c.u_acc = std::max(u, unit_roundoff(ar.soft));
  c.s_dtype = ar.stores_s && coarser(prec.storage, ar.s.acc) ? prec.storage : ar.s.acc;
  const PRounding pr = p_rounding(prec);
  c.p_dtype = pr.to_second ? pr.second : pr.to_first ? pr.first : ar.soft;
  c.block_n = ar.pv.block;
  c.l_sums_rounded_p = ar.l_sums_stored_p;
  c.flush_subnormals = ar.flush_subnormals;
  return c;
}

// Worked out once per dtype: rounded_bound runs once per output element.
Rounding rounding_of(DType t) {
  static const auto table = [] {
    std::array<Rounding, std::size(kDTypeTable)> r{};
    for (const DTypeInfo& x : kDTypeTable) {
      const DType t = x.t;
      const int32_t kind = t == DType::F16 || t == DType::BF16 ? kBinary : t == DType::F32 ? kF32 : kF64;
      if (storage_float(t)) r[size_t(t)] = {kind, x.precision, x.min_exp, x.max_exp, unit_roundoff(t), max_finite(t)};
    }
    return r;
  }();
  if (!storage_float(t)) throw std::invalid_argument("rounding_of: not a float dtype");
  return table[size_t(t)];
}

double rounded_bound(double r, double e, double err_r, DType soft, DType out, bool soft_round) {
  return rounded_bound(r, e, err_r, rounding_of(soft), rounding_of(out), soft_round);
}

namespace {

// within_bound's scan of elements [a, b) alone: the verdict over them, from a fresh start.
Verdict scan(const double* kernel, const double* ref, const double* bound, size_t a, size_t b, DType out,
             Infinite infinite) {
  Verdict v;
  auto fail = [&](size_t x, const char* why) {
    v.ok = false, v.worst = int64_t(x), v.measured = std::fabs(kernel[x] - ref[x]), v.bound = bound[x];
    v.why = why;
    return v;
  };
  for (size_t x = a; x < b; ++x) {
    const double y = kernel[x], r = ref[x], bd = bound[x];
    if (std::isnan(bd)) return fail(x, "NaN bound");
    if (std::isnan(r)) {
      if (!std::isnan(y)) return fail(x, "finite where the reference is NaN");
      continue;
    }
    if (std::isinf(r)) {
      if (y != r) return fail(x, "not the reference's infinity");
      continue;
    }
    // A bound of +inf where the reference is finite accepts anything: it is a defect of the bound.
    if (std::isinf(bd) && infinite == Infinite::Fails) return fail(x, "infinite bound where the reference is finite");
    if (std::isnan(y)) return fail(x, "NaN where the reference is finite");
    if (std::isinf(y)) {
      // Overflow of the output type is legitimate only where reference ± bound can reach it, on
      // that side: +inf when r + bound >= max, -inf when r - bound <= -max (a bound past the whole
      // range admits either sign, whatever the sign of r).
      if (y > 0 ? r + bd >= max_finite(out) : r - bd <= -max_finite(out)) continue;
      return fail(x, "infinite where the reference is finite");
    }
    const double e = std::fabs(y - r);
    const double ratio = e == 0 ? 0.0 : (bd > 0 ? e / bd : kInf);
    if (ratio > v.ratio || v.worst < 0)
      v.ratio = std::max(v.ratio, ratio), v.worst = int64_t(x), v.measured = e, v.bound = bd;
    if (e > bd) return fail(x, "error exceeds the bound");
  }
  return v;
}

}  // namespace

Verdict within_bound(const std::vector<double>& kernel, const std::vector<double>& ref,
                     const std::vector<double>& bound, DType out, Infinite infinite) {
  if (kernel.size() != ref.size() || bound.size() != ref.size()) {
    Verdict v;
    v.ok = false, v.why = "size mismatch";
    return v;
  }
  // Chunks of a fixed element count on the oracle's threads (a training shape's gradient is 10^8
  // elements), joined in order as one scan would have met them: the first failure, and before it
  // the first element of the largest ratio. The same verdict with any thread count.
  constexpr size_t kChunk = size_t(1) << 16;
  const size_t n = ref.size(), chunks = (n + kChunk - 1) / kChunk;
  const auto part = [&](size_t c) {
    return scan(kernel.data(), ref.data(), bound.data(), c * kChunk, std::min(n, (c + 1) * kChunk), out, infinite);
  };
  if (chunks <= 1) return part(0);
  std::vector<Verdict> parts(chunks);
  parallel_for(int64_t(chunks), [&](int64_t c) { parts[size_t(c)] = part(size_t(c)); });
  Verdict v;
  for (Verdict& p : parts) {
    if (!p.ok) {  // the first failure ends the scan; the ratio keeps what came before it
      p.ratio = std::max(v.ratio, p.ratio);
      return p;
    }
    if (p.worst >= 0 && (p.ratio > v.ratio || v.worst < 0))
      v.ratio = std::max(v.ratio, p.ratio), v.worst = p.worst, v.measured = p.measured, v.bound = p.bound;
  }
  return v;
}

FaRule fa_rule(const std::vector<double>& kernel, const std::vector<double>& baseline, const std::vector<double>& ref,
               const std::vector<double>& ref_err, DType out) {
  FaRule f;
  double ref_max = 0, err_max = 0;
  for (size_t x = 0; x < ref.size(); ++x) {
    if (!std::isfinite(ref[x])) continue;  // non-finite values are within_bound's business
    auto err = [&](double y) { return std::isfinite(y) ? std::fabs(y - ref[x]) : kInf; };
    f.kernel_err = std::max(f.kernel_err, err(kernel[x]));
    f.baseline_err = std::max(f.baseline_err, err(baseline[x]));
    ref_max = std::max(ref_max, std::fabs(ref[x])), err_max = std::max(err_max, at(ref_err, int64_t(x)));
  }
  // FlashAttention's atol: twice the round trip fl(fl(x + 0.3) - 0.3) - x in the output type,
  // whose size is at most 2 u (|x| + 0.3).
  f.noise = 4 * unit_roundoff(out) * (ref_max + 0.3) + err_max;
  f.holds = f.kernel_err <= 2 * f.baseline_err + f.noise;
  return f;
}

}  // namespace fc::ref
