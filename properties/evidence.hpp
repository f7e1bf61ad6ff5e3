// What a law's check ran beyond the case it was given, so that a counterexample is self-contained:
// the problems the kernel got that are not the case's own (a variant problem drawn from the case, a
// transformed input) and the transform's parameters (a permutation, a shift vector, a and b). A check
// notes them as it builds them; the runner clears them before every case and keeps them with a
// failure: printed under the counterexample and saved with it (--save-regressions).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernels/registry.hpp"

namespace fc::props {

struct Evidence {
  std::vector<std::pair<std::string, Inputs>> problems;  // (what it is, its inputs), in the order noted
  std::vector<std::string> transform;                    // one line per parameter: "a = -2", "keys permuted ..."
  bool empty() const { return problems.empty() && transform.empty(); }
};

// `role` names the problem ("variant problem", "shifted keys"); it replaces an earlier one of that role.
void note_problem(const std::string& role, const Inputs& in);
void note_transform(const std::string& line);
// The evidence noted since the last clear (this thread's).
const Evidence& noted_evidence();
void clear_evidence();

// A list of integers for a transform line: every value up to `max`, then the count of the rest.
std::string list_values(const std::vector<int64_t>& v, size_t max = 32);
std::string list_values(const std::vector<double>& v, size_t max = 32);

}  // namespace fc::props
