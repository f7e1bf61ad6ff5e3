// Running a kernel on a case, and holding its outputs against the certified reference within the
// error bound of reference/bounds.hpp for that kernel's precision.
#pragma once

#include <string>

#include "kernels/registry.hpp"
#include "reference/bounds.hpp"

namespace fc::props {

// The arithmetic the error model charges kernel k under cfg on p: storage = p.dtype (per-tensor dtypes:
// ref::precision_for) and what the
// kernel declares (KernelInfo::arithmetic; undeclared_arithmetic when it declares nothing).
ref::Precision precision_of(const Kernel& k, const Config& cfg, const Problem& p);

ref::Tensors64 tensors64(const Inputs& in);

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
// NotApplicable (laws.hpp) is thrown instead, so a law's derived problem (a varlen batch's sequence
// run alone, a paged batch's contiguous twin, a relayout) passes the gate every generated case passes.
Run execute(const Kernel& k, const Inputs& in, const Config& cfg, bool backward);

// The certified reference of a case and the bound for one kernel/config.
struct Oracle {
  ref::Certified ref;
  ref::Bounds bounds;
};
ref::Certified certify(const Inputs& in);
Oracle oracle(const Kernel& k, const Inputs& in, const Config& cfg);
ref::Bounds bounds_for(const Kernel& k, const Inputs& in, const Config& cfg, const ref::Certified& c);

// Every output tensor within its bound: "" or one line per failing tensor, naming the element.
std::string check_outputs(const Kernel& k, const Inputs& in, const Outputs& out, const Oracle& o);

// "o[b=0,h=1,i=2,c=3]" for a flat index into o/d_q (rank 4 query-shaped), d_k/d_v, or lse.
std::string element_name(const Problem& p, const char* tensor, int64_t flat);

}  // namespace fc::props
