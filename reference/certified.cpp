// Certified oracle, forward and orchestration (certified.hpp). The maths of exact.cpp in float64,
// with a rigorous elementwise bound on the distance to the exact result:
//   scores   s = scale·q·kᵀ exactly as a double-double (Ozaki splitting, certified_gemm.cpp);
//   weights  p̃_j = exp(x_h)·(1 + x_l) with x = s_j - m split exactly by TwoSum, so the exponent
//            argument carries no magnitude-dependent error: every kept weight is e^(x_j + δ_j),
//            |δ_j| <= δ (score bound + libm + three roundings), whatever the score range;
//   l        compensated sum (Sum2); P̂ = p̃ · (1/l): |P̂ - P| <= κ P with κ = e^(2δ + θ + ...) - 1;
//   o        P̂·[V |V|] as a chunked GEMM: the same product gives o and o_mag = P̂|V|.
// Scope: finite inputs below 2^500 in magnitude. A row reached by a non-finite input (its q row or a
// k/v row it sees) is returned as NaN with an infinite bound: uncertified; a non-finite d_o row
// leaves the forward certified and makes only that row's d_q and the d_k, d_v of the keys it sees
// uncertified. A row that sees no key is o = 0, lse = -inf, d_q = 0 whatever its q and d_o hold.
#include <mpfr.h>

#include <cmath>
#include <limits>

#include "reference/certified.hpp"
#include "reference/certified_internal.hpp"
#include "reference/parallel.hpp"
#include "reference/visibility.hpp"

namespace fc::ref {
namespace cert {

namespace {

// Rows whose double-double score bound is too coarse for the exponentials (huge scores: the
// low-part terms grow like u^2 |s|, 1e-12 at |s| = 1e18) get their scores again in MPFR at
// kMpBits bits, and x_j = s_j - s_max there, before rounding x_j to xh + xl. Every MPFR operation
// rounds once with relative error <= 2^-kMpBits (no underflow or overflow in MPFR's exponent range).
constexpr mpfr_prec_t kMpBits = 256;
// Rows whose score bound eps exceeds this take the MPFR path (1.4e-17: the exponentials' own
// error is 2^-51).
constexpr double kMpAbove = 0x1p-56;
// Rows per parallel task of the forward's row loop.
constexpr Index kRowBlock = 64;

class Mp {
 public:
  Mp() { mpfr_init2(x_, kMpBits); }
  ~Mp() { mpfr_clear(x_); }
  Mp(const Mp&) = delete;
  Mp& operator=(const Mp&) = delete;
  mpfr_ptr get() { return x_; }

