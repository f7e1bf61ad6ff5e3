// The seeds' worked examples (docs/laws.md) as attention problems, shared by the golden tests of both
// oracles. The expected numbers are the seeds' printed ones; they are compared at their printed
// precision: half a unit of the last printed digit.
#pragma once

#include <vector>

#include "reference/oracle.hpp"

namespace fc::ref::seeds {

struct SeedCase {
  Problem p;
  Tensors64 in;
};

inline Problem row_problem(int32_t n_k, int32_t d) {
  const Problem p{.n_q = 1, .n_k = n_k, .d = d, .dtype = DType::F64, .scale = 1.0};
  return p;
}

// The 3×2 example with scale 1: O = [[0.910,0.755],[0.532,0.532],[0.845,0.578]].
inline SeedCase three_by_two() {
  const Problem p{.n_q = 3, .n_k = 3, .d = 2, .dtype = DType::F64, .scale = 1.0};
  return {p, {{1, 0, 0, 2, 1, 1}, {1, 1, 0, 1, 2, 0}, {1, 0, 0, 1, 1, 1}, {}}};
}
inline const std::vector<double> kThreeByTwoO = {0.910, 0.755, 0.532, 0.532, 0.845, 0.578};

// One row of scores x as a problem whose o is softmax(x): q = e_0, k_j = x_j e_0, V = identity.
inline SeedCase softmax_row(const std::vector<double>& x) {
  const int32_t n = int32_t(x.size());
  SeedCase c{row_problem(n, n), {}};
  c.in.q.assign(n, 0.0);  // (1, n)
  c.in.q[0] = 1;
  c.in.k.assign(size_t(n) * n, 0.0);  // (n, n)
  c.in.v.assign(size_t(n) * n, 0.0);  // (n, n)
  for (int32_t j = 0; j < n; ++j) {
    c.in.k[size_t(j) * n] = x[j];
    c.in.v[size_t(j) * n + j] = 1;
  }
  return c;
}
inline const std::vector<double> kRow2130 = {2, 1, 3, 0};
inline const std::vector<double> kRow2130Softmax = {0.2369, 0.0871, 0.6439, 0.0321};
inline const std::vector<double> kRow101 = {101, 100, 102};
inline const std::vector<double> kRow101Softmax = {0.245, 0.090, 0.665};

// The row [101, 100, 102] pouring v = [1,0], [0,1], [1,1]: o = [0.910, 0.755]. d_o = [1, 0]
// makes d_v_j = P_j d_o, so d_v's first column is the backward pass's own (recomputed) P.
inline SeedCase row101_pour() {
  SeedCase c{row_problem(3, 2), {}};
  c.in.q = {1, 0};
  c.in.k = {101, 0, 100, 0, 102, 0};
  c.in.v = {1, 0, 0, 1, 1, 1};
  c.in.d_o = {1, 0};
  return c;
}
inline const std::vector<double> kRow101O = {0.910, 0.755};

// Backward resurrection: m = 102, r = 1.5032, P_2 = e^(100 - 102) / 1.5032 = 0.090.
constexpr double kResurrectM = 102, kResurrectR = 1.5032, kResurrectP2 = 0.090;

// Half a unit of the last printed digit of a number printed with `decimals` decimals.
inline double printed_tol(int decimals) {
  double t = 0.5;
  for (int i = 0; i < decimals; ++i) t /= 10;
  return t;
}

}  // namespace fc::ref::seeds
