// The error model (docs/ERROR_MODEL.md), element by element. Derivation and the meaning of every term:
// reports/ERROR_MODEL.md. Notation follows it: s scores, a = |scale| |q||k|^T their condition,
// m the row max, M the largest |s| of the row, T the KV tiles a row visits, Bc = kBlockN,
// u the accumulation unit (Precision::u_acc), u_p P's storage unit, u_out the output's.
// Magnitudes (P, dP, D, dS) are recomputed here in fp64 from the inputs and the certified lse; they
// only scale error terms, so their own ~1e-16 relative error is second order.
#include "bounds.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fc::ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// exp argument: s and m are each rounded once on the way in (e.g. times log2 e) plus the
// subtraction -> at most 2 u (|s| + |m|).
constexpr double kArgRoundings = 2;
// exp/exp2 evaluation: <= 2 ulp (glibc expf, CUDA ex2.approx) = 4 u with u half an ulp.
constexpr double kExpUnits = 4;

// gamma_n = n u / (1 - n u): n chained roundings (Higham, Accuracy and Stability, §3.1); infinite
// (a vacuous bound that says so) once n u >= 1.
double gamma(double n, double u) {
  const double nu = n * u;
  return nu < 1 ? nu / (1 - nu) : kInf;
}

double at(const std::vector<double>& v, int64_t i) { return v.empty() ? 0.0 : v[size_t(i)]; }

// A factor times a magnitude, where a zero magnitude contributes nothing even when the factor has
// overflowed (a vacuous inf * 0 must not become a NaN bound).
double times(double factor, double magnitude) { return magnitude == 0 ? 0.0 : factor * magnitude; }

}  // namespace

double unit_roundoff(DType t) {
  switch (t) {
    case DType::F16: return 0x1p-11;
    case DType::BF16: return 0x1p-8;
    case DType::F32: return 0x1p-24;
    case DType::F64: return 0x1p-53;
    case DType::I32: break;  // an index dtype, never a problem's storage
  }
  return 1;
}

double underflow_floor(DType t) {
  switch (t) {
    case DType::F16: return 0x1p-25;
    case DType::BF16: return 0x1p-134;
    case DType::F32: return 0x1p-150;
    case DType::F64: return std::numeric_limits<double>::denorm_min();  // 2^-1075 is not a double
    case DType::I32: break;
  }
  return 1;
}

double min_normal(DType t) {
  switch (t) {
    case DType::F16: return 0x1p-14;
    case DType::BF16:
    case DType::F32: return 0x1p-126;
    case DType::F64: return 0x1p-1022;
    case DType::I32: break;
  }
  return 1;
}

