// Regime classification from the data, so that the coverage health check counts what the cases
// are, not what the generator meant them to be.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "properties/constants.hpp"
#include "properties/generators.hpp"
#include "reference/bounds.hpp"

namespace fc::props {
namespace {

double max_abs(const HostTensor& t) {
  double m = 0;
  for (int64_t i = 0, end = t.numel(); i < end; ++i) m = std::max(m, std::fabs(t.get(i)));
  return m;
}

bool on_grid(const HostTensor& t) {  // k/8 with |k| <= 31
  for (int64_t i = 0, end = t.numel(); i < end; ++i) {
    const double x = t.get(i) * 8;
    if (x != std::nearbyint(x) || std::fabs(x) > 31) return false;
  }
  return true;
}

}  // namespace

ScoreStats score_stats(const Inputs& in) {
  const Problem& p = in.p;
  ScoreStats st;
  st.max_score = -kInf;
  // Half the smallest subnormal: weights below it round to 0, so they are not "subnormal P".
  const double sub_lo = 2 * ref::underflow_floor(p.dtype), sub_hi = ref::min_normal(p.dtype);
  std::vector<double> s(static_cast<size_t>(p.n_k));  // (n_k,) one row of scores
  // In float64 once, in the logical order the offsets index: an element read through HostTensor::get
  // in the inner loop costs an index walk and a dtype switch for each of its n_k uses.
  const std::vector<double> q = in.q.to_f64(), k = in.k.to_f64();
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        const int64_t n_v = n_visible(p.mask, i, p.n_q, p.n_k);
        if (n_v == 0) {
          ++st.empty_rows;
          continue;
        }
        const double* q_i = q.data() + offset_q(p, b, h, i);
        for (int64_t j = 0; j < n_v; ++j) {
          const double* k_j = k.data() + offset_kv(p, b, kv_head(p, int32_t(h)), j);
          double dot = 0;
          for (int64_t x = 0; x < p.d; ++x) dot += q_i[x] * k_j[x];
          s[size_t(j)] = p.scale * dot;
        }
        const double m = *std::max_element(s.begin(), s.begin() + n_v);
        const auto tied = std::count(s.begin(), s.begin() + n_v, m);
        st.tied_rows += tied > 1;
        st.multi_rows += n_v > 1;
        st.equal_rows += n_v > 1 && tied == n_v;
        st.max_score = std::max(st.max_score, m);
        for (int64_t j = 0; j < n_v; ++j) {
          st.max_abs = std::max(st.max_abs, std::fabs(s[size_t(j)]));
          const double w = std::exp(s[size_t(j)] - m);
          st.subnormal_p += w >= sub_lo && w < sub_hi;
        }
      }
  return st;
}

namespace {

// Whether the inputs show regime r's defining property; `stats` gives the score statistics, computed
// at most once however many regimes ask.
bool shows(Regime r, const Inputs& in, const std::function<const ScoreStats&()>& stats) {
  switch (r) {
    case Regime::Normal:
    case Regime::Poison: return true;
    case Regime::Grid: return on_grid(in.q) && on_grid(in.k) && on_grid(in.v);
    case Regime::Outliers:  // an N(0,100) draw: beyond 5 sigma of N(0,1)
      return std::max({max_abs(in.q), max_abs(in.k), max_abs(in.v)}) > 5;
    case Regime::Ones: {
      for (int64_t i = 0, end = in.v.numel(); i < end; ++i)
        if (in.v.get(i) != 1.0) return false;
      return true;
    }
    case Regime::Fp16Max: return in.p.dtype == DType::F16 && max_abs(in.v) >= 0.9 * 65504 * (1 - 0x1p-11);
    case Regime::Subnormal: {  // some value, and none above, the smallest normal
      const double m = std::max({max_abs(in.q), max_abs(in.k), max_abs(in.v)});
      return m > 0 && m < ref::min_normal(in.p.dtype);
    }
    case Regime::Huge: return stats().max_abs >= 1e3;
    case Regime::FarBelow: return stats().max_score <= -1e4;
    case Regime::Ties: return stats().tied_rows > 0;
    case Regime::AllEqual: return stats().multi_rows > 0 && stats().equal_rows == stats().multi_rows;
    case Regime::SubnormalP: return stats().subnormal_p > 0;
    case Regime::FullyMasked: return stats().empty_rows > 0;
    case Regime::LongRow: return n_visible(in.p.mask, in.p.n_q - 1, in.p.n_q, in.p.n_k) >= 256;
    case Regime::kCount: break;
  }
  return false;
}

// score_stats(in), computed on the first call only.
std::function<const ScoreStats&()> lazy_stats(const Inputs& in, std::optional<ScoreStats>& held) {
  return [&in, &held]() -> const ScoreStats& {
    if (!held) held = score_stats(in);
    return *held;
  };
}

}  // namespace

Regime classify(const Case& c) {
  std::optional<ScoreStats> held;
  return shows(c.regime, c.in, lazy_stats(c.in, held)) ? c.regime : Regime::Normal;
}

Regime first_shown(const Inputs& in, std::initializer_list<Regime> order) {
  std::optional<ScoreStats> held;
  const auto stats = lazy_stats(in, held);
  for (Regime r : order)
    if (shows(r, in, stats)) return r;
  return Regime::Normal;
}

}  // namespace fc::props
