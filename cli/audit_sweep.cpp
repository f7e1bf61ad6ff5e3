#include "cli/audit_sweep.hpp"

#include <cmath>
#include <limits>
#include <random>

namespace fc::cli {

namespace {

Problem make_problem(DType t, int32_t b, int32_t h_q, int32_t h_kv, int32_t n_q, int32_t n_k, int32_t d, Mask m,
                     double scale = 0) {
  Problem p{b, h_q, h_kv, n_q, n_k, d, t, m, 0.0};
  p.scale = scale != 0 ? scale : default_scale(d);
  return p;
}

HostTensor uniform(DType t, std::vector<int64_t> shape, double amp, std::mt19937_64& rng) {
  HostTensor x(t, std::move(shape));
  std::uniform_real_distribution<double> u(-amp, amp);
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, u(rng));  // set() rounds to the storage dtype
  return x;
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ||a - b||_2 / ||b||_2 over whole tensors; 0 when both are zero, inf when only b is.
double normwise(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return kNaN;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  if (num != num) return kNaN;
  if (num == 0) return 0;
  return den == 0 ? kInf : std::sqrt(num / den);
}

}  // namespace

// Head dims 64 and 128 only, so GPU kernels that specialise on them run every case too.
std::vector<SweepCase> default_sweep(DType t) {
  using M = Mask;
  return {
      {"square", make_problem(t, 1, 2, 2, 64, 64, 64, M::None), 1.0},
      {"gqa_bottom_right", make_problem(t, 2, 4, 1, 48, 80, 128, M::CausalBottomRight), 1.0},
      {"tall_top_left", make_problem(t, 1, 2, 1, 80, 48, 64, M::CausalTopLeft), 1.0},
      // n_q > n_k with bottom-right alignment: the first n_q - n_k rows see no key (o = 0, lse = -inf).
      {"empty_rows", make_problem(t, 1, 1, 1, 96, 40, 64, M::CausalBottomRight), 1.0},
      // scale 1 and |q|, |k| <= 8 at d = 64: scores spread over hundreds, exp arguments far from 0.
      {"wide_scores", make_problem(t, 1, 2, 2, 64, 96, 64, M::None, 1.0), 8.0},
  };
}

Inputs make_inputs(const SweepCase& c, uint64_t index) {
  std::mt19937_64 rng(0x5eed0000ull + index);
  Inputs in;
  in.p = c.p;
  in.q = uniform(c.p.dtype, shape_q(c.p), c.amp, rng);   // (batch, heads_q, n_q, d)
  in.k = uniform(c.p.dtype, shape_kv(c.p), c.amp, rng);  // (batch, heads_kv, n_k, d)
  in.v = uniform(c.p.dtype, shape_kv(c.p), 1.0, rng);    // (batch, heads_kv, n_k, d)
  in.d_o = uniform(c.p.dtype, shape_q(c.p), 1.0, rng);   // (batch, heads_q, n_q, d)
  return in;
}

ref::Certified reference_of(const Inputs& in) {
  ref::Tensors64 t{in.q.to_f64(), in.k.to_f64(), in.v.to_f64(), in.has_d_o() ? in.d_o.to_f64() : std::vector<double>{}};
  return ref::certified(in.p, t);
}

double worst(double a, double b) {
  if (a != a || b != b) return kNaN;
  return a > b ? a : b;
}

Errors worst(const Errors& a, const Errors& b) {
  return {worst(a.o, b.o), worst(a.lse, b.lse), worst(a.grad, b.grad), a.has_grad || b.has_grad};
}

Errors measure(const Outputs& got, const ref::Certified& want) {
  Errors e;
  const std::vector<double> o = got.o.to_f64();  // (batch, heads_q, n_q, d)
  if (o.size() != want.value.o.size()) return {kNaN, kNaN, kNaN, got.has_grads()};
  for (size_t i = 0; i < o.size(); ++i) {
    const double diff = std::fabs(o[i] - want.value.o[i]);
    // Scale by sum_j P_ij |v_jk|, never by |o_ik| (o can cancel to 0); an exact 0 stays 0.
    const double scaled = diff == 0 ? 0.0 : diff / want.o_mag[i];
    e.o = worst(e.o, scaled);
  }
  const std::vector<double> lse = got.lse.to_f64();  // (batch, heads_q, n_q)
  for (size_t i = 0; i < lse.size() && i < want.value.lse.size(); ++i) {
    // -inf == -inf for an empty row counts as exact; inf - inf would be NaN.
    const double diff = lse[i] == want.value.lse[i] ? 0.0 : std::fabs(lse[i] - want.value.lse[i]);
    e.lse = worst(e.lse, diff);
  }
  if (got.has_grads() && !want.value.d_q.empty()) {
    e.has_grad = true;
    e.grad = worst(normwise(got.d_q.to_f64(), want.value.d_q),
                   worst(normwise(got.d_k.to_f64(), want.value.d_k), normwise(got.d_v.to_f64(), want.value.d_v)));
  }
  return e;
}

}  // namespace fc::cli