Bounds error_bounds(const Problem& p, const Tensors64& in, const Certified& ref, const Precision& prec) {
  const int64_t d = p.d, n_q = p.n_q, n_k = p.n_k, group = p.heads_q / p.heads_kv;
  const double u = prec.u_acc, u_out = unit_roundoff(prec.storage), u_p = unit_roundoff(prec.p_dtype);
  const double u32 = unit_roundoff(DType::F32);  // lse is stored as float32 whatever the storage
  // S rounded to a type coarser than the accumulator (a baseline materialising S in fp16/bf16).
  const double u_sx = unit_roundoff(prec.s_dtype) > u ? unit_roundoff(prec.s_dtype) : 0.0;
  // Absolute floor of a rounded weight: P's subnormal spacing, plus exp's own fp32 underflow; with
  // flush-to-zero arithmetic anything below the smallest normal may become 0.
  const bool ftz = prec.flush_subnormals;
  auto floor_of = [ftz](DType t) { return ftz ? min_normal(t) : underflow_floor(t); };
  const double tiny_p = floor_of(prec.p_dtype) + floor_of(DType::F32);
  const double tiny_out = underflow_floor(prec.storage) + (ftz ? min_normal(DType::F32) : 0.0);
  // Each product accumulated may underflow: an absolute error of the accumulator's subnormal floor.
  const double acc_floor = floor_of(u >= 0x1p-12 ? DType::F16 : u >= 0x1p-25 ? DType::F32 : DType::F64);
  const double l_round = prec.l_sums_rounded_p ? u_p : 0.0;  // relative error of l from P's rounding
  const double u_pl = u_p + l_round;                         // output rounding below the normal range
  const double scale = std::fabs(p.scale);
  const int64_t bc = prec.block_n > 0 ? std::min<int64_t>(prec.block_n, n_k) : n_k;
  const bool bwd = !in.d_o.empty();

  Bounds B;
  B.o.assign(size_t(numel_q(p)), 0.0);
  B.lse.assign(size_t(numel_lse(p)), 0.0);
  std::vector<double> mag_dq, mag_dk, mag_dv;  // sums of |terms| the gradient GEMMs accumulate
  if (bwd) {
    B.d_q.assign(size_t(numel_q(p)), 0.0), mag_dq = B.d_q;
    B.d_k.assign(size_t(numel_kv(p)), 0.0), mag_dk = B.d_k, B.d_v = B.d_k, mag_dv = B.d_k;
  }
  std::vector<double> s(static_cast<size_t>(n_k)), a(static_cast<size_t>(n_k)),
      e_s(static_cast<size_t>(n_k));  // (n_k,)
  std::vector<double> P(static_cast<size_t>(n_k)), logP(static_cast<size_t>(n_k)), dev(static_cast<size_t>(n_k)),
      w_hat(static_cast<size_t>(n_k));              // (n_k,)
  std::vector<double> e_o(static_cast<size_t>(d));  // (d,) the kernel's own o error, feeding D in the backward

  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t g = kv_head(p, int32_t(h));
      for (int64_t i = 0; i < n_q; ++i) {
        const int64_t n_v = n_visible(p.mask, i, n_q, n_k), oq = offset_q(p, b, h, i);
        const int64_t ol = offset_lse(p, b, h, i);
        const double* q = &in.q[size_t(oq)];  // (d,)
        if (n_v == 0) {                       // the contract fixes o = 0, lse = -inf, d_q = 0 exactly
          for (int64_t k = 0; k < d; ++k) B.o[size_t(oq + k)] = at(ref.err.o, oq + k);
          continue;
        }
        double m = -kInf, M = 0;
        for (int64_t j = 0; j < n_v; ++j) {
          const double* kr = &in.k[size_t(offset_kv(p, b, g, j))];  // (d,)
          double dot = 0, abs_dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += q[c] * kr[c], abs_dot += std::fabs(q[c] * kr[c]);
          s[size_t(j)] = p.scale * dot, a[size_t(j)] = scale * abs_dot;
          m = std::max(m, s[size_t(j)]), M = std::max(M, std::fabs(s[size_t(j)]));
        }
        const int64_t T = (n_v + bc - 1) / bc;
        // Exponent-argument error of each weight relative to a common shift (the shift itself
        // cancels in o and lse): score error, argument rounding, exp, and up to 2 rescale factors
        // per tile (FA1 rescales the old state and the new tile) whose arguments carry 2 kArg u M.
        double eps = 0;
        for (int64_t j = 0; j < n_v; ++j) {
          // d products and sums, the scale multiply, the score's own rounding: gamma_{d+2}.
          e_s[size_t(j)] = gamma(double(d + 2), u) * a[size_t(j)] + u_sx * std::fabs(s[size_t(j)]);
          const double delta = e_s[size_t(j)] + kArgRoundings * u * (std::fabs(s[size_t(j)]) + std::fabs(m)) +
                               kExpUnits * u + double(2 * T) * (2 * kArgRoundings * u * M + kExpUnits * u);
          eps = std::max(eps, delta);
        }
        const double lse = ref.value.lse[size_t(ol)];
        // The exact log P is <= 0: clamping the fp64 estimate there only moves it toward the truth.
        // At huge scores the plain fp64 s carries u|s| (1e8 at 1e24) and s - lse > 0 would give
        // P = inf, then inf * 0 = NaN in the backward's P (dP - D) terms where dP = D.
        for (int64_t j = 0; j < n_v; ++j)
          logP[size_t(j)] = std::min(0.0, s[size_t(j)] - lse), P[size_t(j)] = std::exp(logP[size_t(j)]);
        // A weight perturbed by e^{+-eps} and renormalised lies in [P e^{-2 eps}, min(P e^{2 eps}, 1)]:
        // dev_j bounds |P^_j - P_j| and w_hat_j the computed weight, both in the log domain so
        // that an exact weight below fp64's range still counts when eps is large.
        for (int64_t j = 0; j < n_v; ++j) {
          const double up = std::min(1.0, std::exp(logP[size_t(j)] + 2 * eps));
          w_hat[size_t(j)] = up;
          dev[size_t(j)] = std::max(up - P[size_t(j)], -P[size_t(j)] * std::expm1(-2 * eps));
        }
        // Each weight's products and sums into o and l (3 Bc), then per tile the rescale-and-merge
        // of everything so far (FA1 also renormalises: l update 3, merge 5, 1/l 1 = 9 per tile).
        const double g_pv = gamma(double(3 * bc + 9 * T + 4), u);
        for (int64_t k = 0; k < d; ++k) {
          const double o = ref.value.o[size_t(oq + k)];
          double c = 0, R = 0, mag = 0, sum_v = 0;
          for (int64_t j = 0; j < n_v; ++j) {
            const double v = in.v[size_t(offset_kv(p, b, g, j) + k)];
            c += times(dev[size_t(j)], std::fabs(v - o)), R = std::max(R, std::fabs(v - o));
            mag += times(w_hat[size_t(j)], std::fabs(v)), sum_v += std::fabs(v);
          }
          // Sum_j |P^_j - P_j| <= 2 always, so the weight term never exceeds 2 max_j |v_j - o|.
          // P's rounding enters the numerator (u_p); where l sums the rounded P it enters l too.
          const double e = std::min(c, 2 * R) + times(u_pl + g_pv, mag) + tiny_p * sum_v + double(2 * n_v) * acc_floor;
          e_o[size_t(k)] = (1 + u_out) * e + u_out * std::fabs(o) + tiny_out;  // then rounded to storage
          B.o[size_t(oq + k)] = e_o[size_t(k)] + at(ref.err.o, oq + k);
        }
        // lse = m + log l: the weights' exponent errors, l's accumulation, log and the add, f32 store.
        const double e_lse = eps + g_pv + kArgRoundings * u * (std::fabs(lse - m) + std::fabs(lse)) +
                             u32 * std::fabs(lse) + l_round * (1 + double(n_v) * tiny_p);
        B.lse[size_t(ol)] = e_lse + at(ref.err.lse, ol);
        if (!bwd) continue;

        const double* d_o = &in.d_o[size_t(oq)];  // (d,)
        double D = 0, e_D = 0, mag_D = 0;
        for (int64_t k = 0; k < d; ++k) {
          const double o = ref.value.o[size_t(oq + k)];
          D += d_o[k] * o, e_D += std::fabs(d_o[k]) * e_o[size_t(k)];
          mag_D += std::fabs(d_o[k]) * (std::fabs(o) + e_o[size_t(k)]);
        }
        e_D += gamma(double(d + 1), u) * mag_D;  // D = d_o . o in the accumulator, from the kernel's o
        for (int64_t j = 0; j < n_v; ++j) {
          const int64_t okv = offset_kv(p, b, g, j);
          double dP = 0, b_abs = 0;
          for (int64_t k = 0; k < d; ++k)
            dP += d_o[k] * in.v[size_t(okv + k)], b_abs += std::fabs(d_o[k] * in.v[size_t(okv + k)]);
          const double e_dP =
              gamma(double(d + 1), u) * b_abs + u_sx * (std::fabs(dP) + gamma(double(d + 1), u) * b_abs);
          // P recomputed as exp(s - lse) from the kernel's saved lse: its error does not cancel here.
          double xi =
              e_s[size_t(j)] + e_lse + kArgRoundings * u * (std::fabs(s[size_t(j)]) + std::fabs(lse)) + kExpUnits * u;
          xi = std::max(xi, 2 * eps + g_pv);  // a baseline keeping the forward's normalised P
          // |P^ - P| <= P (e^xi - 1), from the log domain (P may underflow where P e^xi does not).
          const double Pj = P[size_t(j)];
          const double dPj = Pj > 0 ? times(std::expm1(xi), Pj) : std::exp(logP[size_t(j)] + xi);
          const double P_bar = Pj + dPj, gap = std::fabs(dP - D);
          const double e_pre = times(dPj, gap) + times(P_bar, e_dP + e_D);
          const double dS_bar = Pj * gap + e_pre;
          // dS = P (dP - D): a subtraction and a product in the accumulator, then rounded to P's
          // type; a baseline also rounds P itself to storage before the product (2 u_p).
          const double e_dS = e_pre + times((2 * u + 2 * u_p) * (1 + u_p), dS_bar) +
                              tiny_p * (1 + gap + e_dP + e_D);  // ... and P's own subnormal floor
          for (int64_t k = 0; k < d; ++k) {
            const double ad_o = std::fabs(d_o[k]);
            const double ak = scale * std::fabs(in.k[size_t(okv + k)]), aq = scale * std::fabs(q[k]);
            B.d_v[size_t(okv + k)] += times(dPj + u_p * P_bar + tiny_p, ad_o);
            mag_dv[size_t(okv + k)] += times(P_bar * (1 + u_p) + tiny_p, ad_o);
            B.d_q[size_t(oq + k)] += times(e_dS, ak);
            mag_dq[size_t(oq + k)] += times(dS_bar * (1 + u_p) + tiny_p, ak);
            B.d_k[size_t(okv + k)] += times(e_dS, aq);
            mag_dk[size_t(okv + k)] += times(dS_bar * (1 + u_p) + tiny_p, aq);
          }
        }
      }
    }
  if (!bwd) return B;
  // Accumulation of the gradient GEMMs (d_q: n_k terms and the scale; d_k, d_v: every query row of
  // the kv head's group), then rounding to storage, then the certified reference's own error.
  // The underflow floor is charged before the scale: kernels (ours, FlashAttention's) accumulate
  // dS k and dSᵀ q unscaled and multiply by the scale at the end, so a product lost below the
  // accumulator's subnormal floor comes out multiplied by |scale| (floor_scale).
  auto finish = [&](std::vector<double>& e, const std::vector<double>& mag, double n_terms, double floor_scale,
                    const std::vector<double>& value, const std::vector<double>& err) {
    for (size_t x = 0; x < e.size(); ++x) {
      const double acc = e[x] + times(gamma(n_terms, u), mag[x]) + (n_terms + 1) * acc_floor * floor_scale;
      e[x] = (1 + u_out) * acc + u_out * std::fabs(value[x]) + tiny_out + at(err, int64_t(x));
    }
  };
  finish(B.d_q, mag_dq, double(n_k + 2), std::max(1.0, scale), ref.value.d_q, ref.err.d_q);
  finish(B.d_k, mag_dk, double(group * n_q + 2), std::max(1.0, scale), ref.value.d_k, ref.err.d_k);
  finish(B.d_v, mag_dv, double(group * n_q + 1), 1.0, ref.value.d_v, ref.err.d_v);
  return B;
}

