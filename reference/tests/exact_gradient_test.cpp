// The exact backward against central finite differences of the exact forward, all at 256 bits.
// f(q, k, v) = sum(d_o ∘ o) has gradient (d_q, d_k, d_v). Central difference with step h:
//   |(f(x+h) - f(x-h)) / 2h - f'(x)| <= h^2/6 · max|f'''|  (truncation)  +  ~2^-256 |f| / h  (rounding).
// With h = 2^-64 and O(1) data (|f'''| well below 2^20 here), truncation < 2^-128·2^20/6 < 2^-110
// and rounding ~ 2^-190: tolerance 2^-100 (absolute; gradients are O(1)) leaves a margin of 2^10,
// while a backward formula that is wrong in any term is off by O(1).
#include "tests/catch.hpp"
#include <cmath>
#include <random>

#include "reference/exact_mp.hpp"

namespace fc::ref {
namespace {

using detail::mp;

mp objective(const Problem& p, const detail::TensorsMP& in) {
  detail::TensorsMP fwd{in.q, in.k, in.v, {}};
  const detail::ResultMP r = detail::exact_mp(p, fwd);
  mp f = 0;
  for (size_t i = 0; i < r.o.size(); ++i) f += in.d_o[i] * r.o[i];
  return f;
}

// Largest |finite difference - analytic| over every element of one input tensor.
mp worst_gap(const Problem& p, detail::TensorsMP in, std::vector<mp> detail::TensorsMP::*x, const std::vector<mp>& grad,
             const mp& h) {
  mp worst = 0;
  for (size_t i = 0; i < (in.*x).size(); ++i) {
    const mp x0 = (in.*x)[i];
    (in.*x)[i] = x0 + h;
    const mp up = objective(p, in);
    (in.*x)[i] = x0 - h;
    const mp down = objective(p, in);
    (in.*x)[i] = x0;
    const mp gap = abs((up - down) / (2 * h) - grad[i]);
    if (gap > worst) worst = gap;
  }
  return worst;
}

void check_gradients(const Problem& p, uint64_t seed) {
  detail::PrecisionGuard guard(256);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist;
  auto fill = [&](int64_t n) {
    std::vector<mp> x;
    for (int64_t i = 0; i < n; ++i) x.emplace_back(dist(rng));
    return x;
  };
  const detail::TensorsMP in{fill(numel_q(p)), fill(numel_kv(p)), fill(numel_kv(p)), fill(numel_q(p))};
  const detail::ResultMP r = detail::exact_mp(p, in);
  const mp h = std::ldexp(1.0, -64), tol = std::ldexp(1.0, -100);
  CHECK(worst_gap(p, in, &detail::TensorsMP::q, r.d_q, h) <= tol);
  CHECK(worst_gap(p, in, &detail::TensorsMP::k, r.d_k, h) <= tol);
  CHECK(worst_gap(p, in, &detail::TensorsMP::v, r.d_v, h) <= tol);
  // Negative control: the same comparison sees a gradient off by 2^-80 in one element.
  std::vector<mp> wrong = r.d_k;
  wrong[wrong.size() / 2] += std::ldexp(1.0, -80);
  CHECK(worst_gap(p, in, &detail::TensorsMP::k, wrong, h) > tol);
}

Problem shape(int32_t hq, int32_t hkv, int32_t n_q, int32_t n_k, int32_t d, Mask m, double scale) {
  const Problem p{
      .heads_q = hq, .heads_kv = hkv, .n_q = n_q, .n_k = n_k, .d = d, .dtype = DType::F64, .mask = m, .scale = scale};
  return p;
}

TEST_CASE("exact backward equals central finite differences: no mask, GQA 2/1", "[cpu]") {
  check_gradients(shape(2, 1, 3, 4, 2, Mask::None, 0.7), 1);
}

TEST_CASE("exact backward equals central finite differences: causal_top_left, n_q > n_k", "[cpu]") {
  check_gradients(shape(1, 1, 4, 3, 2, Mask::CausalTopLeft, 1.0), 2);
}

TEST_CASE("exact backward equals central finite differences: causal_bottom_right with an empty row", "[cpu]") {
  check_gradients(shape(2, 2, 4, 3, 3, Mask::CausalBottomRight, -0.5), 3);
}

}  // namespace
}  // namespace fc::ref
