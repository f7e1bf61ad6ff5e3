// Certified oracle, backward (docs/SEMANTICS.md): D_i = d_o_i·o_i (compensated Dot2), dP = d_o·vᵀ (exact
// by Ozaki splitting for fp16/bf16 inputs, else plain with a |d_o||v|ᵀ bound), dS = P̂ ∘ (dP - D)
// with an elementwise bound e_ij (under softcap times the cap's derivative ĝ = sech²(s/c) from the
// forward, its error carried), then the long products d_q = scale·dS·K, d_k = scale·dSᵀ·Q,
// d_v = P̂ᵀ·d_o as chunked GEMMs.
// Bounds on the long products use Cauchy–Schwarz, sum_j w_ij |b_jk| <= |w_i|_2 |b_:k|_2, so no extra
// GEMM is spent on them: elementwise they are rigorous, normwise they are the textbook
// |ΔC|_F <= |W|_F |B|_F, i.e. the natural normwise scale of each gradient is |A|_F |B|_F of its
// final product (|M|_F |K|_F for d_q with M = the absolute-value dS; see certified.hpp).
#include <algorithm>
#include <cmath>
#include <utility>

#include "reference/certified_internal.hpp"

namespace fc::ref::cert {
namespace {

constexpr Index kRowBlock = 256;  // rows per parallel task of the dS loop

// Ogita–Rump–Oishi Dot2: x·y in twice the working precision; |res - x·y| <= u|res|(1+2u) + gamma(n)^2
// |x|·|y|.
double dot2(const Mat& x, const Mat& y, Index r, double& abs_dot) {
  double s = 0, c = 0;
  abs_dot = 0;
  for (Index k = 0; k < x.cols(); ++k) {
    double h, e1, e2;
    two_prod(x(r, k), y(r, k), h, e1);
    two_sum(s, h, s, e2);
    c += e1 + e2;
    abs_dot += std::fabs(x(r, k) * y(r, k));
  }
  return s + c;
}

// x y z for factors >= 0, multiplied largest by smallest first: no intermediate overflows unless the
// product does (a scale of 1e248 times the weights' norm, times a column norm of 1e-10). A zero
// factor gives 0 whatever the others: a zero column of k (or q) makes every term of its gradient's
// sum exactly 0, however large the scale times the weights (inf * 0 is not NaN here). Rounded
// products below 2^-1022 lose less than 2^-1074 in all: the result adds it.
double product3(double x, double y, double z) {
  if (x == 0 || y == 0 || z == 0) return 0;
  if (x > y) std::swap(x, y);
  if (y > z) std::swap(y, z);
  if (x > y) std::swap(x, y);
  return (z * x) * y + 0x1p-1074;
}

// D_i = d_o_i·o_i (Dot2) of every row and its bound, which carries o's own error.
void d_rows(const GroupIn& g, const GroupFwd& f, std::vector<double>& big_d, std::vector<double>& err_d) {
  const Index m = g.q.rows(), dv = g.v.cols();
  for (Index r = 0; r < m; ++r) {
    double abs_dot;
    big_d[r] = dot2(g.d_o, f.o, r, abs_dot);
    double from_o = 0;  // |d_o|·err_o: D uses the exact o, we hold ô
    for (Index k = 0; k < dv; ++k) from_o += std::fabs(g.d_o(r, k)) * f.o_err(r, k);
    const double gd = gamma(double(dv));
    err_d[r] = (kU * (1 + 3 * kU) * std::fabs(big_d[r]) + 2 * gd * gd * abs_dot * 1.01 + from_o) * kSlack;
  }
}

// dS = P̂ ∘ (dP - D) row by row, in place of dP, and the squared weights of its long products'
// Cauchy–Schwarz bounds (scaled by w_down).
struct DsRows {
  const GroupIn& g;
  const GroupFwd& f;
  const ExactProduct& dp;
  const std::vector<double>& big_d;
  const std::vector<double>& err_d;
  double gam_qk, gam_v, w_down;

