// Exact oracle (exact.hpp, exact_mp.hpp): textbook attention, docs/SEMANTICS.md, in MPFR multiprecision.
// Nothing is clever here on purpose: scores (softcap through MPFR's tanh, ALiBi's bias exact),
// one softmax per row over its visible keys (mask and window), P·V, and the backward formulas
// written as sums, all at `bits` of precision, rounded to double once at the end. Every variant's
// layout is read through attention.h's q_row / kv_row / lse_index.
//
// Mask tensors and block masks (dense): a false bit or an additive -inf takes the key out of the row
// (live, as the built-in mask: its v is not read); an additive value joins the score after softcap
// and ALiBi, exactly.
// Attention sinks: the head's sink logit joins every row's denominator (max and l) with no value;
// lse includes it, and a row with no visible key has o = 0, lse = sink. The backward's formulas are
// unchanged (P from the softmax with the sink, D = d_o . o).
// Non-finite scores (they arise only from non-finite inputs):
//   NaN or +inf among a row's visible scores -> the whole row is NaN (o, lse, d_q, and the d_k/d_v
//   rows of the keys it sees): softmax is undefined there.
//   -inf scores carry weight exactly 0, like a masked key (their v still enters as 0·v_j, so a NaN
//   v_j poisons the row, as it would in any kernel).
//   A row whose visible scores are all -inf is an empty row: o = 0, lse = -inf, d_q = 0.
#include <boost/multiprecision/mpfr.hpp>
#include <cmath>
#include <limits>

#include "reference/exact.hpp"
#include "reference/exact_mp.hpp"
#include "reference/visibility.hpp"

namespace fc::ref {
namespace detail {

PrecisionGuard::PrecisionGuard(unsigned bits) : old_digits10_(mp::default_precision()) {
  // Boost counts precision in decimal digits; take enough that the binary precision is >= bits.
  mp::default_precision(static_cast<unsigned>(std::ceil(bits * 0.30103)) + 2);
}
PrecisionGuard::~PrecisionGuard() { mp::default_precision(old_digits10_); }

std::vector<mp> to_mp(const std::vector<double>& x) {
  std::vector<mp> y;  // same shape as x; every double is exact in mp
  y.reserve(x.size());
  for (double e : x) y.emplace_back(e);
  return y;
}

std::vector<double> to_double(const std::vector<mp>& x) {
  std::vector<double> y(x.size());  // same shape as x
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i].convert_to<double>();
  return y;
}

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Softmax of one row of scores over the entries with live[j]; fills p (0 where not live) and lse.
// sink (finite, or -inf: none) is one more logit of the denominator with no p entry of its own.
// Returns false for an empty row (nothing live, or every live score -inf): lse = sink (o = 0).
bool softmax_row(const std::vector<mp>& s, const std::vector<char>& live, std::vector<mp>& p, mp& lse,
                 double sink = -std::numeric_limits<double>::infinity()) {
  bool undefined = false, any = false;
  mp m;
  for (size_t j = 0; j < s.size(); ++j) {
    if (!live[j]) continue;
    if (boost::multiprecision::isnan(s[j]) || (boost::multiprecision::isinf(s[j]) && s[j] > 0)) {
      undefined = true;
    } else if (boost::multiprecision::isfinite(s[j]) && (!any || s[j] > m)) {
      m = s[j];
      any = true;
    }
  }
  for (auto& e : p) e = 0;
  if (undefined) {
    for (size_t j = 0; j < s.size(); ++j)
      if (live[j]) p[j] = kNaN;
    lse = kNaN;
    return true;
  }
  if (!any) {
    lse = sink;  // no key: the sink alone (-inf without one)
    return false;
  }
  const bool has_sink = std::isfinite(sink);
  if (has_sink && mp(sink) > m) m = sink;
  mp l = has_sink ? mp(exp(mp(sink) - m)) : mp(0);
  for (size_t j = 0; j < s.size(); ++j) {
    if (!live[j] || !boost::multiprecision::isfinite(s[j])) continue;  // -inf: weight exactly 0
    p[j] = exp(s[j] - m);  // shifted by the max: the exact softmax is shift-invariant
    l += p[j];
  }
  for (auto& e : p) e /= l;
  lse = m + log(l);
  return true;
}

}  // namespace

