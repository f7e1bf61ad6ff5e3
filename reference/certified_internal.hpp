// Internals of the certified oracle (certified.cpp, certified_gemm.cpp, certified_backward.cpp).
// Error model: u = 2^-53, every written operation rounds once (the library is compiled with
// -ffp-contract=off); gamma(n) = n u / (1 - n u) bounds n successive roundings (Higham, ASNA §3.1).
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "reference/matrix.hpp"
#include "reference/parallel.hpp"

namespace fc::ref::cert {

constexpr double kU = 0x1p-53;  // unit roundoff of float64
// Multiplies every finished bound: covers the rounding of the bound's own evaluation (sums of at
// most 2^20 non-negative terms, square roots, products: relative growth < 2^-32).
constexpr double kSlack = 1.0 + 0x1p-30;
// glibc's exp and log are documented below 1 ulp; we charge 2 ulp = 2^-51 relative.
constexpr double kLibmRel = 0x1p-51;
// Exponent arguments below this are dropped (weight set to 0): exp(-700) ~ 1e-304 is still normal,
// so every kept weight has full relative accuracy; a dropped weight is below exp(-699) after the
// argument's own error, which enters the bounds as an absolute term.
constexpr double kDropBelow = -700.0;
constexpr double kDroppedWeight = 0x1p-1008;  // > exp(-699) = 2^-1008.4
// Inputs must stay below 2^kMaxExp in magnitude: slice extraction, scores and dP then stay finite
// (|q·k| < d·2^1000); a row whose scores still overflow (|scale| > 2^16) is marked uncertified.
constexpr int kMaxExp = 500;
// Inner products are split into k-chunks of this length, summed chunk by chunk (see chunked_product).
constexpr Index kChunk = 256;

inline double gamma(double n) { return n * kU / (1.0 - n * kU); }

// Error-free transformations (Knuth's TwoSum; TwoProd through an explicit fma).
inline void two_sum(double a, double b, double& s, double& e) {
  s = a + b;
  const double bb = s - a;
  e = (a - (s - bb)) + (b - bb);
}
inline void two_prod(double a, double b, double& p, double& e) {
  p = a * b;
  e = std::fma(a, b, -p);
}

// c = a * b with the inner dimension cut into chunks of kChunk: each chunk product starts from zero
// (error <= gamma(kChunk) |a||b| whatever order Eigen sums in) and the chunks are added one by one,
// so |c - ab| <= chunked_gamma(inner) |a||b| elementwise instead of gamma(inner). Rows go in blocks
// so the chunk buffer stays in cache.
// The row blocks run in parallel (reference/parallel.hpp): each is the same computation whatever
// the thread count.
template <class A, class B>
void chunked_product(const A& a, const B& b, Mat& c) {
  c.setZero(a.rows(), b.cols());
  const Index row_block = 512;
  parallel_rows(a.rows(), row_block, [&](Index r0, Index r1) {
    const Index rn = r1 - r0;
    Mat tmp;  // (row block, b.cols()): one chunk's product
    for (Index k0 = 0; k0 < a.cols(); k0 += kChunk) {
      const Index kn = std::min(kChunk, a.cols() - k0);
      tmp.noalias() = a.block(r0, k0, rn, kn) * b.middleRows(k0, kn);
      c.middleRows(r0, rn) += tmp;
    }
  });
}
inline double chunked_gamma(Index inner) {
  const Index chunks = (inner + kChunk - 1) / kChunk;
  return gamma(double(std::min(inner, kChunk) + chunks));
}

// A·Bᵀ as an unevaluated double-double hi + lo, with a bound |A·Bᵀ - (hi + lo)|_ij <=
// sum_t a_t[i] b_t[j] (+ floor) as a short list of rank-one terms. lo is stored densely only when a
// dense slice pair needed it; sparse slice pairs touch a few rows (lo_rows) or columns (lo_cols).
struct ExactProduct {
  Mat hi;                       // (m, n)
  Mat lo;                       // (m, n) or empty
  Mat lo_rows, lo_cols;         // (rows touched, n), (m, columns touched)
  std::vector<Index> row_slot;  // (m): row of lo_rows, or -1
  std::vector<Index> col_slot;  // (n): column of lo_cols, or -1
  bool any_lo = false;
  std::vector<std::vector<double>> term_a;  // each (m)
  std::vector<std::vector<double>> term_b;  // each (n)
  double floor = 0;                         // absolute term (gradual underflow in slice products)
  // Plain mode (see exact_abt): hi = fl(A·Bᵀ) and the error is bounded elementwise by
  // abs_coef · abs_f(i, j) · abs_row[i] · abs_col[j] >= gamma(d) (|A||B|ᵀ)_ij.
  MatF abs_f;                   // (m, n) or empty
  std::vector<double> abs_row;  // (m)
  std::vector<double> abs_col;  // (n)
  double abs_coef = 0;
  // The low part at (i, j): its two roundings are inside the low-part bound term (exact_abt).
  double lo_at(Index i, Index j) const {
    double s = lo.size() ? lo(i, j) : 0.0;
    if (row_slot[i] >= 0) s += lo_rows(row_slot[i], j);
    if (col_slot[j] >= 0) s += lo_cols(i, col_slot[j]);
    return s;
  }
  double bound(Index i, Index j) const {
    double e = floor;
    for (size_t t = 0; t < term_a.size(); ++t) e += term_a[t][i] * term_b[t][j];
    if (abs_f.size()) e += abs_coef * double(abs_f(i, j)) * abs_row[i] * abs_col[j];
    return e * kSlack;
  }
};

// Ozaki-style splitting: A (m, d) and B (n, d) are cut row-wise into slices whose pairwise
// products are exact in an fp64 GEMM; pairs whose Cauchy–Schwarz bound is <= neglect are skipped
// (and enter the bound). Sparse slices use a sparse product. Rows must be finite, |x| < 2^kMaxExp.
// allow_plain: when exactness would take more than one dense GEMM (fp32/fp64 inputs), return the
// plain fp64 product with an elementwise bound gamma(d)|A||B|ᵀ instead (one fp64 + one fp32 GEMM):
// for callers whose error scale is |A||B|ᵀ itself (dP, whose natural scale is |d_o||v|).
ExactProduct exact_abt(const Mat& a, const Mat& b, double neglect, bool allow_plain = false);

// One (sequence, kv head) group: the g query heads that share the kv head, stacked row-wise
// (row r = local head · n_q + i), so GQA sums over heads fall out of the GEMMs. n_q, n_k are the
// sequence's own.
struct GroupIn {
  double scale = 1;
  double softcap = 0;          // c > 0: the score used is c·tanh(s/c) (before ALiBi and masking)
  Mat q, d_o;                  // (m, d), (m, d_v), m = g·n_q; d_o empty: forward only
  Mat k, v;                    // (n_k, d), (n_k, d_v)
  std::vector<Index> first;    // (m): row r sees keys [first[r], n_vis[r]) (mask and window: one range)
  std::vector<Index> n_vis;    // (m): the end of row r's visible keys
  std::vector<double> slope;   // (m): ALiBi slope of row r's head; empty: no ALiBi
  std::vector<Index> aligned;  // (m): row r's aligned row i' (ALiBi's bias is -slope·|i' - j|)
  std::vector<double> sink;    // (m): the sink logit of row r's head (finite or -inf); empty: no sinks
  // Contract v3's mask tensor and block mask (per_key_mask): key j's effect on row r, -inf where it
  // is hidden, else the additive value (0 for a boolean bit); empty without either. [first, n_vis)
  // is then the range from a row's first to its last visible key, hidden keys between them.
  Mat bias;                    // (m, n_k) or empty
  // Row r's sink, -inf when there is none.
  double sink_of(Index r) const { return sink.empty() ? -std::numeric_limits<double>::infinity() : sink[size_t(r)]; }
  std::vector<char> bad;      // (m): reached by a non-finite input: NaN, uncertified (bound +inf)
  std::vector<char> bad_d_o;  // (m): a non-finite d_o in a row that sees keys: its gradients only
  Index key_end(Index r) const { return bad[size_t(r)] ? first[size_t(r)] : n_vis[size_t(r)]; }
};

struct GroupFwd {
  std::vector<char> bad;             // (m): g.bad, or scores that overflowed: uncertified
  Mat p;                             // (m, n_k): P̂, 0 where masked or dropped
  std::vector<double> kappa;         // (m): |P̂ - P| <= kappa P on kept entries
  std::vector<double> dropped;       // (m): bound on the weight of dropped entries (absolute, each)
  Mat o, o_err, o_mag;               // (m, d_v)
  std::vector<double> lse, lse_err;  // (m)
  // Softcap only: ĝ_rj ~ sech²(s_rj / c), the derivative of the cap, with |ĝ - g| <= g_rel[r] ĝ + g_abs[r].
  Mat g;                             // (m, n_k) or empty
  std::vector<double> g_rel, g_abs;  // (m) or empty
};

struct GroupBwd {
  Mat d_q, d_q_err;  // (m, d)
  Mat d_k, d_k_err;  // (n_k, d)
  Mat d_v, d_v_err;  // (n_k, d_v)
};

GroupFwd forward(const GroupIn& g);

// Row r's scores in MPFR (certified_mp.cpp): for j in [first, key_end), xh[j] + xl[j] = s_j - s_max
// to within err_x[j] (absolute), softcap and ALiBi included; returns round(s_max) and sets
// *mx_err >= |s_max - round(s_max)|.
double mp_row(const GroupIn& g, Index r, double* xh, double* xl, double* err_x, double* mx_err);
// Softcap of one row's scores in place (certified_variants.cpp): on entry s_row[j] + sl[j] is the
// scaled score (error <= eps), on exit s_row[j] = fl(c·tanh(fl(s/c))) and sl[j] = 0; returns the
// bound on |s_row[j] - c·tanh(s_j/c)| over [j0, j1). g_row[j] gets ĝ ~ sech²(s_j/c) with
// |ĝ - g| <= *g_rel ĝ + *g_abs.
double cap_row(double c, Index j0, Index j1, double eps, double* s_row, double* sl, double* g_row, double* g_rel,
               double* g_abs);
// ALiBi: subtracts slope·|aligned - j| from the double-double (s_row[j], sl[j]) for j in [j0, j1);
// returns the bound on the roundings this adds.
double bias_row(double slope, Index aligned, Index j0, Index j1, double* s_row, double* sl);
// The mask tensor and block mask: for j in [j0, j1), a hidden key's score becomes -inf (sl[j] = 0:
// no weight, no error), an additive value (exact in fp32) is added to the double-double (s_row[j],
// sl[j]); returns the bound on the roundings this adds.
double mask_row(const double* bias, Index j0, Index j1, double* s_row, double* sl);
// A hidden key's score after mask_row (and in mp_row's xh): the weight is exactly 0.
inline bool hidden_score(double s) { return s == -std::numeric_limits<double>::infinity(); }
GroupBwd backward(const GroupIn& g, const GroupFwd& f);

}  // namespace fc::ref::cert