 private:
  mpfr_t x_;
};

// Row r of the scores in MPFR: xh[j] + xl[j] = s_j - s_max to within err_x[j] (absolute), for
// j < nv; returns round(s_max) (to nearest) and sets *mx_err >= |s_max - round(s_max)|.
// Error of s_j = scale·sum_l q_l k_l: d products, d - 1 sums and the scale product each round
// once, so |s_j - ŝ_j| <= gamma_mp(2d + 1) |scale| sum_l |q_l k_l| with gamma_mp(n) <= 2n·2^-kMpBits.
double mp_row(const GroupIn& g, Index r, Index nv, double* xh, double* xl, double* err_x, double* mx_err) {
  const Index d = g.q.cols();
  std::vector<Mp> s(static_cast<size_t>(nv));
  std::vector<double> err_s(static_cast<size_t>(nv));
  Mp t, mx;
  const double gam_mp = 2.0 * double(2 * d + 4) * std::ldexp(1.0, -int(kMpBits));
  Index arg = 0;
  for (Index j = 0; j < nv; ++j) {
    mpfr_ptr sj = s[size_t(j)].get();
    mpfr_set_zero(sj, 1);
    double abs_sum = 0;  // sum_l |q_l k_l|, rounded: enlarged by (1 + 2 gamma(d + 1)) below
    for (Index l = 0; l < d; ++l) {
      mpfr_set_d(t.get(), g.q(r, l), MPFR_RNDN);  // exact
      mpfr_mul_d(t.get(), t.get(), g.k(j, l), MPFR_RNDN);
      mpfr_add(sj, sj, t.get(), MPFR_RNDN);
      abs_sum += std::fabs(g.q(r, l)) * std::fabs(g.k(j, l));  // < 2^1001: finite
    }
    mpfr_mul_d(sj, sj, g.scale, MPFR_RNDN);
    // abs_sum's own products may underflow: + d·2^-1074 before enlarging.
    err_s[size_t(j)] = gam_mp * std::fabs(g.scale) * (abs_sum + double(d) * 0x1p-1074) * (1 + 2 * gamma(double(d + 1)));
    if (j == 0 || mpfr_cmp(sj, s[size_t(arg)].get()) > 0) arg = j;
  }
  mpfr_set(mx.get(), s[size_t(arg)].get(), MPFR_RNDN);  // exact (same precision)
  const double mx_d = mpfr_get_d(mx.get(), MPFR_RNDN);
  // |s_max - round(s_max)| <= u |round(s_max)| (or 0 when it is exact); inf if it overflowed.
  *mx_err = kU * std::fabs(mx_d);
  for (Index j = 0; j < nv; ++j) {
    mpfr_sub(t.get(), s[size_t(j)].get(), mx.get(), MPFR_RNDN);  // x_j: one rounding
    const double h = mpfr_get_d(t.get(), MPFR_RNDN);
    const double ax = std::fabs(h) * (1 + 2 * kU) + 0x1p-1074;  // >= |x_j| up to 2^-kMpBits
    mpfr_sub_d(t.get(), t.get(), h, MPFR_RNDN);                 // rest: one rounding
    const double lo = mpfr_get_d(t.get(), MPFR_RNDN);           // |error| <= u|lo| + 2^-1074
    xh[j] = h;
    xl[j] = lo;
    // Errors of s_j and s_max, the two MPFR roundings (relative to |x_j|), and lo's rounding
    // (charged in forward's delta as kU·xl_max, plus the subnormal floor here).
    err_x[j] = err_s[size_t(j)] + err_s[size_t(arg)] + 4 * std::ldexp(1.0, -int(kMpBits)) * ax + 0x1p-1073;
  }
  return mx_d;
}

// Row r of the forward: scores to weights P̂ (in place in f.p), kappa, lse and its bound. sl is the
// caller's (n_k) scratch for the scores' low parts.
void forward_row(const GroupIn& g, const ExactProduct& s, const std::vector<double>& b_max, Index r,
                 std::vector<double>& sl, GroupFwd& f) {
  const Index n = g.k.rows();
  const double abs_scale = std::fabs(g.scale);
  const Index nv = g.bad[r] ? 0 : g.n_vis[r];

  double mx = -std::numeric_limits<double>::infinity(), s_abs = 0;
  bool finite = true;
  for (Index j = 0; j < nv; ++j) {
    const double hi = f.p(r, j), lo = s.any_lo ? s.lo_at(r, j) : 0.0;
    double sh, e1;
    two_prod(g.scale, hi, sh, e1);  // scale·hi = sh + e1 exactly
    sl[j] = e1 + g.scale * lo;      // two roundings, each <= u·2u|s|: charged 2^-100 |s| below
    f.p(r, j) = sh;
    mx = std::max(mx, sh);
    finite = finite && std::isfinite(sh);
    s_abs = std::max(s_abs, std::fabs(sh));
  }
  if (!finite) {  // a score overflowed: no claim for this row
    f.bad[r] = 1;
    for (Index j = 0; j < nv; ++j) f.p(r, j) = 0;
    return;
  }
  for (Index j = nv; j < n; ++j) f.p(r, j) = 0;
  if (nv == 0) return;  // empty row: o = 0, lse = -inf, no weight anywhere
  // Score error of this row, uniform over its keys.
  double eps = s.floor;
  for (size_t t = 0; t < s.term_a.size(); ++t) eps += s.term_a[t][r] * b_max[t];
  eps = (abs_scale * eps + 0x1p-100 * s_abs + 0x1p-1074) * kSlack;
  // Huge scores: the double-double bound grows like u^2 |s|, and past |s| ~ 2^44 the low parts
  // sl stop being small, so p̃ = exp(xh)(1 + xl) no longer approximates exp(xh + xl) (from
  // |s| ~ 2^53 on, xl reaches O(1) and the charged xl^2 term is not even a bound: λ > 1).
  // Such rows get their scores again in MPFR: then f.p holds xh and sl holds xl, with
  // x_j = s_j - s_max = xh + xl + (<= eps) and |xl| <= u|xh|. Other rows keep |xl| <= 2^-30 +
  // u·700, so xl^2 stays far below u.
  double mx_err = 0, sl_max = 0;
  for (Index j = 0; j < nv; ++j) sl_max = std::max(sl_max, std::fabs(sl[j]));
  const bool mp = !(eps <= kMpAbove) || !(sl_max <= 0x1p-30);
  if (mp) {
    std::vector<double> err_x(size_t(nv), 0.0);
    mx = mp_row(g, r, nv, &f.p(r, 0), sl.data(), err_x.data(), &mx_err);
    if (!std::isfinite(mx)) {  // s_max overflows float64 after all: no claim
      f.bad[r] = 1;
      for (Index j = 0; j < nv; ++j) f.p(r, j) = 0;
      return;
    }
    eps = 0;
    for (double e : err_x) eps = std::max(eps, e);
    eps *= kSlack;
  }

  double l_s = 0, l_c = 0, xl_max = 0, n_drop = 0;
  for (Index j = 0; j < nv; ++j) {
    double xh, xe;
    if (mp) {
      xh = f.p(r, j);  // x = xh + sl[j] to within eps
      xe = 0;
    } else {
      two_sum(f.p(r, j), -mx, xh, xe);  // x = s - m = xh + xe exactly
    }
    if (xh < kDropBelow) {  // weight < e^-699: dropped, charged as an absolute term
      f.p(r, j) = 0;
      n_drop += 1;
      continue;
    }
    const double xl = xe + sl[j];                 // |xl| ~ u|x|: rounding u|xl|
    const double pj = std::exp(xh) * (1.0 + xl);  // e^xl = (1 + xl)(1 + O(xl^2))
    xl_max = std::max(xl_max, std::fabs(xl));
    double e;
    two_sum(l_s, pj, l_s, e);  // Sum2: l = sum p̃ with error u|l| + gamma(n)^2 l
    l_c += e;
    f.p(r, j) = pj;
  }
  const double l = l_s + l_c;
  const double inv_l = 1.0 / l;
  for (Index j = 0; j < nv; ++j) f.p(r, j) *= inv_l;  // P̂ = p̃·(1/l): two roundings

  const double delta = eps + kU * xl_max + xl_max * xl_max + kLibmRel + 2.01 * kU;
  const double theta = kU + gamma(double(nv)) * gamma(double(nv));
  const double tail = n_drop * 0x1p-1008;  // sum of dropped weights relative to l (l >= ~1)
  const double lambda = 2 * delta + 1.01 * theta + 1.01 * tail + 2.01 * kU;  // |log(P̂/P)|
  f.kappa[r] = lambda * (1 + lambda) * kSlack;                               // e^λ - 1 <= λ + λ^2 for λ <= 1
  f.dropped[r] = n_drop > 0 ? kDroppedWeight : 0.0;
  const double y = std::log(l);
  f.lse[r] = mx + y;
  f.lse_err[r] = (delta + 1.01 * theta + 1.01 * tail + kLibmRel * std::fabs(y) + kU * 1.01 * std::fabs(f.lse[r]) +
                  1.01 * mx_err + 0x1p-1074) *
                 kSlack;
}

}  // namespace

GroupFwd forward(const GroupIn& g) {
  const Index m = g.q.rows(), n = g.k.rows(), d = g.q.cols();
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
  // Rows are independent: blocks of kRowBlock rows run in parallel (reference/parallel.hpp).
  parallel_rows(m, kRowBlock, [&](Index r0, Index r1) {
    std::vector<double> sl(n);  // (n_k): low parts of one row of scores
    for (Index r = r0; r < r1; ++r) forward_row(g, s, b_max, r, sl, f);
  });

  Mat vv(n, 2 * d);  // (n_k, 2d): [V |V|]
  vv << g.v, g.v.cwiseAbs();
  Mat c;  // (m, 2d): [P̂V  P̂|V|]
  chunked_product(f.p, vv, c);
  const double gam = chunked_gamma(n);
  Eigen::RowVectorXd v_max = g.v.cwiseAbs().colwise().maxCoeff();  // (d)
  f.o = c.leftCols(d);
  f.o_mag = c.rightCols(d);
  f.o_err.resize(m, d);
  for (Index r = 0; r < m; ++r) {
    const double kp = f.kappa[r] * (1 + f.kappa[r]);  // |P̂ - P| <= κ(1+κ) P̂ on kept entries
    for (Index k = 0; k < d; ++k) {
      const double mag = f.o_mag(r, k) / (1 - gam);  // >= P̂|V| exactly (non-negative sum)
      const double dropped = f.dropped[r] * double(n) * v_max(k);
      f.o_err(r, k) = ((kp + gam) * mag + dropped) * kSlack;
    }
  }
  return f;
}

}  // namespace cert

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Groups whose (m, n_k) matrices hold at most this many elements (32 MiB each) run in parallel.
constexpr double kParallelGroupElems = 1 << 22;
// Problems below this many multiply-adds of S = q kᵀ (n_q·heads·n_k·d) run on one thread.
constexpr double kParallelWork = 1 << 24;

bool certifiable(double x) { return std::isfinite(x) && std::fabs(x) < std::ldexp(1.0, cert::kMaxExp); }

// The rows of one (batch b, kv head h_kv) group as the oracle's input: the group's query heads stacked
// (m = group·n_q rows), what each row sees, which rows hold an uncertifiable value (g.bad) and which
// only an uncertifiable d_o (bad_d_o: their gradients, not their forward, are given up).
cert::GroupIn gather_group(const Problem& p, const Tensors64& in, int64_t b, int32_t h_kv, std::vector<char>& bad_d_o) {
  using cert::Index;
  const bool grads = !in.d_o.empty();
  const Index d = p.d, n = p.n_k, group = p.heads_q / p.heads_kv, m = group * p.n_q;
  cert::GroupIn g;
  g.scale = p.scale;
  g.q.resize(m, d);
  g.k.resize(n, d);
  g.v.resize(n, d);
  if (grads) g.d_o.resize(m, d);
  g.n_vis.assign(m, 0);
  g.bad.assign(m, 0);
  bad_d_o.assign(m, 0);             // (m)
  std::vector<char> bad_key(n, 0);  // (n_k)
  for (Index j = 0; j < n; ++j)
    for (Index l = 0; l < d; ++l) {
      const int64_t o = offset_kv(p, b, h_kv, j) + l;
      const bool ok = certifiable(in.k[o]) && certifiable(in.v[o]);
      bad_key[j] |= !ok;
      g.k(j, l) = ok ? in.k[o] : 0.0;
      g.v(j, l) = ok ? in.v[o] : 0.0;
    }
  for (Index r = 0; r < m; ++r) {
    const int32_t h = int32_t(h_kv * group + r / p.n_q);
    const int64_t i = r % p.n_q, oq = offset_q(p, b, h, i);
    Index nv = 0;
    while (nv < n && sees(p.mask, i, nv, p.n_q, p.n_k)) ++nv;
    g.n_vis[r] = nv;
    for (Index j = 0; j < nv; ++j) g.bad[r] |= bad_key[j];
    for (Index l = 0; l < d; ++l) {
      // q reaches the forward and the backward, d_o only the backward; a row that sees no key has
      // o = 0, lse = -inf and d_q = 0 whatever its q and d_o hold (the contract: never NaN there).
      const bool q_ok = certifiable(in.q[oq + l]);
      const bool d_o_ok = !grads || certifiable(in.d_o[oq + l]);
      g.bad[r] |= !q_ok && nv > 0;
      bad_d_o[r] |= !d_o_ok && nv > 0;
      g.q(r, l) = q_ok ? in.q[oq + l] : 0.0;
      if (grads) g.d_o(r, l) = d_o_ok ? in.d_o[oq + l] : 0.0;
    }
  }
  return g;
}

// The group's rows of o, lse (and d_q with gradients) into c: NaN with an infinite error where the
// row is uncertified.
void scatter_rows(const Problem& p, int64_t b, int32_t h_kv, const cert::GroupFwd& f, const cert::GroupBwd* bw,
                  const std::vector<char>& bad_d_o, Certified& c) {
  using cert::Index;
  const Index d = p.d, group = p.heads_q / p.heads_kv, m = group * p.n_q;
  for (Index r = 0; r < m; ++r) {
    const int32_t h = int32_t(h_kv * group + r / p.n_q);
    const int64_t i = r % p.n_q, oq = offset_q(p, b, h, i), ol = offset_lse(p, b, h, i);
    const bool bad = f.bad[r];
    c.value.lse[ol] = bad ? kNaN : f.lse[r];
    c.err.lse[ol] = bad ? kInf : f.lse_err[r];
    for (Index l = 0; l < d; ++l) {
      c.value.o[oq + l] = bad ? kNaN : f.o(r, l);
      c.err.o[oq + l] = bad ? kInf : f.o_err(r, l);
      c.o_mag[oq + l] = bad ? kNaN : f.o_mag(r, l);
      if (!bw) continue;
      const bool bad_grad = bad || bad_d_o[r];
      c.value.d_q[oq + l] = bad_grad ? kNaN : bw->d_q(r, l);
      c.err.d_q[oq + l] = bad_grad ? kInf : bw->d_q_err(r, l);
    }
  }
}

// The group's d_k and d_v into c: NaN with an infinite error for every key an uncertified row sees.
void scatter_keys(const Problem& p, int64_t b, int32_t h_kv, const cert::GroupIn& g, const cert::GroupFwd& f,
                  const cert::GroupBwd& bw, const std::vector<char>& bad_d_o, Certified& c) {
  using cert::Index;
  const Index d = p.d, n = p.n_k, m = g.q.rows();
  std::vector<char> poisoned(n, 0);  // (n_k): keys seen by an uncertified row
  for (Index r = 0; r < m; ++r)
    if (f.bad[r] || bad_d_o[r])
      for (Index j = 0; j < g.n_vis[r]; ++j) poisoned[j] = 1;
  for (Index j = 0; j < n; ++j) {
    const int64_t ok = offset_kv(p, b, h_kv, j);
    for (Index l = 0; l < d; ++l) {
      c.value.d_k[ok + l] = poisoned[j] ? kNaN : bw.d_k(j, l);
      c.err.d_k[ok + l] = poisoned[j] ? kInf : bw.d_k_err(j, l);
      c.value.d_v[ok + l] = poisoned[j] ? kNaN : bw.d_v(j, l);
      c.err.d_v[ok + l] = poisoned[j] ? kInf : bw.d_v_err(j, l);
    }
  }
}

}  // namespace

