// The kill matrix: every law against every mutant (or any kernels named), at `flashcheck check`'s
// budget. A cell says whether the law killed the kernel; "alone" marks a mutant only one law kills,
// and each law's row of "beyond reference" lists the mutants it kills while `reference` does not:
// the evidence that a law has a criterion of its own. Printed by `flashcheck check --kill-matrix`
// (Markdown, or JSON with --json).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "properties/runner.hpp"

namespace fc::props {

enum class Cell { Killed, Survived, NotApplicable };

struct KillRow {
  std::string kernel;
  std::string description;
  bool mutant = false;
  std::vector<Cell> cells;                 // one per law of laws(), in order
  std::vector<std::string> first_failure;  // per law: the first line of the failure ("" otherwise)
};

struct KillMatrix {
  std::vector<std::string> laws;  // law ids, in order
  std::vector<KillRow> rows;
  int cases = 0;
  uint64_t seed = 0;
};

// Runs every law on each kernel (every registered mutant whose device is present when `kernels` is
// empty). progress, when given, gets one line per kernel as it finishes.
KillMatrix kill_matrix(const std::vector<const Kernel*>& kernels, const RunOptions& opt, std::ostream* progress);

// Mutants the law kills and `reference` does not.
std::vector<std::string> beyond_reference(const KillMatrix& m, const std::string& law);

void print_markdown(const KillMatrix& m, std::ostream& out);
void print_json(const KillMatrix& m, std::ostream& out);

}  // namespace fc::props
