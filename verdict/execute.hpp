// Running a case on a kernel: the gate of what it claims, hostile memory around its inputs, guards
// around its outputs, its refusal carried as a value, and the lse its backward reads. The first half
// of verdict/ (verdict.hpp holds the run to the certified reference).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/registry.hpp"
#include "reference/bounds.hpp"

namespace fc::verdict {

// Thrown when a case lies outside what is being judged: a problem the kernel does not claim
// (execute), or, thrown by a law's check (properties/), a case outside the law's domain (a transform
// that is not exact in storage, no fully masked row, ...). The runner discards such a random case;
// on one input file (`check --inputs`) the law reports "n/a" with the reason.
struct NotApplicable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The arithmetic the error model charges kernel k under cfg on p: storage = p.dtype (per-tensor dtypes:
// ref::precision_for) and what the kernel declares (KernelInfo::arithmetic; undeclared_arithmetic
// when it declares nothing).
ref::Precision precision_of(const Kernel& k, const Config& cfg, const Problem& p);

struct Run {
  Outputs out;
  std::string error;     // non-empty when the kernel threw
  bool refused = false;  // what it threw was a Refusal (registry.hpp): a config it declines, not a wrong answer
};
// Both runs' errors, empty when neither failed.
inline std::string run_errors(const Run& a, const Run& b) { return a.error + b.error; }
// Forward (and backward when asked and in.d_o is present). A kernel that writes no lse gets the
// certified one (rounded to fp32) for its backward, as the plugin ABI promises. A problem the kernel
// does not claim (claims(k, in): its declarations and supports(), strides included) is never sent:
// NotApplicable is thrown instead, so a law's derived problem (a varlen batch's sequence run alone, a
// paged batch's contiguous twin, a relayout) passes the gate every generated case passes.
Run execute(const Kernel& k, const Inputs& in, const Config& cfg, bool backward);

// "o[b=0,h=1,i=2,c=3]" for a flat index into o/d_q (rank 4 query-shaped), d_k/d_v, or lse.
std::string element_name(const Problem& p, const char* tensor, int64_t flat);

}  // namespace fc::verdict
