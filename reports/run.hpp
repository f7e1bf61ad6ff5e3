// Running a sweep: every case of a plan through every subject that claims it, in parallel over
// cases (results land in plan order, so the report does not depend on the thread count), with a
// progress line on stderr for long runs.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reports/cell.hpp"
#include "reports/plan.hpp"
#include "reports/subject.hpp"

namespace fc::report {

struct SweepOptions {
  uint64_t seed = 1;
  int jobs = 1;                // worker threads (cases in flight)
  bool progress = true;        // a progress line on stderr once a run takes more than a few seconds
  std::string what = "audit";  // names the run in the progress line
  // The replay line of a cell: e.g. "flashcheck audit --kernel K --case ID --seed S".
  std::function<std::string(const CaseSpec&, const Subject&)> replay;
};

struct SweepResult {
  nlohmann::json cases = nlohmann::json::array();  // case_json per case, plan order
  nlohmann::json cells = nlohmann::json::array();  // one per (case, claiming subject)
  std::vector<std::string> errors;                 // reference failures: the run is unusable (exit 2)
};

// The long cases (gpu_only) whose certificate and every claiming subject's bound run on the GPU
// (ref::bounds_on_gpu under the process's --oracle) are checked on every row (rows = 0); the others keep
// the plan's last kLongRows rows. On the CPU a long row's certificate and bound take O(n_k d) each: a
// 131072-row case would take hours there.
void whole_long_rows(std::vector<CaseSpec>& cases, const std::vector<Subject>& subjects);

// `baseline` may be null (no baseline ratios). Cells carry "seq" (the case's) and "sub" (the
// subject's index in `subjects`), the order key a merge restores.
SweepResult run_sweep(const std::vector<CaseSpec>& cases, const std::vector<Subject>& subjects, const Subject* baseline,
                      const SweepOptions& o);

// One cell of a case whose reference is known: runs the subject (on the checked rows or the full
// inputs) and measures it; finish_cell turns it into the report's JSON (status pass | fail | error |
// refused), with baseline ratios when `baseline` is given.
struct CellRun {
  nlohmann::json cell;  // kernel, device, config, status, error
  std::map<std::string, TensorMetrics> metrics;
};
// checked64: verdict::tensors64(checked), converted once for the case's oracle and every cell's bound;
// nullptr skips the bound (and the verdict): the baseline only lends its max errors.
CellRun run_cell(const CaseSpec& c, const Inputs& full, const Inputs& checked, const ref::Tensors64* checked64,
                 const ref::Certified& want, const Subject& s);
nlohmann::json finish_cell(const CaseSpec& c, const CellRun& r, const BaselineErrors* baseline);

}  // namespace fc::report