Certified certified(const Problem& p, const Tensors64& in) {
  const bool grads = !in.d_o.empty();
  const int64_t n = p.n_k, m = int64_t(p.heads_q / p.heads_kv) * p.n_q;
  Certified c;
  for (Result64* r : {&c.value, &c.err}) {
    r->o.assign(numel_q(p), 0.0);
    r->lse.assign(numel_lse(p), 0.0);
    if (grads) {
      r->d_q.assign(numel_q(p), 0.0);
      r->d_k.assign(numel_kv(p), 0.0);
      r->d_v.assign(numel_kv(p), 0.0);
    }
  }
  c.o_mag.assign(numel_q(p), 0.0);
  // Below ~2^24 multiply-adds the whole oracle takes milliseconds: no threads.
  const SerialScope small(double(numel_q(p)) * double(n) < kParallelWork);
  // One task per (batch, kv head) group, each writing its own rows of c.
  auto one_group = [&](int64_t task) {
    const int64_t b = task / p.heads_kv;
    const int32_t h_kv = int32_t(task % p.heads_kv);
    std::vector<char> bad_d_o;  // (m): a non-finite d_o in a row that sees keys: gradients only
    const cert::GroupIn g = gather_group(p, in, b, h_kv, bad_d_o);
    const cert::GroupFwd f = cert::forward(g);
    if (!grads) {
      scatter_rows(p, b, h_kv, f, nullptr, bad_d_o, c);
      return;
    }
    const cert::GroupBwd bw = cert::backward(g, f);
    scatter_rows(p, b, h_kv, f, &bw, bad_d_o, c);
    scatter_keys(p, b, h_kv, g, f, bw, bad_d_o, c);
  };
  // Small groups run side by side; large ones one after another, each parallel inside (their
  // (m, n_k) matrices would not fit in memory many at a time).
  const int64_t groups = p.batch * p.heads_kv;
  if (double(m) * double(n) <= kParallelGroupElems)
    parallel_for(groups, one_group);
  else
    for (int64_t t = 0; t < groups; ++t) one_group(t);
  return c;
}

}  // namespace fc::ref
