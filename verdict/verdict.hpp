// A kernel run held to the certified reference: the oracle (CPU or GPU, as `--oracle` chose:
// reference/gpu/oracle_select.hpp), the a-priori bound for the precision the kernel declares
// (reference/bounds.hpp), and the verdict, tensor by tensor, the failing element named. The one place
// where a run's bound and its within-bound verdict are computed: the laws (properties/), the fuzz
// judge (fuzz/) and the audit and compare reports (reports/, which measure their metrics beside it)
// all call it.
#pragma once

#include <string>
#include <vector>

#include "kernels/registry.hpp"
#include "reference/bounds.hpp"
#include "verdict/execute.hpp"

namespace fc::verdict {

// The inputs in float64, as the oracle and the bound read them.
ref::Tensors64 tensors64(const Inputs& in);

// The certified reference of a case: the oracle `--oracle` chose. in64: tensors64(in), for a caller
// that bounds the case too (bounds_for with in64), so that its inputs are converted once.
ref::Certified certify(const Inputs& in);
ref::Certified certify(const Inputs& in, const ref::Tensors64& in64);

// The bound on |output - c.value| of a kernel of precision pr on in (c: in's certificate); of the
// largest over candidate precisions (`compare`, whose outputs come from an unknown tile); of kernel k
// under cfg (precision_of).
ref::Bounds bounds_for(const Inputs& in, const ref::Certified& c, const ref::Precision& pr);
ref::Bounds bounds_for(const Inputs& in, const ref::Tensors64& in64, const ref::Certified& c, const ref::Precision& pr);
ref::Bounds bounds_for(const Inputs& in, const ref::Tensors64& in64, const ref::Certified& c,
                       const std::vector<ref::Precision>& candidates);
ref::Bounds bounds_for(const Kernel& k, const Inputs& in, const Config& cfg, const ref::Certified& c);

// The certified reference of a case and the bound for one kernel/config (the inputs converted to
// float64 once for both: a long row's K and V are ~10^8 values).
struct Oracle {
  ref::Certified ref;
  ref::Bounds bounds;
};
Oracle oracle(const Kernel& k, const Inputs& in, const Config& cfg);

// One output tensor of a run against its reference and bound.
struct TensorVerdict {
  const char* tensor = "";                     // "o", "lse", "d_q", "d_k", "d_v"
  DType dtype = DType::F32;                    // the output's type (the contract's: lse_dtype for lse)
  std::vector<double> got;                     // the run's values
  const std::vector<double>* ref = nullptr;    // the certified reference's (the certificate's storage)
  const std::vector<double>* bound = nullptr;  // the bound (the Bounds' storage); empty: no verdict asked
  ref::Verdict held;                           // ref::within_bound; ok when the bound is empty
};

// The tensors a run is judged on, in report order: o, lse when `lse` (the kernel writes it), and
// d_q, d_k, d_v when out has gradients; each only where both the run and the reference have it (a
// caller that checks one row of a big case gives no d_k, d_v). Empty bounds (the audit's baseline,
// which only lends its errors) give every tensor its values and no verdict. The verdicts point into c
// and b, which must outlive them: temporaries are refused.
std::vector<TensorVerdict> hold(const Inputs& in, const Outputs& out, const ref::Certified& c, const ref::Bounds& b,
                                bool lse);
std::vector<TensorVerdict> hold(const Inputs&, const Outputs&, ref::Certified&&, const ref::Bounds&, bool) = delete;
std::vector<TensorVerdict> hold(const Inputs&, const Outputs&, const ref::Certified&, ref::Bounds&&, bool) = delete;

// Every held tensor within its bound: "" or one line per failing tensor, naming the element.
std::string failures(const Problem& p, const std::vector<TensorVerdict>& held);

// hold and failures for kernel k's run on in against its oracle.
std::string check_outputs(const Kernel& k, const Inputs& in, const Outputs& out, const Oracle& o);

}  // namespace fc::verdict
