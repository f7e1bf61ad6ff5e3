#include "reports/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "contract/tensor.hpp"

namespace fc::report {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Format {
  int p;     // significand bits, the implicit one included
  int emin;  // exponent of the smallest normal
};
Format format_of(DType t) {
  if (!in_dtype_table(t) || !dtype_info(t).is_float) return {53, -1022};  // an index dtype, never a problem's storage
  return {dtype_info(t).precision, dtype_info(t).min_exp};
}

// Elementwise max that keeps NaN whichever side it is on.
double worst(double a, double b) { return (a != a || b != b) ? kNaN : std::max(a, b); }

}  // namespace

const std::array<double, kRatioBins - 1> kRatioEdges = {1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4,
                                                        5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 1e-1,
                                                        2e-1, 5e-1, 1e0,  2e0,  5e0,  1e1};

int ratio_bin(double ratio) {
  if (ratio != ratio) return kRatioBins - 1;  // a NaN ratio counts with the worst
  return int(std::upper_bound(kRatioEdges.begin(), kRatioEdges.end(), ratio) - kRatioEdges.begin());
}

int ulp_bin(int64_t steps) {
  if (steps <= 2) return int(std::max<int64_t>(steps, 0));
  int bin = 3;  // 3-4
  for (int64_t top = 4; steps > top; top *= 2) {
    if (++bin == kUlpBins - 1) return bin;  // > 2^20
  }
  return bin;
}

double ulp_of(DType t, double x) {
  const Format f = format_of(t);
  const double a = std::fabs(x);
  if (!(a >= std::ldexp(1.0, f.emin))) return std::ldexp(1.0, f.emin - f.p + 1);  // subnormal, 0, NaN
  const int e = std::isinf(a) ? std::ilogb(max_finite(t)) : std::min(std::ilogb(a), std::ilogb(max_finite(t)));
  return std::ldexp(1.0, e - f.p + 1);
}

int64_t ordinal(DType t, double x) {
  const Format f = format_of(t);
  if (std::isinf(x)) return (x > 0 ? 1 : -1) * (ordinal(t, max_finite(t)) + 1);
  const double a = std::fabs(x);
  const int64_t per_binade = int64_t(1) << (f.p - 1);
  int64_t ord;
  if (a < std::ldexp(1.0, f.emin)) {
    ord = int64_t(std::ldexp(a, f.p - 1 - f.emin));  // a multiple of the subnormal spacing: exact
  } else {
    const int e = std::ilogb(a);
    const double frac = std::ldexp(a, -e) - 1.0;  // in [0, 1), exact
    ord = per_binade * (e - f.emin + 1) + int64_t(std::ldexp(frac, f.p - 1));
  }
  return x < 0 ? -ord : ord;
}

double quantile(std::vector<double> x, double q) {
  if (x.empty()) return 0;
  const size_t k = size_t(std::floor(q * double(x.size() - 1)));
  std::nth_element(x.begin(), x.begin() + std::ptrdiff_t(k), x.end(), [](double a, double b) {
    return a < b || (a == a && b != b);  // NaN sorts last
  });
  return x[k];
}

TensorMetrics measure(const std::vector<double>& got, const std::vector<double>& ref, const std::vector<double>& bound,
                      DType out, Scale scale) {
  TensorMetrics m;
  m.has_bound = !bound.empty();
  if (got.size() != ref.size() || (m.has_bound && bound.size() != ref.size()) ||
      (scale.kind == Scale::Elementwise && (!scale.per_element || scale.per_element->size() != ref.size()))) {
    m.max_abs = kNaN;  // nothing to measure
    return m;
  }
  double ref_max = 0;  // TensorMax scale
  for (double r : ref)
    if (std::isfinite(r)) ref_max = std::max(ref_max, std::fabs(r));
  double sum_sq = 0, sum_e = 0, sum_ref_sq = 0, sum_ulp = 0, sum_mag = 0, worst_key = -1;
  std::vector<double> ratios, ulps, steps_all;
  ratios.reserve(m.has_bound ? ref.size() : 0);
  ulps.reserve(ref.size()), steps_all.reserve(ref.size());
  for (size_t x = 0; x < ref.size(); ++x) {
    const double y = got[x], r = ref[x];
    if (!std::isfinite(y) || !std::isfinite(r)) {
      const bool same = (y != y && r != r) || y == r;
      (same ? m.nonfinite_match : m.nonfinite_mismatch)++;
      continue;
    }
    const double e = y - r, ae = std::fabs(e);
    m.count++;
    sum_sq += e * e, sum_e += e, sum_ref_sq += r * r;
    m.max_abs = std::max(m.max_abs, ae);
    double scaled = ae;
    if (scale.kind == Scale::Elementwise) {
      const double s = (*scale.per_element)[x];
      scaled = ae == 0 ? 0.0 : (s > 0 ? ae / s : kInf);  // 0/0: exact; x/0: infinitely wrong
    } else if (scale.kind == Scale::TensorMax) {
      scaled = ae == 0 ? 0.0 : (ref_max > 0 ? ae / ref_max : kInf);
    }
    m.max_scaled = worst(m.max_scaled, scaled);
    const double u = ulp_of(out, r), ue = ae / u;
    m.ulp_max = std::max(m.ulp_max, ue), sum_ulp += ue, ulps.push_back(ue);
    sum_mag += r > 0 ? e : r < 0 ? -e : 0.0;
    const int64_t steps = std::llabs(ordinal(out, y) - ordinal(out, round_to(out, r)));
    m.excess_max = std::max(m.excess_max, steps), steps_all.push_back(double(steps));
    m.correctly_rounded += steps == 0;
    m.ulp_hist[size_t(ulp_bin(steps))]++;
    double key = scaled;
    if (m.has_bound) {
      const double b = bound[x];
      const double ratio = ae == 0 && b == b ? 0.0 : (b > 0 ? ae / b : (b == 0 ? kInf : kNaN));
      ratios.push_back(ratio);
      m.ratio_hist[size_t(ratio_bin(ratio))]++;
      m.ratio_max = worst(m.ratio_max, ratio);
      key = ratio;
    }
    if (key > worst_key || (key != key && worst_key == worst_key)) {
      worst_key = key, m.worst = int64_t(x), m.worst_got = y, m.worst_ref = r;
      m.worst_bound = m.has_bound ? bound[x] : 0.0;
    }
  }
  if (m.count > 0) {
    const double n = double(m.count);
    m.rmse = std::sqrt(sum_sq / n), m.bias = sum_e / n, m.ulp_mean = sum_ulp / n, m.bias_mag = sum_mag / n;
    m.bias_rel = m.rmse > 0 ? m.bias_mag / m.rmse : 0.0;
    m.ulp_p99 = quantile(std::move(ulps), 0.99), m.excess_p99 = int64_t(quantile(std::move(steps_all), 0.99));
    m.rel_norm = sum_sq == 0 ? 0.0 : (sum_ref_sq > 0 ? std::sqrt(sum_sq / sum_ref_sq) : kInf);
  }
  if (m.has_bound) {
    m.ratio_p50 = quantile(ratios, 0.50), m.ratio_p90 = quantile(ratios, 0.90), m.ratio_p99 = quantile(ratios, 0.99);
  }
  return m;
}

}  // namespace fc::report
