// `flashcheck compare`: tensors another program produced (o; lse, d_q, d_k, d_v when present), held
// against the certified reference of the inputs and the error bound of the arithmetic the user
// declares (docs/compare.md), as a one-cell report of kind "compare" (the audit's format).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "contract/tensor.hpp"
#include "reference/bounds.hpp"

namespace fc::report {

struct CompareOptions {
  std::string inputs, outputs;
  std::string name = "outputs";  // the kernel's name in the report
  std::string model = "flash";   // flash: fused online softmax; naive: S and P stored in the storage type
  std::string accumulation = "F32";
  std::string rounding = "truncate";  // truncate: tensor cores (a whole ulp per step); nearest: IEEE
  bool p_in_storage = true;           // P rounded to the storage type before P·V (flash model)
  int32_t block_n = 0;                // kBlockN; 0: unknown, the worst of 16 ... 256
  double max_baseline_seconds = 60;   // the same-precision baseline runs only where estimated within this
};

// The report (kind "compare") of o.outputs against `in` (read from o.inputs by the caller, which also
// holds it to its resource limits). io::FileError for unusable files; std::invalid_argument for options.
// `stages`, when given, receives the seconds of each stage (outputs, oracle, bound, baseline, metrics).
nlohmann::json compare_report(const CompareOptions& o, const Inputs& in,
                              std::vector<std::pair<std::string, double>>* stages = nullptr);

}  // namespace fc::report
