// The error model (reference/bounds.hpp) on the GPU: error_bounds_max's bounds for dense problems
// without per-key variants, the O(n_q n_k d) work and each element's last rounding on a CUDA device. Derivation unchanged (docs/error-model.md); the GPU evaluates the same formulas with
// its sums in another order, which the bounds' slack covers ("The error model on the GPU"). Built
// only with CUDA (target fc_reference_gpu); reference/gpu/oracle_select.hpp's bounds() is the entry
// point the rest of flashcheck calls.
#pragma once

#include <string>
#include <vector>

#include "reference/bounds.hpp"
#include "reference/gpu/certified_gpu.hpp"

namespace fc::ref::gpu {

// Why the GPU error model does not take problem p under prec, in a few words; empty when it does.
std::string bounds_not_covered(const Problem& p, const Precision& prec);

// Seconds of each device pass (summed over the precisions) and of the whole call, for benchmarks; and
// the sets of passes run (precisions that share their scores and dP share one set: bounds_gpu_dev.hpp).
struct Timing {
  double forward = 0, backward_rows = 0, backward_keys = 0, total = 0;
  int sets = 0;
};

// error_bounds_max(p, in, ref, precs) computed on the device (each precision covered); *timing, where
// given, gets its times (zeros where the problem has no rows or keys); schedule: the tensor cores or
// not (certified_gpu.hpp). Throws std::invalid_argument
// where error_bounds would (sums past kMaxTerms), std::runtime_error on a CUDA error or when the
// device lacks the memory.
Bounds error_bounds_max(const Problem& p, const Tensors64& in, const Certified& ref,
                        const std::vector<Precision>& precs, Timing* timing = nullptr, const Schedule& schedule = {});

}  // namespace fc::ref::gpu
