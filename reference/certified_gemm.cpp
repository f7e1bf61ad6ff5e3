// Ozaki-style error-free splitting for the certified oracle's two short inner products, S = Q·Kᵀ
// and dP = dO·Vᵀ (inner length d). Each row x of A is cut into slices x = x_1 + x_2 + ... + rest
// where slice a holds multiples of 2^(E - a·beta) of magnitude <= 2^(E - (a-1)·beta), E being the
// row's exponent (max |x| < 2^E). With beta_a + beta_b + ceil(log2 d) <= 53 every partial sum of a
// slice pair's dot product is an integer multiple of one power of two below 2^53 in magnitude, so
// an fp64 GEMM (any summation order) computes it exactly; the pairs are then summed in double-double.
// The widths need not be equal: fp32 inputs (24 bits plus their spread) fit one 30-bit slice of A
// against two 16-bit slices of B, two dense GEMMs instead of four (see choose_widths).
// Hand-written because no installed library offers error-free GEMM splitting.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <limits>
#include <tuple>

#include "reference/certified_internal.hpp"

namespace fc::ref::cert {
namespace {

constexpr int kMaxSlices = 4;

struct Slices {
  std::vector<Mat> s;                     // each (rows, d)
  std::vector<std::vector<double>> norm;  // per slice, per row: 2-norm
  std::vector<Index> nnz;                 // per slice: nonzero count
  std::vector<Index> row_nnz_max;         // per slice: most nonzeros in one row
  std::vector<double> rem_norm;           // (rows): 2-norm of what no slice took
  std::vector<double> full_norm;          // (rows): 2-norm of the row
  bool rem_nonzero = false;
};

// The 2-norm of a row without under- or overflow (Eigen's stableNorm scales before squaring): a plain
// sqrt(sum x^2) is 0 for a row below ~2^-537, and the bound terms built on it would vanish while
// the slices leave those rows' products to them (deep slices are skipped below 2^-1000).
double row_norm(const Mat& m, Index r) { return m.row(r).stableNorm(); }

Slices split(const Mat& a, int beta) {
  const Index rows = a.rows(), d = a.cols();
  Slices out;
  Mat rest = a;  // (rows, d): what the slices have not taken yet
  std::vector<int> e(rows, std::numeric_limits<int>::min());
  for (Index r = 0; r < rows; ++r) {
    const double mu = rest.row(r).cwiseAbs().maxCoeff();
    if (mu > 0) std::frexp(mu, &e[r]);  // mu < 2^e[r]
  }
  out.full_norm.resize(rows);
  for (Index r = 0; r < rows; ++r) out.full_norm[r] = row_norm(a, r);
  for (int k = 1; k <= kMaxSlices; ++k) {
    Mat slice = Mat::Zero(rows, d);  // (rows, d)
    Index nnz = 0, row_max = 0;
    bool left = false;
    for (Index r = 0; r < rows; ++r) {
      const Index before = nnz;
      if (e[r] == std::numeric_limits<int>::min()) continue;
      const int unit = e[r] - k * beta;
      if (unit < -1000) continue;  // deeper slices would underflow: leave the rest to the bound
      // sigma = 1.5·2^(unit+52) has ulp 2^unit, and |rest| < 2^(unit+51): x + sigma rounds x to a
      // multiple of 2^unit, and subtracting sigma back is exact (same binade).
      const double sigma = std::ldexp(1.5, unit + 52);
      for (Index l = 0; l < d; ++l) {
        const double x = rest(r, l);
        const double t = (x + sigma) - sigma;
        slice(r, l) = t;
        rest(r, l) = x - t;  // exact: |x - t| <= 2^(unit-1), a multiple of x's ulp
        nnz += (t != 0);
        left = left || rest(r, l) != 0;
      }
      row_max = std::max(row_max, nnz - before);
    }
    std::vector<double> n(rows);
    for (Index r = 0; r < rows; ++r) n[r] = row_norm(slice, r);
    out.s.push_back(std::move(slice));
    out.norm.push_back(std::move(n));
    out.nnz.push_back(nnz);
    out.row_nnz_max.push_back(row_max);
    if (!left) break;
  }
  out.rem_norm.resize(rows);
  for (Index r = 0; r < rows; ++r) {
    out.rem_norm[r] = row_norm(rest, r);
    out.rem_nonzero = out.rem_nonzero || out.rem_norm[r] > 0;
  }
  return out;
}

double max_of(const std::vector<double>& x) { return x.empty() ? 0.0 : *std::max_element(x.begin(), x.end()); }

enum class Method { Dense, SparseA, SparseB };

// Adds the exact term t to hi at (i, j); the rounding error goes to the low part *lo.
inline void accumulate(double& hi, double& lo, double t) {
  double s, e;
  two_sum(hi, t, s, e);
  hi = s;
  lo += e;
}

// Rows of a (m, n) result per parallel task: every task is the same computation whatever the
// thread count (reference/parallel.hpp).
constexpr Index kGemmRowBlock = 256;

// out = a·bᵀ (out sized by the caller) with its row blocks in parallel. Used for the exact slice
// products, whose value does not depend on how the rows are split.
void gemm_abt(Mat& out, const Mat& a, const Mat& b) {
  parallel_rows(a.rows(), kGemmRowBlock, [&](Index r0, Index r1) {
    out.middleRows(r0, r1 - r0).noalias() = a.middleRows(r0, r1 - r0) * b.transpose();
  });
}

// hi/lo += sa·sbᵀ for one slice pair (not the first), by the chosen method.
void add_pair(ExactProduct& p, const Mat& sa, const Mat& sb, Method method, Mat& scratch) {
  const Index m = sa.rows(), n = sb.rows(), d = sa.cols();
  if (method == Method::SparseA) {
    const Mat sbt = sb.transpose();  // (d, n): row l holds column l of sb contiguously
    parallel_rows(m, kGemmRowBlock, [&](Index i0, Index i1) {
      for (Index i = i0; i < i1; ++i)
        for (Index l = 0; l < d; ++l) {
          const double x = sa(i, l);
          if (x == 0) continue;
          double* hi = &p.hi(i, 0);
          double* lo = &p.lo_rows(p.row_slot[i], 0);
          const double* y = &sbt(l, 0);
          // One slice product at a time: each is exact, and (hi, lo) absorbs it error-free.
          for (Index j = 0; j < n; ++j) accumulate(hi[j], lo[j], x * y[j]);
        }
    });
  } else if (method == Method::SparseB) {
    struct Nz {
      Index j, l, slot;
      double y;
    };
    std::vector<Nz> nz;  // the sparse slice's nonzeros, visited row by row of the result
    for (Index j = 0; j < n; ++j)
      for (Index l = 0; l < d; ++l)
        if (sb(j, l) != 0) nz.push_back({j, l, p.col_slot[j], sb(j, l)});
    parallel_rows(m, kGemmRowBlock, [&](Index i0, Index i1) {
      for (Index i = i0; i < i1; ++i)
        for (const Nz& e : nz) accumulate(p.hi(i, e.j), p.lo_cols(i, e.slot), sa(i, e.l) * e.y);
    });
  } else if (p.lo.size() == 0) {
    // First dense pair after hi: its exact product goes straight into lo, then (hi, lo) is
    // renormalised by TwoSum, which is error-free: no scratch buffer needed.
    p.lo.resize(m, n);
    gemm_abt(p.lo, sa, sb);  // exact
    parallel_rows(m, kGemmRowBlock, [&](Index i0, Index i1) {
      for (Index i = i0; i < i1; ++i)
        for (Index j = 0; j < n; ++j) {
          double s, e;
          two_sum(p.hi(i, j), p.lo(i, j), s, e);
          p.hi(i, j) = s;
          p.lo(i, j) = e;
        }
    });
  } else {
    scratch.resize(m, n);       // (m, n): reused across dense pairs (fresh pages are costly)
    gemm_abt(scratch, sa, sb);  // exact
    parallel_rows(m, kGemmRowBlock, [&](Index i0, Index i1) {
      for (Index i = i0; i < i1; ++i)
        for (Index j = 0; j < n; ++j) accumulate(p.hi(i, j), p.lo(i, j), scratch(i, j));
    });
  }
}

// Rounds x >= 0 up to a float no smaller than 2^-60 (so float products of two stay normal).
float up_float(double x) {
  float f = float(std::max(x, 0x1p-60));
  if (double(f) < x) f = std::nextafter(f, INFINITY);
  return f;
}

// Per-row power-of-two scale: max |x_i| <= 2^e (1 for a zero row).
std::vector<double> row_scales(const Mat& a) {
  std::vector<double> s(size_t(a.rows()), 1.0);
  for (Index i = 0; i < a.rows(); ++i) {
    int e = 0;
    const double mu = a.row(i).cwiseAbs().maxCoeff();
    if (mu > 0) std::frexp(mu, &e);
    s[size_t(i)] = std::ldexp(1.0, e);
  }
  return s;
}

// Plain product with bound: |fl(a·bᵀ) - a·bᵀ| <= gamma(d) |a||b|ᵀ in any summation order; |a||b|ᵀ
// itself from a float GEMM on row-scaled inputs rounded up (every term >= 2^-120, no underflow), a
// sum of non-negative terms that is at least (1 - gamma_f(d)) of its exact value.
ExactProduct plain_abt(const Mat& a, const Mat& b) {
  const Index m = a.rows(), n = b.rows(), d = a.cols();
  ExactProduct p;
  p.row_slot.assign(size_t(m), -1);
  p.col_slot.assign(size_t(n), -1);
  p.hi.resize(m, n);
  // Not exact: each row block is one fixed computation, so the value is the same on any thread count.
  gemm_abt(p.hi, a, b);
  p.abs_row = row_scales(a);
  p.abs_col = row_scales(b);
  MatF af(m, d), bf(n, d);  // (m, d), (n, d): |a|, |b| scaled to [0, 1], rounded up
  for (Index i = 0; i < m; ++i)
    for (Index l = 0; l < d; ++l) af(i, l) = up_float(std::fabs(a(i, l)) / p.abs_row[size_t(i)]);
  for (Index j = 0; j < n; ++j)
    for (Index l = 0; l < d; ++l) bf(j, l) = up_float(std::fabs(b(j, l)) / p.abs_col[size_t(j)]);
  p.abs_f.resize(m, n);
  parallel_rows(m, kGemmRowBlock, [&](Index r0, Index r1) {
    p.abs_f.middleRows(r0, r1 - r0).noalias() = af.middleRows(r0, r1 - r0) * bf.transpose();
  });
  const double gamma_f = double(d) * 0x1p-24 / (1 - double(d) * 0x1p-24);
  p.abs_coef = gamma(double(d)) / (1 - gamma_f);
  p.floor = double(d) * 0x1p-1074;  // products below 2^-1022 round absolutely
  return p;
}

// Bits an entry needs below its row's exponent: E_row - (exponent of its lowest set bit). Returns
// the (1 - 1/32)-quantile over nonzero entries (entries beyond it go to sparse slices) and the max.
std::pair<int, int> bits_needed(const Mat& a) {
  std::vector<int> need;
  need.reserve(size_t(a.size()));
  for (Index i = 0; i < a.rows(); ++i) {
    int e_row = 0;
    const double mu = a.row(i).cwiseAbs().maxCoeff();
    if (mu == 0) continue;
    std::frexp(mu, &e_row);
    for (Index l = 0; l < a.cols(); ++l) {
      if (a(i, l) == 0) continue;
      int e = 0;
      const auto mant = uint64_t(std::fabs(std::ldexp(std::frexp(a(i, l), &e), 53)));  // exact integer
      need.push_back(e_row - (e - 53 + std::countr_zero(mant)));
    }
  }
  if (need.empty()) return {0, 0};
  const int top = *std::max_element(need.begin(), need.end());
  const size_t at = need.size() - 1 - need.size() / 32;
  std::nth_element(need.begin(), need.begin() + std::ptrdiff_t(at), need.end());
  return {need[at], top};
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Slice widths (beta_a, beta_b) with beta_a + beta_b = budget: the symmetric split, or one side
// taken whole in one slice when that means fewer dense slice pairs and no more remainder.
std::pair<int, int> choose_widths(const Mat& a, const Mat& b, int budget) {
  const int sym = budget / 2;
  const auto [qa, ma] = bits_needed(a);
  const auto [qb, mb] = bits_needed(b);
  // Structured bindings are captured by name (init-captures): clang before 16 cannot capture them.
  auto cost = [qa = qa, qb = qb](int wa, int wb) {
    return std::max(1, ceil_div(qa, wa)) * std::max(1, ceil_div(qb, wb));
  };
  auto covers = [&, ma = ma, mb = mb](int wa, int wb) {  // no remainder beyond the symmetric split's
    return std::min(ma, kMaxSlices * sym) <= kMaxSlices * wa && std::min(mb, kMaxSlices * sym) <= kMaxSlices * wb;
  };
  std::pair<int, int> best{sym, budget - sym};
  int best_cost = cost(sym, budget - sym);
  for (auto [wa, wb] : {std::pair{qa, budget - qa}, std::pair{budget - qb, qb}}) {
    if (wa < 8 || wb < 8 || !covers(wa, wb) || cost(wa, wb) >= best_cost) continue;
    best = {wa, wb};
    best_cost = cost(wa, wb);
  }
  return best;
}

struct SlicePair {
  int x, y;  // slice x of a, slice y of b
  Method method;
};

// The slice pairs worth a product, in order of decreasing magnitude 2^-(x·beta_a + y·beta_b), each
// with its method; the pairs below `neglect` become p's bound terms instead. sum_a (m), sum_b (n)
// gather the kept pairs' slice norms per row.
std::vector<SlicePair> plan_pairs(const Slices& sa, const Slices& sb, int beta_a, int beta_b, Index d, double neglect,
                                  ExactProduct& p, std::vector<double>& sum_a, std::vector<double>& sum_b) {
  const Index m = Index(sum_a.size()), n = Index(sum_b.size());
  std::vector<std::pair<int, int>> order;  // slice pairs by decreasing magnitude 2^-(x·beta_a + y·beta_b)
  for (int x = 0; x < int(sa.s.size()); ++x)
    for (int y = 0; y < int(sb.s.size()); ++y) order.push_back({x, y});
  std::stable_sort(order.begin(), order.end(), [beta_a, beta_b](auto l, auto r) {
    return l.first * beta_a + l.second * beta_b < r.first * beta_a + r.second * beta_b;
  });
  std::vector<SlicePair> pairs;  // in order of decreasing magnitude
  for (auto [x, y] : order) {
    if (sa.nnz[x] == 0 || sb.nnz[y] == 0) continue;
    if (max_of(sa.norm[x]) * max_of(sb.norm[y]) <= neglect) {  // Cauchy–Schwarz: |x_i·y_j| <= |x_i||y_j|
      p.term_a.push_back(sa.norm[x]);
      p.term_b.push_back(sb.norm[y]);
      continue;
    }
    Method method = Method::Dense;
    if (sa.nnz[x] * 16 <= m * d)
      method = Method::SparseA;
    else if (sb.nnz[y] * 16 <= n * d)
      method = Method::SparseB;
    pairs.push_back({x, y, method});
    for (Index i = 0; i < m; ++i) sum_a[i] += sa.norm[x][i];
    for (Index j = 0; j < n; ++j) sum_b[j] += sb.norm[y][j];
  }
  // The first pair (the largest) is a dense GEMM straight into hi; low parts are laid out for the rest.
  if (!pairs.empty()) pairs[0].method = Method::Dense;
  return pairs;
}

// The low parts' layout for every pair after the first: a row of lo_rows for each row of a that a
// sparse-A pair touches, a column of lo_cols for each row of b that a sparse-B pair touches.
void lay_out_low_parts(const std::vector<SlicePair>& pairs, const Slices& sa, const Slices& sb, Index m, Index n,
                       ExactProduct& p) {
  Index rows_touched = 0, cols_touched = 0;
  for (size_t t = 1; t < pairs.size(); ++t) {
    const SlicePair& q = pairs[t];
    if (q.method == Method::SparseA)
      for (Index i = 0; i < m; ++i)
        if (p.row_slot[i] < 0 && sa.s[q.x].row(i).any()) p.row_slot[i] = rows_touched++;
    if (q.method == Method::SparseB)
      for (Index j = 0; j < n; ++j)
        if (p.col_slot[j] < 0 && sb.s[q.y].row(j).any()) p.col_slot[j] = cols_touched++;
  }
  p.lo_rows = Mat::Zero(rows_touched, n);
  p.lo_cols = Mat::Zero(m, cols_touched);
  p.any_lo = pairs.size() > 1;
}

// The bound terms of what the slice products leave out: the slices' remainders, and the low parts'
// own roundings (sum_a, sum_b: the kept pairs' slice norms per row, from plan_pairs).
void remainder_terms(const std::vector<SlicePair>& pairs, const Slices& sa, const Slices& sb, std::vector<double> sum_a,
                     std::vector<double> sum_b, ExactProduct& p) {
  const Index m = Index(sum_a.size());
  if (sa.rem_nonzero) {  // |rest_a · bᵀ| <= |rest_a_i| |b_j|
    p.term_a.push_back(sa.rem_norm);
    p.term_b.push_back(sb.full_norm);
  }
  if (sb.rem_nonzero) {  // |(a - rest_a) · rest_bᵀ| <= (|a_i| + |rest_a_i|) |rest_b_j|
    std::vector<double> used(m);
    for (Index i = 0; i < m; ++i) used[i] = sa.full_norm[i] + sa.rem_norm[i];
    p.term_a.push_back(std::move(used));
    p.term_b.push_back(sb.rem_norm);
  }
  // Exact terms absorbed by one element's (hi, lo): 1 per dense pair, one per nonzero of the sparse
  // side's row for a sparse pair.
  double absorbed = 0;
  for (size_t t = 0; t < pairs.size(); ++t) {
    const SlicePair& q = pairs[t];
    absorbed += q.method == Method::Dense     ? 1.0
                : q.method == Method::SparseA ? double(sa.row_nnz_max[size_t(q.x)])
                                              : double(sb.row_nnz_max[size_t(q.y)]);
  }
  if (p.any_lo) {
    // K terms absorbed: every TwoSum error is <= u·sum|terms|, so |lo| <= K u sum|terms| and the K
    // roundings of lo += e cost <= K^2 u^2 sum|terms|; reading lo (lo_at: two more roundings) and
    // using it (scale·lo, hi + lo) at most as much again: 2 (K + 2)^2 u^2 sum|terms|, with
    // sum|terms| <= (sum_x |a_x,i|)(sum_y |b_y,j|) by Cauchy–Schwarz per pair.
    const double coef = 2 * (absorbed + 2) * (absorbed + 2) * kU * kU;
    for (auto& s : sum_a) s *= coef;
    p.term_a.push_back(std::move(sum_a));
    p.term_b.push_back(std::move(sum_b));
  }
}

}  // namespace

ExactProduct exact_abt(const Mat& a, const Mat& b, double neglect, bool allow_plain) {
  const Index m = a.rows(), n = b.rows(), d = a.cols();
  const int log2d = d <= 1 ? 0 : int(std::ceil(std::log2(double(d))));
  // beta_a + beta_b + log2d <= 53: slice dot products are exact
  int beta_a = 0, beta_b = 0;  // std::tie: see choose_widths
  std::tie(beta_a, beta_b) = choose_widths(a, b, 53 - log2d);
  const Slices sa = split(a, beta_a), sb = split(b, beta_b);
  ExactProduct p;
  p.row_slot.assign(m, -1);
  p.col_slot.assign(n, -1);
  std::vector<double> sum_a(m, 0.0), sum_b(n, 0.0);  // sum of slice norms per row
  const std::vector<SlicePair> pairs = plan_pairs(sa, sb, beta_a, beta_b, d, neglect, p, sum_a, sum_b);
  if (allow_plain &&
      std::count_if(pairs.begin(), pairs.end(), [](const SlicePair& q) { return q.method == Method::Dense; }) > 1)
    return plain_abt(a, b);
  lay_out_low_parts(pairs, sa, sb, m, n, p);
  if (pairs.empty()) p.hi = Mat::Zero(m, n);
  Mat scratch;  // one dense slice pair's product
  for (size_t t = 0; t < pairs.size(); ++t) {
    const SlicePair& q = pairs[t];
    if (t == 0 && q.method == Method::Dense) {
      p.hi.resize(m, n);
      gemm_abt(p.hi, sa.s[q.x], sb.s[q.y]);  // exact: see the file comment
    } else {
      add_pair(p, sa.s[q.x], sb.s[q.y], q.method, scratch);
    }
  }
  remainder_terms(pairs, sa, sb, std::move(sum_a), std::move(sum_b), p);
  // Slice products below 2^-1022 may round (gradual underflow): at most d·pairs·2^-1075 each.
  p.floor = double(d) * double(pairs.size() + 1) * 0x1p-1074;
  return p;
}

}  // namespace fc::ref::cert
