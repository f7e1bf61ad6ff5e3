// The softmax row as a unit (DESIGN §5): with q_i = e_1, k_j = x_j e_1, scale 1 and V = I, a
// kernel's o row is its softmax of the scores x, and its lse their log-sum-exp. Held against the
// multiprecision softmax/LSE of the exact oracle within Blanchard, Higham & Higham's bounds for the
// shifted algorithm in the kernel's precision u: each P within (n + 2 + 2(x_max - x_min)) u
// relative, the row summing to 1 within n u, lse within |y + n - x_min| u (y = lse). Measured
// kernels need three more terms, each named below: the online rescales (T tiles), the rounding of
// the result itself (the bound as stated leaves out u |y|), and gradual underflow, which their
// analysis assumes away.
#include <fmt/format.h>

#include <cmath>

#include "properties/execute.hpp"
#include "properties/laws.hpp"
#include "reference/exact.hpp"

namespace fc::props {
namespace {

std::string law_softmax_row(const Kernel& k, const Case& c) {
  // Scores: row 0 of the case's scores, rounded to fp32 (exact inputs to the row unit).
  const Problem& pc = c.in.p;
  std::vector<double> x(static_cast<size_t>(pc.n_k));  // (n_k,)
  for (int64_t j = 0; j < pc.n_k; ++j) {
    double dot = 0;
    for (int64_t e = 0; e < pc.d; ++e) dot += c.in.q.get(e) * c.in.k.get(offset_kv(pc, 0, 0, j) + e);
    x[size_t(j)] = double(float(pc.scale * dot));
  }
  Problem p;
  p.n_q = pc.n_q, p.n_k = pc.n_k, p.d = pc.n_k, p.dtype = DType::F32, p.mask = pc.mask, p.scale = 1;
  Inputs in{p, HostTensor(p.dtype, shape_q(p)), HostTensor(p.dtype, shape_kv(p)), HostTensor(p.dtype, shape_kv(p)), {}};
  for (int64_t i = 0; i < p.n_q; ++i) in.q.set(i * p.d, 1.0);
  for (int64_t j = 0; j < p.n_k; ++j) in.k.set(j * p.d, x[size_t(j)]), in.v.set(j * p.d + j, 1.0);
  const Run r = execute(k, in, c.cfg, false);
  if (!r.error.empty()) return r.error;
  // The kernel's u: its row sum's unit, a whole ulp where its products go through tensor cores.
  const ref::Precision pr = precision_of(k, c.cfg, p);
  const double u = ref::unit_roundoff(pr.ar.l.acc) * (pr.ar.pv.adder == Adder::TensorCore ? 2 : 1);
  for (int64_t i = 0; i < p.n_q; ++i) {
    const int64_t n = n_visible(p.mask, i, p.n_q, p.n_k);
    if (n == 0) continue;  // the fully_masked law's business
    const std::vector<double> row(x.begin(), x.begin() + n);
    const std::vector<double> P = ref::exact_softmax(row, 113);
    const double y = ref::exact_lse(row, 113);
    const double x_max = *std::max_element(row.begin(), row.end()), x_min = *std::min_element(row.begin(), row.end());
    // BHH's single-pass terms, plus what the online algorithm adds: T rescale factors
    // exp(m_old - m_new), each an argument rounding of at most (x_max - x_min) u and an exp, and
    // the final normalising product and store (2 u).
    const double T = pr.ar.pv.block > 0 ? std::ceil(double(n) / double(pr.ar.pv.block)) : 1.0;
    const double spread = x_max - x_min;
    const double rel = (double(n) + 2 + 2 * spread + T * (spread + 4) + 2) * u;
    // BHH assume no underflow: a subnormal P also carries gradual underflow's absolute error, one
    // floor for the exponential, one for the normalising product and one per rescale (<= n).
    const double floor_abs = double(2 * n + 4) * ref::underflow_floor(DType::F32);
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double got = r.out.o.get(i * p.d + j);
      sum += got;
      if (!(std::fabs(got - P[size_t(j)]) <= rel * P[size_t(j)] + floor_abs))
        return fmt::format(
            "row {}: P[{}] = {:.9g}, exact {:.17g}: relative error {:.3g} > (n + 2 + 2(x_max - x_min)) u = {:.3g}\n", i,
            j, got, P[size_t(j)], std::fabs(got / P[size_t(j)] - 1), rel);
    }
    // BHH's n u, plus the reciprocal, the normalising product and the store (3 u, one each per P)
    // and the rescales; and the fp64 sum's own rounding.
    const double sum_tol = (double(n) + 3 + T * (spread + 4)) * u + double(n) * 0x1p-53;
    if (!(std::fabs(sum - 1) <= sum_tol))
      return fmt::format("row {}: sum of P = {:.17g}, not 1 within {:.3g}\n", i, sum, sum_tol);
    // BHH's |y + n - x_min| u, plus the rescales (as above) and the rounding of y itself (u |y|:
    // the sum m + log l, and the fp32 lse of the contract).
    const double lse = r.out.lse.get(i);
    const double tol = (std::fabs(y + double(n) - x_min) + T * (spread + 4) + 2 * std::fabs(y)) * u;
    if (!(std::fabs(lse - y) <= tol))
      return fmt::format("row {}: lse = {:.9g}, exact {:.17g}: error {:.3g} > bound {:.3g}\n", i, lse, y,
                         std::fabs(lse - y), tol);
  }
  return "";
}

}  // namespace

void add_softmax_laws(std::vector<Law>& out) {
  using R = Regime;
  out.push_back({.id = "softmax_row",
                 .sentence = "the online softmax of a row equals the exact softmax within the shifted-softmax bound",
                 .regimes = {R::Normal, R::Outliers, R::Ties, R::AllEqual, R::SubnormalP},
                 .only_dtypes = {DType::F32},
                 .check = law_softmax_row});
}

}  // namespace fc::props