  // Row r of ds (dP on entry): adds its squared weights to w_row (its own), col_w (dS's columns)
  // and col_wv (P̂'s columns, for d_v).
  void row(Mat& ds, Index r, double& w_row, std::vector<double>& col_w, std::vector<double>& col_wv) const {
    const Index n = g.k.rows();
    const Index j0 = g.first[size_t(r)], nv = f.bad[r] ? j0 : g.n_vis[size_t(r)];  // visible: [j0, nv)
    const double kp = f.kappa[r] * (1 + f.kappa[r]);  // |P̂ - P| <= kp P̂ on kept entries
    const double tail = f.dropped[r];                 // dropped entries: P̂ = 0, P <= tail
    for (Index j = 0; j < j0; ++j) ds(r, j) = 0;
    for (Index j = j0; j < nv; ++j) {
      const double dpv = dp.any_lo ? ds(r, j) + dp.lo_at(r, j) : ds(r, j);
      const double e_p = kU * std::fabs(dpv) * 1.01 + dp.bound(r, j);  // |dP - dpv|
      const double t = dpv - big_d[r];  // cancels when dP ≈ D: its error is what e_p, err_d carry
      const double pr = f.p(r, j);
      double dsv = pr * t;
      // |dS - dsv| <= |P - P̂||dP - D| + P̂|(dP - D) - t| + rounding of P̂·t
      double e = pr * ((kp + kU) * (1 + 3 * kU) * std::fabs(t) + (1 + kp) * (e_p + err_d[r])) + kU * std::fabs(dsv);
      e += tail * (std::fabs(dpv) + e_p + std::fabs(big_d[r]) + err_d[r]);
      if (f.g.size()) {  // softcap: dS times the cap's derivative ĝ, |ĝ - g| <= eg
        const double gh = f.g(r, j), eg = f.g_rel[size_t(r)] * gh + f.g_abs[size_t(r)], base = dsv;
        dsv = base * gh;
        e = e * (gh + eg) + std::fabs(base) * eg + kU * std::fabs(dsv);
      }
      const double w = (e + gam_qk * std::fabs(dsv)) * w_down;
      w_row += w * w;
      col_w[j] += w * w;
      const double wv = (kp + gam_v * (1 + kp)) * pr + tail;
      col_wv[j] += wv * wv;
      ds(r, j) = dsv;
    }
    for (Index j = nv; j < n; ++j) ds(r, j) = 0;
  }
};

// The gradients' elementwise bounds from the sums of squared weights (per row of d_q, per key of
// d_k and d_v; w_row, w_col scaled by 2^-w_exp) and the column norms of k, q and d_o.
void gradient_errors(const GroupIn& g, const std::vector<double>& w_row, const std::vector<double>& w_col,
                     const std::vector<double>& wv_col, int w_exp, GroupBwd& bw) {
  const Index m = g.q.rows(), n = g.k.rows(), d = g.q.cols(), dv = g.v.cols();
  const double abs_scale = std::fabs(g.scale);
  const Eigen::RowVectorXd k_col = g.k.colwise().stableNorm(), q_col = g.q.colwise().stableNorm(),
                           do_col = g.d_o.colwise().stableNorm();  // (d), (d), (d_v)

  bw.d_q_err.resize(m, d);
  bw.d_k_err.resize(n, d);
  bw.d_v_err.resize(n, dv);
  // The sums of squared weights are rounded, and squares below 2^-1022 underflow (a dropped weight's
  // 2^-1008, squared, is 0 in fp64): each of the 2 n operations loses at most 2^-1074 absolutely,
  // and a scaled weight rounded to a subnormal adds less than 2^-1074 to its square, so
  // Sum w^2 <= computed + 3 n 2^-1074, and the norms below stay upper bounds however small w is.
  const auto norm = [](double sum_sq, Index terms) {
    return std::sqrt(sum_sq * (1 + 4 * kU) + 3 * double(terms) * 0x1p-1074);
  };
  for (Index r = 0; r < m; ++r) {
    const double wr = std::ldexp(norm(w_row[r], n), w_exp);
    for (Index k = 0; k < d; ++k)
      bw.d_q_err(r, k) = (product3(abs_scale, wr, k_col(k)) + kU * std::fabs(bw.d_q(r, k))) * kSlack;
  }
  for (Index j = 0; j < n; ++j) {
    const double wc = std::ldexp(norm(w_col[j], m), w_exp), wvc = norm(wv_col[j], m);
    for (Index k = 0; k < d; ++k)
      bw.d_k_err(j, k) = (product3(abs_scale, wc, q_col(k)) + kU * std::fabs(bw.d_k(j, k))) * kSlack;
    for (Index k = 0; k < dv; ++k) bw.d_v_err(j, k) = wvc * do_col(k) * kSlack;
  }
}

}  // namespace

GroupBwd backward(const GroupIn& g, const GroupFwd& f) {
  const Index m = g.q.rows(), n = g.k.rows();
  std::vector<double> big_d(m), err_d(m);  // (m): D̂ and its bound
  d_rows(g, f, big_d, err_d);
  double a_max = 0, b_max = 0;
  // stableNorm: no underflow to 0 for tiny rows (certified_gemm.cpp's row_norm says why).
  for (Index r = 0; r < m; ++r) a_max = std::max(a_max, g.d_o.row(r).stableNorm());
  for (Index j = 0; j < n; ++j) b_max = std::max(b_max, g.v.row(j).stableNorm());
  // Neglect slice pairs below 2^-60 of the largest |d_o_i||v_j|.
  // Exact for fp16/bf16 inputs; for wider inputs plain fp64 with an elementwise gamma(d)|d_o||v|ᵀ
  // bound, which is within gamma(d) of dS's natural scale P|d_o||v| (see exact_abt).
  ExactProduct dp = exact_abt(g.d_o, g.v, 0x1p-60 * a_max * b_max, /*allow_plain=*/true);
  Mat& ds = dp.hi;  // (m, n_k): dP, then dS in place
  // The weights below are squared for their Cauchy–Schwarz norms, but dS's scale a_max b_max (>= |dP|,
  // ~ |D|) reaches 1e190 with finite gradients, whose square overflows: they are squared as
  // w 2^-w_exp (a power of two, exact wherever the result stays normal) and the norms scaled back by
  // 2^w_exp. Small scales stay unscaled (w_exp >= 0): the norms' underflow floor covers them.
  const int w_exp = a_max > 0 && b_max > 0 ? std::clamp(std::ilogb(a_max) + std::ilogb(b_max), 0, 1020) : 0;
  const double gam_qk = std::max(chunked_gamma(n), chunked_gamma(m));  // dS·K and dSᵀ·Q
  const double gam_v = chunked_gamma(m);                               // P̂ᵀ·d_o
  const DsRows rows{g, f, dp, big_d, err_d, gam_qk, gam_v, std::ldexp(1.0, -w_exp)};
  std::vector<double> w_row(m, 0.0), w_col(n, 0.0), wv_col(n, 0.0);  // sums of squared weights
  // Row blocks in parallel (reference/parallel.hpp); each keeps its own column sums, added in block
  // order below (sums of non-negative terms: any order is within kSlack).
  const Index blocks = (m + kRowBlock - 1) / kRowBlock;
  std::vector<std::vector<double>> part_w(static_cast<size_t>(blocks)),
      part_wv(static_cast<size_t>(blocks));  // each (n_k)
  parallel_for(blocks, [&](int64_t blk) {
    std::vector<double>& col_w = part_w[size_t(blk)];
    std::vector<double>& col_wv = part_wv[size_t(blk)];
    col_w.assign(size_t(n), 0.0), col_wv.assign(size_t(n), 0.0);
    for (Index r = blk * kRowBlock; r < std::min(m, (blk + 1) * kRowBlock); ++r)
      rows.row(ds, r, w_row[r], col_w, col_wv);
  });
  for (Index blk = 0; blk < blocks; ++blk)
    for (Index j = 0; j < n; ++j) w_col[j] += part_w[size_t(blk)][j], wv_col[j] += part_wv[size_t(blk)][j];

  GroupBwd bw;
  chunked_product(ds, g.k, bw.d_q);              // (m, d)
  chunked_product(ds.transpose(), g.q, bw.d_k);  // (n_k, d): GQA sum over the stacked heads
  chunked_product(f.p.transpose(), g.d_o, bw.d_v);
  bw.d_q *= g.scale;  // one rounding each: u|d_q|
  bw.d_k *= g.scale;
  gradient_errors(g, w_row, w_col, wv_col, w_exp, bw);
  return bw;
}

}  // namespace fc::ref::cert
