// One cell of a report: a subject's outputs on one case, measured tensor by tensor against the
// certified reference and the subject's error bound, as the JSON object the report stores.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "reference/bounds.hpp"
#include "reports/metrics.hpp"
#include "reports/plan.hpp"

namespace fc::report {

// The tensors a report can hold, in report order.
inline const char* const kTensors[] = {"o", "lse", "d_q", "d_k", "d_v"};

// Per-tensor max |got - ref| of the same-precision baseline on the same case (absent: not run).
using BaselineErrors = std::map<std::string, double>;

// Metrics of every output the run is judged on (verdict::hold: o, lse when `has_lse`, d_q d_k d_v
// when got has gradients; `got` holds a case's checked rows), each with verdict::hold's verdict
// against `bounds` (none when `bounds` is empty).
std::map<std::string, TensorMetrics> measure_outputs(const Inputs& checked, const ref::Certified& want,
                                                     const ref::Bounds& bounds, const Outputs& got, bool has_lse);

// max_abs per tensor (the baseline's errors).
BaselineErrors max_abs_of(const std::map<std::string, TensorMetrics>& m);

// The JSON of one tensor's metrics; `baseline` (may be null) adds baseline_max_abs and the ratio.
nlohmann::json tensor_json(const CaseSpec& c, const std::string& tensor, const TensorMetrics& m,
                           const BaselineErrors* baseline);

// "o[b=0,h=1,i=2,c=3]" in the coordinates of the full problem of c (checked rows offset back).
std::string element_label(const CaseSpec& c, const std::string& tensor, int64_t flat);

// The case as the report describes it (without seq).
nlohmann::json case_json(const CaseSpec& c, uint64_t inputs_hash, double score_max);

// max |s_ij| over visible pairs of the checked rows, in fp64 (scores are exact there for 16-bit
// inputs; a statistic for the plots).
double score_max(const Inputs& in);

}  // namespace fc::report
