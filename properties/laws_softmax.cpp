// The softmax row as a unit (docs/laws.md): with q_i = e_1, k_j = x_j e_1, scale 1 and V one-hot
// (v_j = e_j, in blocks of d keys for a kernel of fixed head dims), a kernel's o row is its softmax
// of the scores x, and its lse their log-sum-exp. Held against the multiprecision softmax/LSE of the
// exact oracle within Blanchard, Higham & Higham's bounds for the shifted algorithm in the kernel's
// precision u: each P within (n + 2 + 2(x_max - x_min)) u relative, the row summing to 1 within
// n u, lse within |y + n - x_min| u (y = lse). Measured kernels need more terms, each named below:
// the online rescales (T tiles), the rounding of P to its type and of the result to storage, a
// scale folded into the scores before the max is subtracted (the exponent argument then carries
// u(|x_j| + |x_max|)), and gradual underflow, which their analysis assumes away.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "properties/laws.hpp"
#include "reference/exact.hpp"
#include "verdict/verdict.hpp"

namespace fc::props {
namespace {

// The row unit's scores: row 0 of the case's scores, rounded to fp32 then to the storage type
// (exact inputs to the row unit), at most 8 blocks of d keys.
std::vector<double> row_scores(const Case& c, DType storage, int64_t n) {
  const Problem& pc = c.in.p;
  std::vector<double> x(static_cast<size_t>(n));  // (n,)
  const double lim = max_finite(storage) / 2;
  for (int64_t j = 0; j < n; ++j) {
    double dot = 0;
    for (int64_t e = 0; e < pc.d; ++e) dot += c.in.q.get(e) * c.in.k.get(offset_kv(pc, 0, 0, j) + e);
    x[size_t(j)] = round_to(storage, std::clamp(double(float(pc.scale * dot)), -lim, lim));
  }
  return x;
}

// The row problem of case c: scale 1, the case's dtype, mask and n_q, the smallest head dim the
// kernel takes, at most 8 blocks of d keys.
Problem row_problem(const Kernel& k, const Case& c) {
  const Problem& pc = c.in.p;
  Problem p;
  set_dtypes(p, dtypes_of(pc));
  p.mask = pc.mask, p.scale = 1, p.n_q = pc.n_q;
  p.d = k.info.head_dims.empty() ? std::max<int32_t>(1, std::min<int32_t>(pc.n_k, 256))
                                 : *std::min_element(k.info.head_dims.begin(), k.info.head_dims.end());
  p.n_k = int32_t(std::min<int64_t>(pc.n_k, 8 * int64_t(p.d)));
  return p;
}

// The kernel's P (n_q, n_k) and lse (n_q) on the row problem p with scores x: one run per block of
// d keys, one-hot in V. "" or what went wrong.
std::string run_row_unit(const Kernel& k, const Case& c, const Problem& p, const std::vector<double>& x,
                         std::vector<double>& P_got, std::vector<double>& lse_got) {
  const int64_t blocks = (p.n_k + p.d - 1) / p.d;
  P_got.assign(size_t(p.n_q * p.n_k), 0.0);
  for (int64_t blk = 0; blk < blocks; ++blk) {  // keys [blk d, (blk + 1) d) one-hot in V
    Inputs in{p,
              HostTensor(dtype_q(p), shape_q(p)),
              HostTensor(dtype_kv(p), shape_kv(p)),
              HostTensor(dtype_kv(p), shape_kv(p)),
              {}};
    for (int64_t i = 0; i < p.n_q; ++i) in.q.set(i * p.d, 1.0);
    for (int64_t j = 0; j < p.n_k; ++j) {
      in.k.set(j * p.d, x[size_t(j)]);
      if (j / p.d == blk) in.v.set(j * p.d + j % p.d, 1.0);
    }
    const Run r = execute(k, in, c.cfg, false);
    if (!r.error.empty()) return r.error;
    for (int64_t i = 0; i < p.n_q; ++i)
      for (int64_t j = blk * p.d; j < std::min<int64_t>(p.n_k, (blk + 1) * p.d); ++j)
        P_got[size_t(i * p.n_k + j)] = r.out.o.get(i * p.d + j % p.d);
    // lse does not see V: every block's run gives the same bits.
    const std::vector<double> lse = r.out.lse.to_f64();
    if (blk > 0 && k.info.writes_lse && lse != lse_got)
      return fmt::format("lse differs between two runs that differ only in V (blocks 0 and {})\n", blk);
    lse_got = lse;
  }
  return "";
}

// The kernel's units and floors for the row bounds (precision_of's declaration).
struct RowUnits {
  double u;                              // its row sum's unit, a whole ulp where it truncates
  double u_p;                            // P's rounding before P.V
  double u_out;                          // the store's
  double l_round;                        // u_p when l sums P after its rounding (KernelInfo::stores_s_p), else 0
  double floor_p, floor_f32, floor_out;  // underflow floors: P's, fp32's, storage's
  double u_pv;                           // P.V's accumulator where it is coarser than the row sum's: the
                                         // one-hot P_j it holds rounds there at its add and at each rescale
  int32_t pv_merge;                      // roundings per rescale of that accumulator
  int64_t block;                         // keys per tile (0: untiled)
  bool folded;                           // the scale folded into the scores before the max
};

RowUnits row_units(const Kernel& k, const Case& c, const Problem& p) {
  const ref::Precision pr = precision_of(k, c.cfg, p);
  // The kernel's u: its row sum's unit, a whole ulp where it truncates (tensor cores, an undeclared
  // kernel's directed rounding); P's rounding before P.V, the declared one (contract/arithmetic.h).
  const bool whole_ulp = pr.ar.pv.adder == Adder::TensorCore || pr.ar.l.truncates;
  const ref::PRounding pround = ref::p_rounding(pr);
  auto floor_of = [&](DType t) { return pr.ar.flush_subnormals ? ref::min_normal(t) : ref::underflow_floor(t); };
  RowUnits ru;
  ru.u = ref::unit_roundoff(pr.ar.l.acc) * (whole_ulp ? 2 : 1);
  ru.u_p = pround.u, ru.u_out = ref::unit_roundoff(pr.storage);
  ru.folded = !k.info.exact.exact_scores;
  // A baseline that sums l over P after its rounding (KernelInfo::stores_s_p) carries u_p in l.
  ru.l_round = pr.ar.l_sums_stored_p ? ru.u_p : 0.0;
  ru.floor_p = (pround.to_first ? floor_of(pround.first) : 0.0) + (pround.to_second ? floor_of(pround.second) : 0.0);
  ru.floor_f32 = floor_of(DType::F32), ru.floor_out = floor_of(pr.storage);
  ru.block = pr.ar.pv.block;
  const double u_pv = ref::unit_roundoff(pr.ar.pv.acc) * (pr.ar.pv.adder == Adder::TensorCore ? 2 : 1);
  ru.u_pv = u_pv > ru.u ? u_pv : 0.0, ru.pv_merge = pr.ar.pv.merge_old;
  return ru;
}

// Row i (its visible scores `row`, the exact softmax ex) against the kernel's P (P_got, row i's
// first) and lse: "" or the first violation.
std::string check_row(const Kernel& k, const RowUnits& ru, int64_t i, const std::vector<double>& row,
                      const ref::SoftmaxRow& ex, const double* P_got, double lse) {
  const int64_t n = int64_t(row.size());
  const double u = ru.u;
  const std::vector<double>& P = ex.p;
  const double y = ex.lse;
  const double x_max = *std::max_element(row.begin(), row.end()), x_min = *std::min_element(row.begin(), row.end());
  // BHH's single-pass terms, plus what the online algorithm adds: T rescale factors
  // exp(m_old - m_new), each an argument rounding of at most (x_max - x_min) u and an exp; the
  // normalising product (u), P's rounding to its type before P.V (u_p) and the store (u_out).
  const double T = ru.block > 0 ? std::ceil(double(n) / double(ru.block)) : 1.0;
  const double spread = x_max - x_min;
  // A P.V accumulator coarser than the row sum's (a declared fp16 accumulator) rounds the P_j it holds
  // once at its add and merge_old times at each of the T rescales after it.
  const double pv_acc = (1 + T * double(ru.pv_merge)) * ru.u_pv;
  const double rel_base =
      (double(n) + 2 + 2 * spread + T * (spread + 4) + 1) * u + ru.u_p + ru.u_out + ru.l_round + pv_acc;
  // BHH assume no underflow: a subnormal P also carries gradual underflow's absolute error, one
  // floor for the exponential, one for the normalising product and one per rescale (<= n), and
  // P's and the output's own.
  const double floor_abs = double(2 * n + 4) * ru.floor_f32 + ru.floor_p + ru.floor_out;
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double got = P_got[j];
    sum += got;
    // A scale folded before the max (exp2 of s log2 e - m) rounds the argument by u (|x_j| + |x_max|).
    const double rel = rel_base + (ru.folded ? 2 * (std::fabs(row[size_t(j)]) + std::fabs(x_max)) * u : 0.0);
    if (!(std::fabs(got - P[size_t(j)]) <= rel * P[size_t(j)] + floor_abs))
      return fmt::format(
          "row {}: P[{}] = {:.9g}, exact {:.17g}: relative error {:.3g} > (n + 2 + 2(x_max - x_min)) u and the "
          "kernel's roundings = {:.3g}\n",
          i, j, got, P[size_t(j)], std::fabs(got / P[size_t(j)] - 1), rel);
  }
  // BHH's n u, plus the reciprocal and the normalising product (2 u), P's and the store's rounding
  // of every element, the rescales, the fold; and the fp64 sum's own rounding.
  const double fold = ru.folded ? 4 * std::max(std::fabs(x_max), std::fabs(x_min)) * u : 0.0;
  const double sum_tol = (double(n) + 3 + T * (spread + 4)) * u + ru.u_p + ru.u_out + ru.l_round + pv_acc + fold +
                         double(n) * (floor_abs + 0x1p-53);
  if (!(std::fabs(sum - 1) <= sum_tol))
    return fmt::format("row {}: sum of P = {:.17g}, not 1 within {:.3g}\n", i, sum, sum_tol);
  if (!k.info.writes_lse) return "";
  // BHH's |y + n - x_min| u, plus the rescales (as above), the rounding of y itself (u |y|: the sum
  // m + log l, and the fp32 lse of the contract), a fold in and out of log2 units, and l's own u_p.
  const double tol = (std::fabs(y + double(n) - x_min) + T * (spread + 4) + 2 * std::fabs(y)) * u +
                     (ru.folded ? 5 * (std::fabs(x_max) + std::fabs(y)) * u : 0.0) + 1.01 * ru.l_round;
  if (!(std::fabs(lse - y) <= tol))
    return fmt::format("row {}: lse = {:.9g}, exact {:.17g}: error {:.3g} > bound {:.3g}\n", i, lse, y,
                       std::fabs(lse - y), tol);
  return "";
}

std::string law_softmax_row(const Kernel& k, const Case& c) {
  const Problem p = row_problem(k, c);
  if (!claims(k, p)) throw NotApplicable("the kernel declines the row problem");
  const std::vector<double> x = row_scores(c, dtype_kv(p), p.n_k);  // the scores are keys' values
  std::vector<double> P_got, lse_got;                               // (n_q, n_k), (n_q)
  if (std::string err = run_row_unit(k, c, p, x, P_got, lse_got); !err.empty()) return err;
  const RowUnits ru = row_units(k, c, p);
  std::map<int64_t, ref::SoftmaxRow> exact_rows;  // by visible length: rows of one length share their keys
  for (int64_t i = 0; i < p.n_q; ++i) {
    const int64_t n = n_visible(p.mask, i, p.n_q, p.n_k);
    if (n == 0) continue;  // reference's fully masked rows
    const std::vector<double> row(x.begin(), x.begin() + n);
    auto [it, fresh] = exact_rows.try_emplace(n);
    if (fresh) it->second = ref::exact_softmax_row(row, 113);
    const double lse = k.info.writes_lse ? lse_got[size_t(i)] : 0.0;
    if (std::string err = check_row(k, ru, i, row, it->second, &P_got[size_t(i * p.n_k)], lse); !err.empty())
      return err;
  }
  return "";
}

}  // namespace

void add_softmax_laws(std::vector<Law>& out) {
  using R = Regime;
  out.push_back({.id = "softmax_row",
                 .sentence = "the online softmax of a row equals the exact softmax within the shifted-softmax bound",
                 .regimes = {R::Normal, R::Outliers, R::Ties, R::AllEqual, R::SubnormalP},
                 .check = law_softmax_row});
}

}  // namespace fc::props
