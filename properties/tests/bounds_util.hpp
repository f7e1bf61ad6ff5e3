// Helpers of the error-model tests against kernels (bounds_kernels_test, bounds_long_test): the
// largest measured/bound of a run over every output tensor, and long-row inputs.
#pragma once

#include "tests/catch.hpp"

#include <cmath>
#include <limits>

#include "properties/long_rows.hpp"
#include "verdict/verdict.hpp"

namespace fc::test_bounds {

// Largest measured/bound over every output tensor of k under cfg (a failure counts as more than 1,
// a non-finite value against a finite reference as inf); prec overrides the kernel's declaration.
inline double worst_ratio(const Kernel& k, const Inputs& in, const Config& cfg, const ref::Precision* prec = nullptr) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const verdict::Run r = verdict::execute(k, in, cfg, in.has_d_o() && k.backward);
  REQUIRE(r.error.empty());
  const ref::Certified c = verdict::certify(in);
  const ref::Bounds B =
      prec ? ref::error_bounds(in.p, verdict::tensors64(in), c, *prec) : verdict::bounds_for(k, in, cfg, c);
  double worst = 0;
  auto one = [&](const HostTensor& t, const std::vector<double>& v, const std::vector<double>& b, DType dt) {
    if (t.shape.empty() || v.empty()) return;
    const ref::Verdict vd = ref::within_bound(t.to_f64(), v, b, dt);
    const double failed =
        vd.bound > 0 && !std::isnan(vd.measured) ? std::nextafter(std::max(1.0, vd.measured / vd.bound), kInf) : kInf;
    worst = std::max(worst, vd.ok ? vd.ratio : failed);  // a failure always counts as > 1
  };
  one(r.out.o, c.value.o, B.o, in.p.dtype);
  if (k.info.writes_lse) one(r.out.lse, c.value.lse, B.lse, in.p.dtype == DType::F64 ? DType::F64 : DType::F32);
  one(r.out.d_q, c.value.d_q, B.d_q, in.p.dtype);
  one(r.out.d_k, c.value.d_k, B.d_k, in.p.dtype);
  one(r.out.d_v, c.value.d_v, B.d_v, in.p.dtype);
  return worst;
}

// A long row of pattern pat: n_q queries of 2 heads sharing one kv head, d = 4, bottom-right causal
// (the last query sees every key).
inline Inputs long_inputs(props::LongPattern pat, DType t, int32_t n_k, uint64_t seed, int32_t n_q = 2) {
  props::Case c;
  c.in.p = Problem{.heads_q = 2,
                   .heads_kv = 1,
                   .n_q = n_q,
                   .n_k = n_k,
                   .d = 4,
                   .dtype = t,
                   .mask = Mask::CausalBottomRight,
                   .scale = 0.5};
  props::fill_long_row(c, pat, seed, true);
  return c.in;
}

}  // namespace fc::test_bounds
