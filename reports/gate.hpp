// `flashcheck gate`: a current report held against a baseline report of the same sweep (docs/gate.md).
// Cells are matched by (kernel, case id). The gate fails when a matched cell that passed now fails (or
// errors), when a baseline cell is missing from the current report, when a case's inputs differ (the
// numbers would not be comparable), or when a metric of a matched tensor grew beyond its tolerance:
//   current > baseline * (1 + tolerance)          (any growth from an exact 0 counts)
// for rmse and rel_norm (default 10 %), max_abs, max_scaled, ratio_max, ratio_p99, ulp_p99 (default
// 50 %: maxima of rounding noise move more than averages), |bias_mag| (default 50 %, and only beyond
// 3 RMSE / sqrt(count), the noise of a mean of unbiased errors), and nonfinite_mismatch (no growth).
// New cells are listed, never gated.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace fc::report {

struct GateOptions {
  std::map<std::string, double> tolerance;  // metric -> relative tolerance (defaults filled in)
};
// The defaults above.
GateOptions default_gate_options();
// "0.2" sets every relative tolerance; "rmse=0.05" one metric. ReportError-free: throws
// std::invalid_argument with a one-line reason on a bad spec.
void apply_tolerance(GateOptions& o, const std::string& spec);

struct GateResult {
  int64_t compared = 0, regressions = 0, new_failures = 0, missing = 0, inputs_changed = 0, added = 0, improved = 0;
  std::string markdown;  // the diff
  bool failed() const { return regressions + new_failures + missing + inputs_changed > 0; }
};

// ReportError when the two cannot be compared at all (different kinds).
GateResult gate(const nlohmann::json& baseline, const nlohmann::json& current, const GateOptions& o,
                const std::string& baseline_name, const std::string& current_name);

}  // namespace fc::report
