// Metamorphic laws: a transformed input whose exact answer is known from the original's. Every
// transform is exact in the storage dtype (docs/laws.md): grid values, power-of-two scalings; the two
// runs are held to each other bit for bit where the kernel's arithmetic maps the transform exactly,
// within what the runs do not share otherwise (properties/differential.hpp), never to a sum of
// reference bounds.
#include <fmt/format.h>

#include <cmath>
#include <random>
#include <tuple>

#include "properties/constants.hpp"
#include "properties/differential.hpp"
#include "properties/evidence.hpp"
#include "properties/laws.hpp"
#include "verdict/verdict.hpp"

namespace fc::props {
namespace {

double grid_value(std::mt19937_64& rng) { return double(int64_t(rng() % 63) - 31) / 8; }  // k/8, |k| <= 31

// The unit roundoff of the score chain (q.k over d), a whole ulp where it truncates or runs on tensor cores.
double score_unit(const ref::Precision& pr) {
  const Chain& s = pr.ar.s;
  return ref::unit_roundoff(s.acc) * (s.adder == Adder::TensorCore || s.truncates ? 2 : 1);
}

// lse moves by the row's score shift c_i = scale q_i . w (exact in fp64 on the grid).
std::vector<double> shifted_back(const Problem& p, const Inputs& in, const std::vector<double>& w,
                                 const HostTensor& lse) {
  std::vector<double> out = lse.to_f64();
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        double qw = 0;
        for (int64_t x = 0; x < p.d; ++x)
          qw += in.q.get(offset_q(p, b, h, i) + x) * w[size_t((b * p.heads_kv + kv_head(p, int32_t(h))) * p.d + x)];
        out[size_t(offset_lse(p, b, h, i))] -= p.scale * qw;
      }
  return out;
}

// K + 1 w^T (one w per kv head) shifts row i's scores by c_i. On grid inputs every dot product is
// exact; a kernel with exact scores and a power-of-two scale then computes the same s - m, the same
// weights and the same o bit for bit, and lse moves by c_i up to its last add and fp32 store.
// Otherwise each run charges its own rounding of the scaled scores and everything after.
std::string law_shift(const Kernel& k, const Case& c) {
  const Problem& p = c.in.p;
  std::mt19937_64 rng(c.aux);
  Inputs in2 = c.in;
  std::vector<double> w(static_cast<size_t>(p.batch * p.heads_kv * p.d));  // (batch, heads_kv, d)
  for (double& x : w) x = grid_value(rng);
  for (int64_t x = 0, n = in2.k.numel(); x < n; ++x) {
    const int64_t head = x / (p.n_k * p.d), col = x % p.d;
    const double y = c.in.k.get(x) + w[size_t(head * p.d + col)];
    if (round_to(dtype_kv(p), y) != y) throw NotApplicable("the shifted keys are not exact in the storage type");
    in2.k.set(x, y);
  }
  note_problem("shifted keys' problem", in2);
  note_transform("K + 1 w^T, w (batch, kv head, column) = " + list_values(w, 64));
  // The dot products' own accumulator (the score chain), not the coarsest of the kernel's: a kernel
  // that accumulates P.V in fp16 still sums q.k in fp32 when it declares so.
  const double u = score_unit(precision_of(k, c.cfg, p));
  if (!dots_exact(c.in, u) || !dots_exact(in2, u))
    throw NotApplicable("the dot products are not exact (grid values): the shifted scores would round apart");
  const Run a = execute(k, c.in, c.cfg, false), b = execute(k, in2, c.cfg, false);
  if (const std::string e = run_errors(a, b); !e.empty()) return e;
  const std::vector<double> lse_b = shifted_back(p, c.in, w, b.out.lse), lse_a = a.out.lse.to_f64();
  if (k.info.exact.exact_scores && is_pow2(p.scale)) {
    std::string msg = same_bits(p, "o", a.out.o, b.out.o);
    if (!k.info.writes_lse) return msg;
    // lse = m + log l: m moved by c_i exactly and log l kept its bits; the add and the fp32 store
    // round each run once (and fp64 evaluates c_i exactly on the grid).
    std::vector<double> tol(lse_a.size());
    for (size_t x = 0; x < tol.size(); ++x)
      tol[x] = 2 * ref::unit_roundoff(DType::F32) * (std::fabs(lse_a[x]) + std::fabs(b.out.lse.get(int64_t(x))));
    return msg + within(p, "lse", lse_b, lse_a, tol, DType::F32);
  }
  const ForwardTolerance t = forward_unshared(k, c.in, certify(c.in), c.cfg, Shared::ExactDots) +
                             forward_unshared(k, in2, certify(in2), c.cfg, Shared::ExactDots);
  std::string msg = within(p, "o", b.out.o.to_f64(), a.out.o.to_f64(), t.o, dtype_o(p));
  if (k.info.writes_lse) {
    std::vector<double> tol = t.lse;
    for (size_t x = 0; x < tol.size(); ++x) tol[x] += 0x1p-52 * std::fabs(b.out.lse.get(int64_t(x)));  // fp64 - c_i
    msg += within(p, "lse", lse_b, lse_a, tol, DType::F32);
  }
  return msg;
}

// |y_2 - a y_1| per element allowed by gradual underflow: a scaling by a power of two is exact for
// every rounding above the subnormal ranges (of the accumulator, P's type and the output).
std::vector<double> underflow_floor_tol(const ref::Coarse& pr, const Problem& p, double a, int64_t n) {
  const bool ftz = pr.flush_subnormals;
  auto floor_of = [ftz](DType t) { return ftz ? ref::min_normal(t) : ref::underflow_floor(t); };
  const double acc = floor_of(pr.u_acc >= 0x1p-12 ? DType::F16 : pr.u_acc >= 0x1p-25 ? DType::F32 : DType::F64);
  const double t = (1 + std::fabs(a)) * (double(n + 2) * acc + floor_of(pr.storage));
  return std::vector<double>(size_t(numel_q(p)), t);
}

// A P.V accumulator narrower than fp32 (fp16, bf16) meets gradual underflow in ordinary rows: a
// product P_j v_j below 2^-14 already rounds in fp16's subnormal range, where a scaling by a power of
// two is not exact. The per-operation floors (underflow_floor_tol) bound what each such rounding adds,
// but the tiny discrepancy it leaves can move a later rounding of the running sum across a rounding
// boundary: once the two chains differ, each later rounding keeps the difference on the result's
// grid, so it grows by at most one ulp of the running sum where the sum's binade grows and one per
// rescale (T tiles, merge_old roundings each), and the normalising product and the store may each
// round one ulp apart. Bounded by 2 (T + 1) merge_old u_acc (1 + |a|) sum_j P_j |v_j| (P_j the exact
// weights, doubled for P's rounding and l's error), plus an ulp of o in the softmax type and in
// storage. In fp32 a discrepancy of 2^-149 moves no rounding of a normal sum of the rows drawn here,
// so the floors alone stay the tolerance there.
void add_underflow_carry(const Kernel& k, const Case& c, double a, const HostTensor& o1, const HostTensor& oa,
                         std::vector<double>& tol) {
  const Problem& p = c.in.p;
  const ref::Precision pr = precision_of(k, c.cfg, p);
  const Chain& pv = pr.ar.pv;
  if (ref::unit_roundoff(pv.acc) <= ref::unit_roundoff(DType::F32)) return;
  const double u_pv = ref::unit_roundoff(pv.acc), u_soft = ref::unit_roundoff(pr.ar.soft);
  const double u_out = ref::unit_roundoff(p.dtype);
  const int64_t bn = pv.block > 0 ? pv.block : p.n_k;
  std::vector<double> s(static_cast<size_t>(p.n_k));  // (n_k,) one row's scores, exact on the grid
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        const int64_t n_v = n_visible(p.mask, i, p.n_q, p.n_k), g = kv_head(p, int32_t(h));
        if (n_v == 0) continue;
        double m = -kInf;
        for (int64_t j = 0; j < n_v; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < p.d; ++x)
            dot += c.in.q.get(offset_q(p, b, h, i) + x) * c.in.k.get(offset_kv(p, b, g, j) + x);
          s[size_t(j)] = p.scale * dot, m = std::max(m, s[size_t(j)]);
        }
        double l = 0;
        for (int64_t j = 0; j < n_v; ++j) l += std::exp(s[size_t(j)] - m);
        const double T = double((n_v + bn - 1) / bn);
        for (int64_t x = 0; x < p.d; ++x) {
          double S = 0;  // sum_j P_j |v_j| of column x
          for (int64_t j = 0; j < n_v; ++j)
            S += std::exp(s[size_t(j)] - m) / l * std::fabs(c.in.v.get(offset_kv(p, b, g, j) + x));
          const int64_t at = offset_q(p, b, h, i) + x;
          const double y = std::fabs(a * o1.get(at)) + std::fabs(oa.get(at));
          tol[size_t(at)] +=
              2 * (T + 1) * double(pv.merge_old) * u_pv * (1 + std::fabs(a)) * 2 * S + 2 * (u_soft + u_out) * y;
        }
      }
}

