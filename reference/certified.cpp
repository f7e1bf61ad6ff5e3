// Certified oracle, forward of one group (certified_internal.hpp; certified_groups.cpp cuts a problem
// into groups). The maths of exact.cpp in float64, with a rigorous elementwise bound on the
// distance to the exact result:
//   scores   s = scale·q·kᵀ exactly as a double-double (Ozaki splitting, certified_gemm.cpp);
//   weights  p̃_j = exp(x_h)·(1 + x_l) with x = s_j - m split exactly by TwoSum, so the exponent
//            argument carries no magnitude-dependent error: every kept weight is e^(x_j + δ_j),
//            |δ_j| <= δ (score bound + libm + three roundings), whatever the score range;
//   l        compensated sum (Sum2); P̂ = p̃ · (1/l): |P̂ - P| <= κ P with κ = e^(2δ + θ + ...) - 1;
//   o        P̂·[V |V|] as a chunked GEMM: the same product gives o and o_mag = P̂|V|.
// Softcap and ALiBi transform the scores between the first two steps (certified_variants.cpp).
// Scope: finite inputs below 2^500 in magnitude. A row reached by a non-finite input (its q row or a
// k/v row it sees) is returned as NaN with an infinite bound: uncertified; a non-finite d_o row
// leaves the forward certified and makes only that row's d_q and the d_k, d_v of the keys it sees
// uncertified (certified_groups.cpp). A row that sees no key is o = 0, lse = -inf, d_q = 0 whatever
// its q and d_o hold.
#include <cmath>
#include <limits>

#include "reference/certified_internal.hpp"
#include "reference/parallel.hpp"

