// Error metrics of one output tensor against its certified reference and error bound (the audit's
// numbers, docs/audit.md defines each): max abs, RMSE, max scaled error, normwise error, measured /
// bound (max, quantiles, histogram), error in ULPs of the output type and the distance from the
// correctly rounded value, mean signed error (bias), non-finite mismatches, and the worst element.
// Pure functions of vectors, so tests can hold them to hand-computed values.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "contract/attention.h"

namespace fc::report {

// Bins of the measured/bound histogram: [0, 1e-6), then [e_i, e_{i+1}) over the 1-2-5 edges
// 1e-6, 2e-6, 5e-6, ..., 5, 10, then [10, inf). The edges are decimal literals, never computed.
inline constexpr int kRatioBins = 23;
extern const std::array<double, kRatioBins - 1> kRatioEdges;
// Bins of the distance (in steps of the output type) from the correctly rounded value: 0, 1, 2,
// 3-4, 5-8, ..., 2^19+1-2^20, > 2^20.
inline constexpr int kUlpBins = 23;
int ulp_bin(int64_t steps);
int ratio_bin(double ratio);

// Spacing of the output type at x: 2^(e - p + 1) for |x| in [2^e, 2^(e+1)), the subnormal spacing
// below the normal range, the spacing at the largest finite value beyond it.
double ulp_of(DType t, double x);
// Position of a value of type t on its number line (0 at zero, +-1 at the smallest subnormals, the
// largest finite + 1 for infinity): |ordinal(x) - ordinal(y)| counts the values between x and y.
// x must be representable in t (or infinite); NaN gives 0.
int64_t ordinal(DType t, double x);

struct TensorMetrics {
  int64_t count = 0;                              // elements where kernel and reference are both finite
  int64_t nonfinite_match = 0;                    // elements equal and non-finite on both sides (e.g. -inf lse)
  int64_t nonfinite_mismatch = 0;                 // NaN/inf on one side only, or different non-finite values
  double max_abs = 0;                             // max |got - ref|
  double rmse = 0;                                // sqrt(mean (got - ref)^2)
  double max_scaled = 0;                          // max |got - ref| / scale_i (see measure())
  double rel_norm = 0;                            // ||got - ref||_2 / ||ref||_2 (0 when both are 0)
  double bias = 0;                                // mean (got - ref)
  double bias_mag = 0;                            // mean sign(ref) (got - ref): < 0 when results shrink toward zero
  double bias_rel = 0;                            // bias_mag / rmse, in [-1, 1]: 0 unbiased, +-1 entirely systematic
  double ulp_max = 0, ulp_mean = 0, ulp_p99 = 0;  // |got - ref| / ulp(ref)
  int64_t excess_max = 0;                         // max steps of the output type between got and ref rounded once
  int64_t excess_p99 = 0;                         // 99th percentile of those steps
  int64_t correctly_rounded = 0;                  // elements where got == ref rounded once to the output type
  std::array<int64_t, kUlpBins> ulp_hist{};
  bool has_bound = false;
  double ratio_max = 0, ratio_p50 = 0, ratio_p90 = 0, ratio_p99 = 0;  // |got - ref| / bound
  std::array<int64_t, kRatioBins> ratio_hist{};
  int64_t worst = -1;  // element with the largest ratio (largest scaled error without a bound)
  double worst_got = 0, worst_ref = 0, worst_bound = 0;
  // The verdict, which measure() does not give: measure_outputs (cell.hpp) copies in verdict::hold's
  // where there is a bound.
  bool pass = true;  // every element within its bound, non-finite values exact (ref::within_bound)
  std::string why;   // first failure, empty when pass
  int64_t why_index = -1;
};

// How the scaled error of a tensor is scaled: per element (o: sum_j P_ij |v_jk|), by the tensor's
// largest |ref| (gradients), or not at all (lse: its absolute error is the relative error of e^lse).
struct Scale {
  enum Kind { Elementwise, TensorMax, Absolute } kind = Absolute;
  const std::vector<double>* per_element = nullptr;  // Elementwise
};

namespace metrics_detail {
struct HugeBuffer;  // (metrics.cpp)
}
// The per-element arrays measure() fills for its quantiles (three doubles an element), kept from one
// call to the next: measure_outputs measures a case's tensors one after another, and on a training
// shape's tensors fresh memory for each costs more in first-touch page faults than the scan itself.
class MeasureScratch {
 public:
  MeasureScratch();
  ~MeasureScratch();
  MeasureScratch(const MeasureScratch&) = delete;
  MeasureScratch& operator=(const MeasureScratch&) = delete;
  std::unique_ptr<metrics_detail::HugeBuffer> ratios, ulps, steps;
};

// `got` holds exact values of type `out`; `bound` may be empty (no ratio metrics). The numbers only:
// whether got is within bound is verdict::hold's to say (verdict/verdict.hpp). scratch: memory to
// reuse (the same numbers with or without it).
TensorMetrics measure(const std::vector<double>& got, const std::vector<double>& ref, const std::vector<double>& bound,
                      DType out, Scale scale, MeasureScratch* scratch = nullptr);

// The q-quantile of x by the lower nearest rank: sorted x at index floor(q (n - 1)); 0 when empty.
double quantile(std::vector<double> x, double q);
size_t rank(size_t n, double q);  // floor(q (n - 1))
// quantile's value for each q of qs, x left as it is, on every thread: a radix selection on the
// values' bit patterns, 16 bits a histogram (the first shared by every q), then nth_element over the
// few candidates left. For the 10^8 elements of a training shape's tensor, where one nth_element on
// one thread takes seconds.
std::vector<double> quantiles_parallel(const double* x, size_t n, const std::vector<double>& qs);

}  // namespace fc::report
