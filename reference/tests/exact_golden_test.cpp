// The seeds' worked examples through the exact oracle, plus its softmax/LSE unit.
#include <cmath>
#include <limits>
#include <random>

#include "golden_checks.hpp"
#include "reference/exact.hpp"

namespace fc::ref {
namespace {

Result64 run_exact(const Problem& p, const Tensors64& in) { return exact(p, in, 256); }

TEST_CASE("exact forward: the seeds' 3x2 example", "[cpu]") { seeds::check_three_by_two(run_exact); }

TEST_CASE("exact forward: the seeds' softmax rows", "[cpu]") { seeds::check_softmax_rows(run_exact); }

TEST_CASE("exact forward: row [101,100,102] pours o = [0.910, 0.755]", "[cpu]") { seeds::check_row101_pour(run_exact); }

TEST_CASE("exact backward: resurrection P2 = e^(100-102)/1.5032 = 0.090", "[cpu]") {
  seeds::check_resurrection(run_exact);
}

TEST_CASE("exact_softmax and exact_lse: the seeds' rows and the non-finite rules", "[cpu]") {
  seeds::check_printed(exact_softmax(seeds::kRow2130), seeds::kRow2130Softmax, 4);
  seeds::check_printed(exact_softmax(seeds::kRow101), seeds::kRow101Softmax, 3);
  // lse of [101,100,102] = 102 + log(1.5032): printed 103.4077 to 4 decimals (log 1.50321 = 0.40760).
  seeds::check_printed({exact_lse(seeds::kRow101) - 102}, {std::log(1.5032)}, 4);
  const double inf = std::numeric_limits<double>::infinity();
  // -inf scores carry weight 0; all -inf is an empty row; +inf or NaN leaves softmax undefined.
  const std::vector<double> with_minus_inf = exact_softmax({2, -inf, 1, 3, 0});
  CHECK(with_minus_inf[1] == 0);
  seeds::check_printed({with_minus_inf[0], with_minus_inf[2], with_minus_inf[3], with_minus_inf[4]},
                       seeds::kRow2130Softmax, 4);
  CHECK(exact_lse({-inf, -inf}) == -inf);
  for (double bad : {inf, std::nan("")}) {
    for (double e : exact_softmax({1, bad, 0})) CHECK(std::isnan(e));
    CHECK(std::isnan(exact_lse({1, bad})));
  }
}

TEST_CASE("exact_softmax_row equals exact() of the row as an attention problem (q = [1], k = x, V = I)", "[cpu]") {
  std::mt19937_64 rng(7);
  for (int32_t n : {1, 2, 5, 33, 130}) {
    for (double spread : {1.0, 30.0, 1e4}) {
      std::normal_distribution<double> g(0, spread);
      std::vector<double> x(static_cast<size_t>(n));  // (n,)
      for (double& e : x) e = g(rng);
      const Problem p{.n_q = 1, .n_k = n, .d = n, .dtype = DType::F64, .scale = 1.0};
      Tensors64 in;
      in.q.assign(size_t(n), 0.0);  // (1, n): q = e_0
      in.q[0] = 1.0;
      in.k.assign(size_t(n) * size_t(n), 0.0);  // (n, n): k_j = x_j e_0
      in.v.assign(size_t(n) * size_t(n), 0.0);  // (n, n): the identity
      for (int32_t j = 0; j < n; ++j) {
        in.k[size_t(j) * size_t(n)] = x[size_t(j)];
        in.v[size_t(j) * size_t(n) + size_t(j)] = 1.0;
      }
      const Result64 r = exact(p, in, 113);
      const SoftmaxRow row = exact_softmax_row(x, 113);
      CHECK(row.p == r.o);  // both rounded once from 113 bits
      CHECK(row.lse == r.lse[0]);
    }
  }
}

TEST_CASE("exact forward: a fully masked row gives o = 0, lse = -inf, d_q = 0", "[cpu]") {
  const Problem p{.n_q = 3,
                  .n_k = 2,
                  .d = 2,
                  .dtype = DType::F64,
                  .mask = Mask::CausalBottomRight,  // query i sees keys j <= i - 1: row 0 sees none
                  .scale = 0.5};
  Tensors64 in{{1, 2, 3, 4, 5, 6}, {1, -1, 2, 0.5}, {3, 1, -2, 4}, {1, 1, 1, 1, 1, 1}};
  const Result64 r = exact(p, in);
  CHECK(r.o[0] == 0);
  CHECK(r.o[1] == 0);
  CHECK(r.lse[0] == -std::numeric_limits<double>::infinity());
  CHECK(r.d_q[0] == 0);
  CHECK(r.d_q[1] == 0);
  CHECK(std::isfinite(r.lse[1]));  // row 1 sees key 0 only: o_1 = v_0
  CHECK(r.o[2] == 3);
  CHECK(r.o[3] == 1);
}

TEST_CASE("exact forward: NaN in q_i poisons row i only; NaN in k_j only rows that see j", "[cpu]") {
  const Problem p{.n_q = 3, .n_k = 3, .d = 1, .dtype = DType::F64, .mask = Mask::CausalTopLeft};
  Tensors64 in{{1, 2, 3}, {0.5, 1, -1}, {1, 2, 3}, {}};
  in.q[1] = std::nan("");
  Result64 r = exact(p, in);
  CHECK(std::isfinite(r.o[0]));
  CHECK(std::isnan(r.o[1]));
  CHECK(std::isfinite(r.o[2]));
  in.q[1] = 2;
  in.k[1] = std::nan("");  // key 1 is seen by rows 1 and 2 only
  r = exact(p, in);
  CHECK(std::isfinite(r.o[0]));
  CHECK(std::isnan(r.o[1]));
  CHECK(std::isnan(r.o[2]));
  CHECK(std::isnan(r.lse[2]));
}

}  // namespace
}  // namespace fc::ref
