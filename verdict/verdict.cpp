#include "verdict/verdict.hpp"

#include <fmt/format.h>

#include "reference/gpu/oracle_select.hpp"
#include "reference/inputs64.hpp"
#include "reference/parallel.hpp"

namespace fc::verdict {

ref::Tensors64 tensors64(const Inputs& in) { return ref::tensors64(in); }

// The one call for a certificate: the oracle `--oracle` chose (reference/gpu/oracle_select.hpp).
ref::Certified certify(const Inputs& in) { return certify(in, tensors64(in)); }
ref::Certified certify(const Inputs& in, const ref::Tensors64& in64) { return ref::certify(in.p, in64); }

ref::Bounds bounds_for(const Inputs& in, const ref::Certified& c, const ref::Precision& pr) {
  return bounds_for(in, tensors64(in), c, pr);
}
ref::Bounds bounds_for(const Inputs& in, const ref::Tensors64& in64, const ref::Certified& c,
                       const ref::Precision& pr) {
  return ref::bounds(in.p, in64, c, {pr});  // the CPU's or the GPU's, as the oracle (oracle_select.hpp)
}

ref::Bounds bounds_for(const Inputs& in, const ref::Tensors64& in64, const ref::Certified& c,
                       const std::vector<ref::Precision>& candidates) {
  // Each row block's products computed once for all the candidates.
  return ref::bounds(in.p, in64, c, candidates);
}

ref::Bounds bounds_for(const Kernel& k, const Inputs& in, const Config& cfg, const ref::Certified& c) {
  return bounds_for(in, c, precision_of(k, cfg, in.p));
}

Oracle oracle(const Kernel& k, const Inputs& in, const Config& cfg) {
  const ref::Tensors64 in64 = tensors64(in);  // once for both: a long row's K and V are ~10^8 values
  Oracle o;
  o.ref = certify(in, in64);
  o.bounds = bounds_for(in, in64, o.ref, precision_of(k, cfg, in.p));
  return o;
}

std::vector<TensorVerdict> hold(const Inputs& in, const Outputs& out, const ref::Certified& c, const ref::Bounds& b,
                                bool lse) {
  const Problem& p = in.p;  // each output in its own dtype (per-tensor dtypes: o's, q's, k/v's)
  struct HeldSpec {
    const char* name;
    const HostTensor* t;
    const std::vector<double>*ref, *bound;
    DType dt;
  };
  std::vector<HeldSpec> specs = {{"o", &out.o, &c.value.o, &b.o, dtype_o(p)}};
  if (lse) specs.push_back({"lse", &out.lse, &c.value.lse, &b.lse, lse_dtype(p)});
  if (out.has_grads()) {
    specs.push_back({"d_q", &out.d_q, &c.value.d_q, &b.d_q, dtype_q(p)});
    specs.push_back({"d_k", &out.d_k, &c.value.d_k, &b.d_k, dtype_kv(p)});
    specs.push_back({"d_v", &out.d_v, &c.value.d_v, &b.d_v, dtype_kv(p)});
  }
  std::erase_if(specs, [](const HeldSpec& s) { return s.ref->empty() || s.t->shape.empty(); });
  std::vector<TensorVerdict> held(specs.size());
  const ref::SerialScope small(c.value.o.size() + c.value.d_q.size() < (size_t(1) << 16));
  ref::parallel_for(int64_t(specs.size()), [&](int64_t x) {  // widened side by side
    const HeldSpec& s = specs[size_t(x)];
    TensorVerdict& v = held[size_t(x)];
    v.tensor = s.name, v.dtype = s.dt, v.got = s.t->to_f64(), v.ref = s.ref, v.bound = s.bound;
  });
  // Then held one after another, each on every thread (within_bound's chunks): side by side, a
  // training shape's four gradients would keep four threads busy and leave the rest idle.
  for (size_t x = 0; x < specs.size(); ++x)
    if (!specs[x].bound->empty())
      held[x].held = ref::within_bound(held[x].got, *specs[x].ref, *specs[x].bound, specs[x].dt);
  return held;
}

std::string failures(const Problem& p, const std::vector<TensorVerdict>& held) {
  std::string msg;
  for (const TensorVerdict& t : held) {
    const ref::Verdict& v = t.held;
    if (v.ok) continue;
    if (v.worst < 0) {
      msg += fmt::format("{}: {}\n", t.tensor, v.why);
      continue;
    }
    msg += fmt::format("{}: {} = {:.9g}, reference {:.17g}, |error| {:.3g} > bound {:.3g} ({})\n", t.tensor,
                       element_name(p, t.tensor, v.worst), t.got[size_t(v.worst)], (*t.ref)[size_t(v.worst)],
                       v.measured, v.bound, v.why);
  }
  return msg;
}

std::string check_outputs(const Kernel& k, const Inputs& in, const Outputs& out, const Oracle& o) {
  return failures(in.p, hold(in, out, o.ref, o.bounds, k.info.writes_lse));
}

}  // namespace fc::verdict