// O(aV + b) = aO + b in two steps. aV (a = +-1/2, +-1, +-2): every operation scales exactly, so o,
// lse and d_v keep their bits up to gradual underflow, and for a = +-1 (sign symmetry of every
// rounding) d_q and d_k flip exactly. aV + b: the weights, l and 1/l are the same bits as before; only
// the P.V sums differ, and sum_j P_j = 1 up to P's rounding and the chains.
std::string law_affine_v(const Kernel& k, const Case& c) {
  const Problem& p = c.in.p;
  std::mt19937_64 rng(c.aux);
  const double a = (rng() % 2 ? -1.0 : 1.0) * std::ldexp(1.0, int(rng() % 3) - 1);  // +-1/2, +-1, +-2
  std::vector<double> shift(static_cast<size_t>(p.d));                              // (d,) b: one offset per column
  for (double& x : shift) x = grid_value(rng);
  Inputs in_a = c.in, in_b = c.in;
  for (int64_t x = 0, n = c.in.v.numel(); x < n; ++x) {
    const double y = a * c.in.v.get(x), z = y + shift[size_t(x % p.d)];
    if (round_to(dtype_kv(p), y) != y || round_to(dtype_kv(p), z) != z)
      throw NotApplicable("aV + b is not exact in the storage type");
    in_a.v.set(x, y), in_b.v.set(x, z);
  }
  note_problem("aV problem", in_a);
  note_problem("aV + b problem", in_b);
  note_transform(fmt::format("a = {}, b (per column) = {}", a, list_values(shift, 64)));
  const bool bwd = has_backward(k, c);
  const Run r1 = execute(k, c.in, c.cfg, bwd), ra = execute(k, in_a, c.cfg, bwd), rb = execute(k, in_b, c.cfg, bwd);
  if (const std::string e = run_errors(r1, ra) + run_errors(rb, rb); !e.empty()) return e;
  const ref::Coarse pr = ref::coarse(precision_of(k, c.cfg, p));
  // Step 1: o(aV) = a o(V), lse(aV) = lse(V), d_v(aV) = d_v(V); for |a| = 1 also d_q, d_k scaled.
  std::vector<double> scaled = r1.out.o.to_f64();
  for (double& x : scaled) x *= a;
  std::vector<double> tol1 = underflow_floor_tol(pr, p, a, p.n_k);
  add_underflow_carry(k, c, a, r1.out.o, ra.out.o, tol1);
  std::string msg = within(p, "o", ra.out.o.to_f64(), scaled, tol1, dtype_o(p));
  if (k.info.writes_lse)
    msg += same_bits(p, "lse", r1.out.lse, ra.out.lse) + same_bits(p, "lse", r1.out.lse, rb.out.lse);
  if (bwd) {
    msg += same_bits(p, "d_v", r1.out.d_v, ra.out.d_v) + same_bits(p, "d_v", r1.out.d_v, rb.out.d_v);
    if (std::fabs(a) == 1) {  // d_q only where its sums are exact (no atomics)
      for (auto [name, t1, t2] :
           {std::tuple{"d_q", &r1.out.d_q, &ra.out.d_q}, std::tuple{"d_k", &r1.out.d_k, &ra.out.d_k}}) {
        if (std::string(name) == "d_q" && !k.info.exact.d_q_rows) continue;
        HostTensor flipped = *t1;
        for (int64_t x = 0, n = flipped.numel(); x < n; ++x) flipped.set(x, a * t1->get(x));  // exact
        msg += same_values(p, name, flipped, *t2);                                     // -x - -y = +0 where x - y = +0
      }
    }
  }
  if (!msg.empty()) return fmt::format("a = {}: {}", a, msg);
  // Step 2: o(aV + b) - (o(aV) + b): P's rounding and both P.V chains, 1/l's product and the stores.
  const double u = pr.u_acc, u_out = ref::unit_roundoff(pr.storage);
  const double u_pl = ref::unit_roundoff(pr.p_dtype) * (pr.l_sums_rounded_p ? 2 : 1);
  const int64_t bn = pr.block_n > 0 ? pr.block_n : p.n_k;
  std::vector<double> expected = ra.out.o.to_f64(), tol(expected.size());
  const std::vector<double> floors = underflow_floor_tol(pr, p, 1, p.n_k);
  // max |aV| and |aV + b| over keys 0..j, per column (k/v layout): a row's visible keys are a prefix.
  std::vector<double> max_a = in_a.v.to_f64(), max_b = in_b.v.to_f64();
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.heads_kv; ++g)
      for (int64_t j = 0; j < p.n_k; ++j) {
        const size_t row = size_t(offset_kv(p, b, g, j));  // key j's (d,) values, key j - 1's d before
        for (size_t x = 0; x < size_t(p.d); ++x) {
          max_a[row + x] = std::fabs(max_a[row + x]), max_b[row + x] = std::fabs(max_b[row + x]);
          if (j > 0) {
            max_a[row + x] = std::max(max_a[row + x], max_a[row + x - size_t(p.d)]);
            max_b[row + x] = std::max(max_b[row + x], max_b[row + x - size_t(p.d)]);
          }
        }
      }
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        const int64_t n_v = n_visible(p.mask, i, p.n_q, p.n_k), T = (n_v + bn - 1) / bn;
        const double g = gamma(double(n_v + 5 * T + 8), u), sum_p = 1 + u_pl + g + 2 * u;
        for (int64_t x = 0; x < p.d; ++x) {
          const size_t at = size_t(offset_q(p, b, h, i) + x);
          if (n_v == 0) continue;   // o = 0 in both runs by contract: the same bits
          const size_t last = size_t(offset_kv(p, b, kv_head(p, int32_t(h)), n_v - 1) + x);
          const double m_a = max_a[last], m_b = max_b[last];  // over the visible keys
          const double bx = shift[size_t(x)], y_b = rb.out.o.get(int64_t(at));
          tol[at] = std::fabs(bx) * (u_pl + g + 2 * u) + g * sum_p * (m_a + m_b) +
                    (u + u_out) * (std::fabs(y_b) + std::fabs(expected[at])) + floors[at] +
                    0x1p-53 * std::fabs(expected[at] + bx);  // fp64's own add below
          expected[at] += bx;
        }
      }
  msg = within(p, "o", rb.out.o.to_f64(), expected, tol, dtype_o(p));
  return msg.empty() ? "" : fmt::format("a = {}, b added: {}", a, msg);
}

}  // namespace

void add_metamorphic_laws(std::vector<Law>& out) {
  using R = Regime;
  out.push_back({.id = "shift",
                 .sentence = "adding a constant vector to every key changes nothing",
                 .regimes = {R::Grid},
                 .pow2_scale = true,
                 .check = law_shift});
  out.push_back({.id = "affine_v",
                 .sentence = "O(aV + b) = aO + b",
                 .regimes = {R::Grid},
                 .backward = true,
                 .check = law_affine_v});
}

}  // namespace fc::props