Verdict within_bound(const std::vector<double>& kernel, const std::vector<double>& ref,
                     const std::vector<double>& bound, DType out) {
  Verdict v;
  auto fail = [&](size_t x, const char* why) {
    v.ok = false, v.worst = int64_t(x), v.measured = std::fabs(kernel[x] - ref[x]), v.bound = bound[x];
    v.why = why;
    return v;
  };
  if (kernel.size() != ref.size() || bound.size() != ref.size()) {
    v.ok = false, v.why = "size mismatch";
    return v;
  }
  for (size_t x = 0; x < ref.size(); ++x) {
    const double y = kernel[x], r = ref[x], bd = bound[x];
    if (std::isnan(bd)) return fail(x, "NaN bound");
    if (std::isnan(r)) {
      if (!std::isnan(y)) return fail(x, "finite where the reference is NaN");
      continue;
    }
    if (std::isinf(r)) {
      if (y != r) return fail(x, "not the reference's infinity");
      continue;
    }
    if (std::isnan(y)) return fail(x, "NaN where the reference is finite");
    if (std::isinf(y)) {
      // Overflow of the output type is legitimate only where reference ± bound can reach it, on
      // that side: +inf when r + bound >= max, -inf when r - bound <= -max (a bound past the whole
      // range admits either sign, whatever the sign of r).
      if (y > 0 ? r + bd >= max_finite(out) : r - bd <= -max_finite(out)) continue;
      return fail(x, "infinite where the reference is finite");
    }
    const double e = std::fabs(y - r);
    const double ratio = e == 0 ? 0.0 : (bd > 0 ? e / bd : kInf);
    if (ratio > v.ratio || v.worst < 0)
      v.ratio = std::max(v.ratio, ratio), v.worst = int64_t(x), v.measured = e, v.bound = bd;
    if (e > bd) return fail(x, "error exceeds the bound");
  }
  return v;
}

FaRule fa_rule(const std::vector<double>& kernel, const std::vector<double>& baseline, const std::vector<double>& ref,
               const std::vector<double>& ref_err, DType out) {
  FaRule f;
  double ref_max = 0, err_max = 0;
  for (size_t x = 0; x < ref.size(); ++x) {
    if (!std::isfinite(ref[x])) continue;  // non-finite values are within_bound's business
    auto err = [&](double y) { return std::isfinite(y) ? std::fabs(y - ref[x]) : kInf; };
    f.kernel_err = std::max(f.kernel_err, err(kernel[x]));
    f.baseline_err = std::max(f.baseline_err, err(baseline[x]));
    ref_max = std::max(ref_max, std::fabs(ref[x])), err_max = std::max(err_max, at(ref_err, int64_t(x)));
  }
  // FlashAttention's atol: twice the round trip fl(fl(x + 0.3) - 0.3) - x in the output type,
  // whose size is at most 2 u (|x| + 0.3).
  f.noise = 4 * unit_roundoff(out) * (ref_max + 0.3) + err_max;
  f.holds = f.kernel_err <= 2 * f.baseline_err + f.noise;
  return f;
}

}  // namespace fc::ref
