// The error model for a kernel that normalises P by its own lse (Arithmetic::p_from): a two-pass
// fp32 subject (m, l and lse first, then P = exp(s - lse) and o = P V with no division, as the torch
// kernel of the GPU audit does) stays inside the bound declared so and inside the undeclared union;
// the online-softmax model (p_from = Max) does not cover it where |lse| is large; and the same
// subject with an lse 16 ulps off is caught.
#include "tests/catch.hpp"

#include <cmath>
#include <random>

#include "properties/generators.hpp"
#include "reference/bounds.hpp"
#include "reference/certified.hpp"
#include "reference/inputs64.hpp"

namespace {

using namespace fc;

// The subject's forward in fp32, dense layout: o (batch, heads_q, n_q, d), lse. lse_ulps: how many
// ulps its lse is moved up before P uses it (0: correct).
void lse_subject(const Problem& p, const ref::Tensors64& in, int lse_ulps, std::vector<double>& o,
                 std::vector<double>& lse) {
  o.assign(size_t(numel_o(p)), 0.0), lse.assign(size_t(numel_lse(p)), 0.0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        const KeyRange vis = visible_keys(p, i, p.n_q, p.n_k);
        const int64_t g = h / (p.heads_q / p.heads_kv), ol = offset_lse(p, b, h, i);
        std::vector<float> s(size_t(p.n_k));  // (n_k)
        float m = -INFINITY;
        for (int64_t j = vis.begin; j < vis.end; ++j) {
          float dot = 0;
          for (int64_t c = 0; c < p.d; ++c)
            dot += float(in.q[size_t(offset_q(p, b, h, i) + c)]) * float(in.k[size_t(offset_kv(p, b, g, j) + c)]);
          s[size_t(j)] = dot * float(p.scale), m = std::max(m, s[size_t(j)]);
        }
        float l = 0;
        for (int64_t j = vis.begin; j < vis.end; ++j) l += std::exp(s[size_t(j)] - m);
        float lse_i = vis.end > vis.begin ? m + std::log(l) : -INFINITY;
        lse[size_t(ol)] = lse_i;
        for (int u = 0; u < lse_ulps; ++u) lse_i = std::nextafter(lse_i, INFINITY);
        for (int64_t c = 0; c < p.d; ++c) {
          float acc = 0;
          for (int64_t j = vis.begin; j < vis.end; ++j)
            acc += std::exp(s[size_t(j)] - lse_i) * float(in.v[size_t(offset_kv(p, b, g, j) + c)]);
          o[size_t(offset_q(p, b, h, i) + c)] = acc;
        }
      }
}

ref::Precision declared(PFrom from) {
  ref::Precision pr;
  pr.storage = DType::F32;
  Arithmetic& a = pr.ar;
  a.s = a.pv = a.d_o_o = a.dp = a.dq = a.dkv = serial_chain(DType::F32, false);
  a.l = serial_chain(DType::F32, true);
  a.soft = a.operand = DType::F32;
  declare_glibc_libm(a);
  a.rounds_p = false;
  a.o_normalise = from == PFrom::Lse ? 0 : 1;
  a.p_from = from;
  return pr;
}

// Largest measured/bound of the subject's o over the problem (a failure counts as more than 1).
double ratio(const Inputs& in, const ref::Precision& prec, int lse_ulps) {
  const ref::Tensors64 t = ref::tensors64(in);
  const ref::Certified c = ref::certified(in.p, t);
  const ref::Bounds B = ref::error_bounds(in.p, t, c, prec);
  std::vector<double> o, lse;
  lse_subject(in.p, t, lse_ulps, o, lse);
  const ref::Verdict v = ref::within_bound(o, c.value.o, B.o, DType::F32);
  return v.ok ? v.ratio : std::max(1.0 + 0x1p-20, v.measured / v.bound);
}

// Random values; offset > 0 puts every score near offset (|lse| large, v near 1: o far from 0).
Inputs make(uint64_t seed, int32_t n_k, double offset, Mask mask) {
  props::Case cs;
  Problem& p = cs.in.p;
  p.dtype = DType::F32, p.n_q = 12, p.n_k = n_k, p.d = 96, p.mask = mask, p.heads_q = 2, p.heads_kv = 1;
  p.scale = default_scale(p.d);
  props::fill_values(cs, 2, seed, false, 1e9);
  if (offset > 0) {
    // q_c = k_c = x in the last column (the dot adds it last): s = offset + the other columns' part.
    const double x = std::sqrt(offset / p.scale);
    for (int64_t r = 0; r < cs.in.q.numel() / p.d; ++r) cs.in.q.set(r * p.d + p.d - 1, x);
    for (int64_t r = 0; r < cs.in.k.numel() / p.d; ++r) cs.in.k.set(r * p.d + p.d - 1, x);
    for (int64_t e = 0; e < cs.in.v.numel(); ++e) cs.in.v.set(e, 1 + 0x1p-8 * std::sin(double(e)));
  }
  return cs.in;
}

}  // namespace

TEST_CASE("a kernel normalising P by its own lse stays inside the bound that declares it", "[cpu]") {
  double worst = 0, worst_max_model = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed)
    for (double offset : {0.0, 40.0, 160.0}) {
      const Inputs in = make(seed, int32_t(8 + 9 * seed), offset, Mask(seed % 3));
      INFO("seed " << seed << " offset " << offset);
      const double lse_ratio = ratio(in, declared(PFrom::Lse), 0);
      CHECK(lse_ratio <= 1.0);
      CHECK(ratio(in, ref::Precision{DType::F32, undeclared_arithmetic(DType::F32)}, 0) <= 1.0);
      worst = std::max(worst, lse_ratio);
      if (offset > 0) worst_max_model = std::max(worst_max_model, ratio(in, declared(PFrom::Max), 0));
    }
  CHECK(worst > 0.05);           // the bound is not vacuous for it
  CHECK(worst_max_model > 1.0);  // the online-softmax model does not cover it: the term is needed
}

TEST_CASE("an lse 16 ulps off in P = exp(s - lse) exceeds the bound", "[cpu]") {
  double worst = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed)
    worst = std::max(worst, ratio(make(seed, 40, 160.0, Mask::None), declared(PFrom::Lse), 16));
  CHECK(worst > 1.5);
}