namespace fc::ref {
namespace cert {

namespace {

// Rows whose score bound eps exceeds this take the MPFR path (certified_mp.cpp; 1.4e-17: the
// exponentials' own error is 2^-51). Softcapped scores carry fp64's tanh (~2^-50 c): their rows
// take it only when that passes 2^-30.
constexpr double kMpAbove = 0x1p-56;
constexpr double kMpAboveCapped = 0x1p-30;
// Rows per parallel task of the forward's row loop.
constexpr Index kRowBlock = 64;

// Row r's scores scale·(hi + lo) as a double-double: the high parts in f.p, the low ones in sl (the
// keys before j0 and from nv on get weight 0); s_abs their largest magnitude. False when a score
// overflowed: the row is marked bad and makes no claim.
bool scaled_scores(const GroupIn& g, const ExactProduct& s, Index r, Index j0, Index nv, std::vector<double>& sl,
                   GroupFwd& f, double& s_abs) {
  const Index n = g.k.rows();
  bool finite = true;
  for (Index j = j0; j < nv; ++j) {
    const double hi = f.p(r, j), lo = s.any_lo ? s.lo_at(r, j) : 0.0;
    double sh, e1;
    two_prod(g.scale, hi, sh, e1);  // scale·hi = sh + e1 exactly
    sl[j] = e1 + g.scale * lo;      // two roundings, each <= u·2u|s|: charged 2^-100 |s| below
    f.p(r, j) = sh;
    finite = finite && std::isfinite(sh);
    s_abs = std::max(s_abs, std::fabs(sh));
  }
  for (Index j = 0; j < j0; ++j) f.p(r, j) = 0;
  if (!finite) {  // a score overflowed: no claim for this row
    f.bad[r] = 1;
    for (Index j = j0; j < nv; ++j) f.p(r, j) = 0;
    return false;
  }
  for (Index j = nv; j < n; ++j) f.p(r, j) = 0;
  return true;
}

// Score error of row r, uniform over its keys; softcap, then ALiBi, then the mask tensor and block
// mask (certified_variants.cpp) transform the scores in f.p and sl: the score error becomes the
// cap's, plus the biases'. A hidden key's score is -inf from here on.
double score_error(const GroupIn& g, const ExactProduct& s, const std::vector<double>& b_max, Index r, Index j0,
                   Index nv, double s_abs, std::vector<double>& sl, GroupFwd& f) {
  double eps = s.floor;
  for (size_t t = 0; t < s.term_a.size(); ++t) eps += s.term_a[t][r] * b_max[t];
  eps = (std::fabs(g.scale) * eps + 0x1p-100 * s_abs + 0x1p-1074) * kSlack;
  if (g.softcap > 0)
    eps = cap_row(g.softcap, j0, nv, eps, &f.p(r, 0), sl.data(), &f.g(r, 0), &f.g_rel[size_t(r)], &f.g_abs[size_t(r)]);
  if (!g.slope.empty()) eps += bias_row(g.slope[size_t(r)], g.aligned[size_t(r)], j0, nv, &f.p(r, 0), sl.data());
  if (g.bias.size()) eps += mask_row(&g.bias(r, 0), j0, nv, &f.p(r, 0), sl.data());
  return eps;
}

// A row's unnormalised weights' compensated sum l = l_s + l_c, the largest |x_l| and the number of
// weights dropped below e^-699.
struct WeightSum {
  double l_s = 0, l_c = 0, xl_max = 0, n_drop = 0;
};

// Row r's weights p̃_j = exp(x_h)·(1 + x_l), x = s_j - mx, in place in f.p (dropped ones 0). mp: f.p
// holds x_h and sl x_l already (the MPFR path).
WeightSum exp_weights(Index r, Index j0, Index nv, double mx, bool mp, const std::vector<double>& sl, GroupFwd& f) {
  WeightSum w;
  for (Index j = j0; j < nv; ++j) {
    if (hidden_score(f.p(r, j))) {  // a hidden key (mask tensor, block mask): weight exactly 0
      f.p(r, j) = 0;
      continue;
    }
    double xh, xe;
    if (mp) {
      xh = f.p(r, j);  // x = xh + sl[j] to within eps
      xe = 0;
    } else {
      two_sum(f.p(r, j), -mx, xh, xe);  // x = s - m = xh + xe exactly
    }
    if (xh < kDropBelow) {  // weight < e^-699: dropped, charged as an absolute term
      f.p(r, j) = 0;
      w.n_drop += 1;
      continue;
    }
    const double xl = xe + sl[j];                 // |xl| ~ u|x|: rounding u|xl|
    const double pj = std::exp(xh) * (1.0 + xl);  // e^xl = (1 + xl)(1 + O(xl^2))
    w.xl_max = std::max(w.xl_max, std::fabs(xl));
    double e;
    two_sum(w.l_s, pj, w.l_s, e);  // Sum2: l = sum p̃ with error u|l| + gamma(n)^2 l
    w.l_c += e;
    f.p(r, j) = pj;
  }
  return w;
}

// The sink's weight exp(xh)·(1 + xl) into the sum (it has no P̂ entry: no value); dropped below e^-699.
void add_sink_weight(double xh, double xl, WeightSum& w) {
  if (xh < kDropBelow) {
    w.n_drop += 1;
    return;
  }
  const double pj = std::exp(xh) * (1.0 + xl);
  w.xl_max = std::max(w.xl_max, std::fabs(xl));
  double e;
  two_sum(w.l_s, pj, w.l_s, e);
  w.l_c += e;
}

// Row r of the forward: scores to weights P̂ (in place in f.p), kappa, lse and its bound. sl is the
// caller's (n_k) scratch for the scores' low parts. A sink (finite) is one more weight of l, shifted
// by the same max, with no value: the sink is exact (an fp32 logit), its argument sink - m exact by
// TwoSum, so every bound below holds with one more term.
void forward_row(const GroupIn& g, const ExactProduct& s, const std::vector<double>& b_max, Index r,
                 std::vector<double>& sl, GroupFwd& f) {
  const Index n = g.k.rows();
  const Index j0 = g.first[size_t(r)], nv = g.key_end(r);  // visible keys: [j0, nv)

  double mx = -std::numeric_limits<double>::infinity(), s_abs = 0;
  const double sink = g.sink_of(r);
  const bool has_sink = std::isfinite(sink);
  if (!scaled_scores(g, s, r, j0, nv, sl, f, s_abs)) return;
  if (nv == j0) {  // empty row: o = 0, lse = the sink (-inf without one) exactly, no weight anywhere
    f.lse[r] = sink;
    return;
  }
  double eps = score_error(g, s, b_max, r, j0, nv, s_abs, sl, f);
  for (Index j = j0; j < nv; ++j) mx = std::max(mx, f.p(r, j));
  // Huge scores: the double-double bound grows like u^2 |s|, and past |s| ~ 2^44 the low parts
  // sl stop being small, so p̃ = exp(xh)(1 + xl) no longer approximates exp(xh + xl) (from
  // |s| ~ 2^53 on, xl reaches O(1) and the charged xl^2 term is not even a bound: λ > 1).
  // Such rows get their scores again in MPFR: then f.p holds xh and sl holds xl, with
  // x_j = s_j - s_max = xh + xl + (<= eps) and |xl| <= u|xh|. Other rows keep |xl| <= 2^-30 +
  // u·700, so xl^2 stays far below u.
  double mx_err = 0, sl_max = 0;
  for (Index j = j0; j < nv; ++j) sl_max = std::max(sl_max, std::fabs(sl[j]));
  const bool mp = !(eps <= (g.softcap > 0 ? kMpAboveCapped : kMpAbove)) || !(sl_max <= 0x1p-30);
  if (mp) {
    std::vector<double> err_x(size_t(n), 0.0);
    mx = mp_row(g, r, &f.p(r, 0), sl.data(), err_x.data(), &mx_err);
    if (!std::isfinite(mx)) {  // s_max overflows float64 after all: no claim
      f.bad[r] = 1;
      for (Index j = j0; j < nv; ++j) f.p(r, j) = 0;
      return;
    }
    eps = 0;
    for (double e : err_x) eps = std::max(eps, e);
    if (has_sink) {
      // x_j = s_j - s_max here, mx = round(s_max). A sink above mx becomes the reference (exact: lse =
      // sink + log l needs no mx_err): x_j + (mx - sink), TwoSum exact, the low parts' two more
      // roundings and mx_err charged to the keys, and none at all when every key's weight is dropped
      // (charged absolutely); the sink's own x is 0. Below mx, the sink's x = (sink - mx) + (mx -
      // s_max): TwoSum exact, mx_err charged when its weight is kept.
      if (sink > mx) {
        double th, tl, xl_max = 0;
        bool kept = false;
        two_sum(mx, -sink, th, tl);
        for (Index j = j0; j < nv; ++j) {
          if (hidden_score(f.p(r, j))) continue;
          double h2, e2;
          two_sum(f.p(r, j), th, h2, e2);
          f.p(r, j) = h2;
          sl[j] = sl[j] + tl + e2;
          xl_max = std::max(xl_max, std::fabs(sl[j]));
          kept = kept || h2 >= kDropBelow;
        }
        eps = kept ? eps + 2.01 * kU * xl_max + 1.01 * mx_err : 0.0;
        mx = sink, mx_err = 0;
      } else {
        double xh, xl;
        two_sum(sink, -mx, xh, xl);
        if (xh >= kDropBelow) eps += 1.01 * mx_err;
      }
    }
    eps *= kSlack;
  } else if (has_sink) {
    mx = std::max(mx, sink);  // every weight shifted by the larger of the scores' max and the sink
  }

  WeightSum w = exp_weights(r, j0, nv, mx, mp, sl, f);
  if (has_sink) {
    double xh, xl;
    two_sum(sink, -mx, xh, xl);  // exact; 0 when the sink is the reference
    add_sink_weight(xh, xl, w);
  }
  const double l = w.l_s + w.l_c;
  const double inv_l = 1.0 / l;
  for (Index j = j0; j < nv; ++j) f.p(r, j) *= inv_l;  // P̂ = p̃·(1/l): two roundings

  const double delta = eps + kU * w.xl_max + w.xl_max * w.xl_max + kLibmRel + 2.01 * kU;
  const double n_w = double(nv - j0) + (has_sink ? 1.0 : 0.0);  // the weights in l
  const double theta = kU + gamma(n_w) * gamma(n_w);
  const double tail = w.n_drop * 0x1p-1008;  // sum of dropped weights relative to l (l >= ~1)
  const double lambda = 2 * delta + 1.01 * theta + 1.01 * tail + 2.01 * kU;  // |log(P̂/P)|
  f.kappa[r] = lambda * (1 + lambda) * kSlack;                               // e^λ - 1 <= λ + λ^2 for λ <= 1
  f.dropped[r] = w.n_drop > 0 ? kDroppedWeight : 0.0;
  const double y = std::log(l);
  f.lse[r] = mx + y;
  f.lse_err[r] = (delta + 1.01 * theta + 1.01 * tail + kLibmRel * std::fabs(y) + kU * 1.01 * std::fabs(f.lse[r]) +
                  1.01 * mx_err + 0x1p-1074) *
                 kSlack;
}

}  // namespace

GroupFwd forward(const GroupIn& g) {
  const Index m = g.q.rows(), n = g.k.rows(), dv = g.v.cols();
  const double abs_scale = std::fabs(g.scale);
  // Neglect slice pairs only below 2^-60 in score units: far under the 6u of the exponentials.
  const double neglect = abs_scale == 0 ? std::numeric_limits<double>::infinity() : 0x1p-60 / abs_scale;
  ExactProduct s = exact_abt(g.q, g.k, neglect);
  std::vector<double> b_max(s.term_b.size(), 0.0);  // per bound term: max over keys
  for (size_t t = 0; t < s.term_b.size(); ++t)
    for (double x : s.term_b[t]) b_max[t] = std::max(b_max[t], x);

  GroupFwd f;
  f.bad = g.bad;
  f.p = std::move(s.hi);  // scores are turned into P̂ in place, row by row
  f.kappa.assign(m, 0.0);
  f.dropped.assign(m, 0.0);
  f.lse.assign(m, -std::numeric_limits<double>::infinity());
  f.lse_err.assign(m, 0.0);
  if (g.softcap > 0) {
    f.g = Mat::Zero(m, n);
    f.g_rel.assign(size_t(m), 0.0);
    f.g_abs.assign(size_t(m), 0.0);
  }
  // Rows are independent: blocks of kRowBlock rows run in parallel (reference/parallel.hpp).
  parallel_rows(m, kRowBlock, [&](Index r0, Index r1) {
    std::vector<double> sl(n);  // (n_k): low parts of one row of scores
    for (Index r = r0; r < r1; ++r) forward_row(g, s, b_max, r, sl, f);
  });

  Mat vv(n, 2 * dv);  // (n_k, 2 d_v): [V |V|]
  vv << g.v, g.v.cwiseAbs();
  Mat c;  // (m, 2 d_v): [P̂V  P̂|V|]
  chunked_product(f.p, vv, c);
  const double gam = chunked_gamma(n);
  Eigen::RowVectorXd v_max = g.v.cwiseAbs().colwise().maxCoeff();  // (d_v)
  f.o = c.leftCols(dv);
  f.o_mag = c.rightCols(dv);
  f.o_err.resize(m, dv);
  for (Index r = 0; r < m; ++r) {
    const double kp = f.kappa[r] * (1 + f.kappa[r]);  // |P̂ - P| <= κ(1+κ) P̂ on kept entries
    for (Index k = 0; k < dv; ++k) {
      const double mag = f.o_mag(r, k) / (1 - gam);  // >= P̂|V| exactly (non-negative sum)
      const double dropped = f.dropped[r] * double(n) * v_max(k);
      f.o_err(r, k) = ((kp + gam) * mag + dropped) * kSlack;
    }
  }
  return f;
}

}  // namespace cert
}  // namespace fc::ref
