// cpu_merge: merge states (contract/merge.hpp) on host tensors, in fp32, the partials of a row in
// index order: M = max_p lse_p, w_p = exp(lse_p - M) (0 for an empty partial), S = sum_p w_p,
// lse = M + log S, o = (sum_p w_p o_p) (1 / S); a row whose partials are all empty gives o = 0,
// lse = -inf. The template's fault parameter plants the shipped bugs of the merge mutants
// (kernels/mutants/merge_mutants.cpp); MergeFault::None is the correct kernel.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "contract/merge.hpp"
#include "contract/rules.h"

namespace fc::cpu {

enum class MergeFault {
  None,
  NanOnEmpty,      // no guard for M = -inf: exp(-inf - -inf) = NaN when every partial is empty
  LseTransposed,   // lse_p read as (partials, rows, heads), o's order (GQA decode's packed layout)
  NoMaxSub,        // w_p = exp(lse_p): overflows past lse 88, underflows below -103
  Fp16Weights,     // w_p rounded to fp16 (a half-precision weight register)
  FiniteSentinel,  // an empty partial's lse taken as -5e4 (a finite "-inf" sentinel), so it weighs
                   // where the row's other lse lie below about -5e4 + 88
};

template <MergeFault F = MergeFault::None>
void merge_states(const MergeInputs& in, MergeOutputs& out) {
  const MergeProblem& p = in.p;
  if (!well_formed(p) || out.o.shape != shape_merge_o(p) || out.lse.shape != shape_merge_lse(p))
    throw std::invalid_argument("cpu_merge: outputs of the wrong shape");
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  auto exp_fn = [](float x) { return std::exp(x); };
  std::vector<float> lse(size_t(p.partials)), w(size_t(p.partials));
  std::vector<float> acc(size_t(p.d_v));
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t h = 0; h < p.heads; ++h) {
      float m = kNegInf;
      for (int64_t q = 0; q < p.partials; ++q) {
        int64_t at = merge_lse_index(p, q, h, r);
        if constexpr (F == MergeFault::LseTransposed) at = (q * p.rows + r) * p.heads + h;
        float x = float(in.lse.get(at));
        if constexpr (F == MergeFault::FiniteSentinel)
          if (x == kNegInf) x = -5e4f;
        lse[size_t(q)] = x;
        m = rules::running_max(m, x);
      }
      if constexpr (F == MergeFault::NoMaxSub) m = 0;
      float sum = 0;
      for (int64_t q = 0; q < p.partials; ++q) {
        float x =
            F == MergeFault::NanOnEmpty ? exp_fn(lse[size_t(q)] - m) : rules::merge_weight(lse[size_t(q)], m, exp_fn);
        if constexpr (F == MergeFault::Fp16Weights) x = float(Eigen::half(x));
        w[size_t(q)] = x;
        sum += x;
      }
      const float inv = F == MergeFault::NanOnEmpty ? 1.0f / sum : rules::inv_l(sum);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t q = 0; q < p.partials; ++q)
        for (int64_t c = 0; c < p.d_v; ++c)
          acc[size_t(c)] += w[size_t(q)] * float(in.o.get(merge_o_index(p, q, r, h, c)));
      for (int64_t c = 0; c < p.d_v; ++c) out.o.set((r * p.heads + h) * p.d_v + c, double(acc[size_t(c)] * inv));
      const float l = F == MergeFault::NanOnEmpty ? m + std::log(sum)
                                                  : rules::merged_lse(m, sum, [](float x) { return std::log(x); });
      out.lse.set(h * p.rows + r, double(l));
    }
}

}  // namespace fc::cpu
