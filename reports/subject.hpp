// What an audit runs: a Subject is anything that turns a case's inputs into outputs, with the
// arithmetic the error model should assume for it. A registry kernel (ours, a mutant, or a plugin the
// loader turned into a registry row) is one Subject; the accumulation audit's cpu_tiled variants are
// others; `compare` has none (its outputs come from a file).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kernels/registry.hpp"
#include "reference/bounds.hpp"
#include "reports/plan.hpp"

namespace fc::report {

struct Subject {
  std::string name;       // as the report names it
  std::string device;     // "cpu", "cuda", ...
  std::string config;     // e.g. "64x64 FA2 acc=F32", empty for a kernel's default
  bool backward = false;  // audited on d_q, d_k, d_v too
  bool writes_lse = true;
  bool cut_rows = false;   // rows are independent: may run on a case's checked rows alone
  bool exclusive = false;  // runs one at a time (a GPU, a plugin's child process)
  std::function<bool(const CaseSpec&)> claims;
  std::function<Outputs(const Inputs&, bool backward)> run;  // throws on failure: Refusal for a declined config
  std::function<ref::Precision(const Problem&)> precision;   // for the error bound
};

// The config an audit runs a registry kernel with: the kernel's default for a kernel that takes
// any tile (cpu_tiled: 64 x 64, FA2), else the first config it lists.
Config audit_config(const Kernel& k);
std::string config_name(const Config& c);

// A registry kernel as a Subject (claims: the kernel claims the problem, and a CPU kernel is not
// given the GPU-only cases).
Subject subject_of(const Kernel& k, const Config& cfg);

// The subjects of a sweep and the kernels left out (with the reason, e.g. no GPU on this machine).
struct Selection {
  std::vector<Subject> subjects;
  std::vector<std::pair<std::string, std::string>> skipped;  // kernel, reason
  std::vector<std::string> names;                            // the subjects' names, in order
};

// The same-precision baseline (cpu_naive): its errors put every kernel's in context.
Subject baseline_subject();

}  // namespace fc::report