// Row i of sequence b, query head h: its scores (softcap and ALiBi applied), softmax, o, and its
// contributions to the gradients.
ResultMP exact_mp(const Problem& p, const TensorsMP& in) {
  // A batch without queries has an empty d_o whether or not gradients were asked: give them (zeros).
  const bool grads = !in.d_o.empty() || numel_o(p) == 0;
  const int64_t d = p.d, dv = head_dim_v(p);
  const Seqs seqs = in.seq.seqs();
  ResultMP r;
  r.o.assign(numel_o(p), mp(0));
  r.lse.assign(numel_lse(p), mp(0));
  if (grads) {
    r.d_q.assign(numel_q(p), mp(0));
    r.d_k.assign(numel_kv(p), mp(0));
    r.d_v.assign(numel_v(p), mp(0));
  }
  const mp scale(p.scale), cap(p.softcap);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t n_q = seq_n_q(p, seqs, b), n_k = seq_n_k(p, seqs, b);
    std::vector<mp> s(n_k), pr(n_k), slope_d(n_k);  // (n_k): one row of scores, of P, of d(softcap)/ds
    std::vector<char> live(n_k);                    // (n_k): visible keys of the row
    for (int32_t h = 0; h < p.heads_q; ++h) {
      const int32_t h_kv = kv_head(p, h);
      const mp slope(p.alibi ? in.seq.alibi_slopes[h] : 0.0);
      const double sink = p.sinks ? in.seq.sinks[size_t(h)] : -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < n_q; ++i) {
        const int64_t row = q_row(p, seqs, b, h, i), oq = row * d, oo = row * dv;
        for (int64_t j = 0; j < n_k; ++j) {
          live[j] = sees(p, i, j, n_q, n_k);
          if (!live[j]) continue;
          const int64_t ok = kv_row(p, seqs, b, h_kv, j) * d;
          mp dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += in.q[oq + c] * in.k[ok + c];
          s[j] = scale * dot;
          slope_d[j] = 1;
          if (p.softcap > 0) {  // c tanh(s/c) on the scaled score, before masking
            const mp y = s[j] / cap, ch = cosh(y);
            s[j] = cap * tanh(y);
            slope_d[j] = 1 / (ch * ch);  // sech²(y) = 1 - tanh²(y), without the cancellation at large |y|
          }
          if (p.alibi) s[j] -= slope * mp(std::abs(aligned(p.mask, i, n_q, n_k) - j));  // exact
          if (per_key_mask(p)) {  // the mask tensor and block mask: hidden, or the additive value (exact)
            const double bias = in.seq.bias(p, b, h, i, j);
            if (bias == -std::numeric_limits<double>::infinity())
              live[j] = 0;
            else
              s[j] += mp(bias);
          }
        }
        mp& lse = r.lse[lse_index(p, seqs, b, h, i)];
        if (!softmax_row(s, live, pr, lse, sink)) continue;  // empty row: o = 0, d_q = 0, no d_k/d_v
        for (int64_t j = 0; j < n_k; ++j) {
          if (!live[j]) continue;
          const int64_t ov = kv_row(p, seqs, b, h_kv, j) * dv;
          for (int64_t c = 0; c < dv; ++c) r.o[oo + c] += pr[j] * in.v[ov + c];
        }
        if (!grads) continue;
        mp big_d = 0;  // D_i = d_o_i . o_i
        for (int64_t c = 0; c < dv; ++c) big_d += in.d_o[oo + c] * r.o[oo + c];
        for (int64_t j = 0; j < n_k; ++j) {
          if (!live[j]) continue;
          const int64_t kr = kv_row(p, seqs, b, h_kv, j), ok = kr * d, ov = kr * dv;
          mp dp = 0;  // dP_ij = d_o_i . v_j
          for (int64_t c = 0; c < dv; ++c) dp += in.d_o[oo + c] * in.v[ov + c];
          // dS_ij = P_ij (dP_ij - D_i), times d(softcap)/ds: the gradient of the scaled score
          const mp ds = pr[j] * (dp - big_d) * slope_d[j];
          const mp scaled_ds = scale * ds;
          for (int64_t c = 0; c < d; ++c) {
            r.d_q[oq + c] += scaled_ds * in.k[ok + c];
            r.d_k[ok + c] += scaled_ds * in.q[oq + c];  // paged: repeated pages sum
          }
          for (int64_t c = 0; c < dv; ++c) r.d_v[ov + c] += pr[j] * in.d_o[oo + c];
        }
      }
    }
  }
  return r;
}

}  // namespace detail

Result64 exact(const Problem& p, const Tensors64& in, unsigned bits) {
  detail::PrecisionGuard guard(bits < 113 ? 113 : bits);
  detail::TensorsMP t{detail::to_mp(in.q), detail::to_mp(in.k), detail::to_mp(in.v), detail::to_mp(in.d_o), in.seq};
  const detail::ResultMP r = detail::exact_mp(p, t);
  return Result64{detail::to_double(r.o), detail::to_double(r.lse), detail::to_double(r.d_q), detail::to_double(r.d_k),
                  detail::to_double(r.d_v)};
}

// The softmax unit: softmax_row above on one row x of scores (every key live), at `bits`. O(n): the
// law that checks kernels' softmax rows calls it once per distinct row length. The test
// (exact_golden_test) holds it against exact() of the row as an attention problem (q = [1], k_j = x_j,
// scale 1, V the identity, so o is the softmax row).
SoftmaxRow exact_softmax_row(const std::vector<double>& x, unsigned bits) {
  detail::PrecisionGuard guard(bits < 113 ? 113 : bits);
  const std::vector<detail::mp> s = detail::to_mp(x);
  std::vector<detail::mp> pr(x.size());
  detail::mp lse;
  if (!x.empty()) detail::softmax_row(s, std::vector<char>(x.size(), 1), pr, lse);
  return {detail::to_double(pr), x.empty() ? -std::numeric_limits<double>::infinity() : lse.convert_to<double>()};
}

std::vector<double> exact_softmax(const std::vector<double>& x, unsigned bits) { return exact_softmax_row(x, bits).p; }

double exact_lse(const std::vector<double>& x, unsigned bits) { return exact_softmax_row(x, bits).lse; }

}  // namespace fc::ref
