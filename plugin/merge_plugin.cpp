#include "plugin/merge_plugin.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <vector>

#include "plugin/abi_map.hpp"
#include "plugin/loader.hpp"

namespace fc::plugin {
namespace {

int32_t dtype_code(DType t) { return kernel_float(t) ? abi_code(t) : FC_DTYPE_UNKNOWN; }

fc_merge_problem abi_problem(const MergeProblem& p, int32_t probing) {
  return {p.partials, p.rows, p.heads, p.d_v, dtype_code(p.dtype), probing};
}

// A host DLTensor over t's storage (shape and strides point into the vectors given, which outlive the call).
DLTensor view(HostTensor* t, std::vector<int64_t>& shape, std::vector<int64_t>& strides, bool probing) {
  DLTensor x{};
  shape = t->shape;
  strides = t->strides;
  if (strides.empty()) {
    strides.assign(shape.size(), 1);
    for (size_t a = shape.size(); a-- > 1;) strides[a - 1] = strides[a] * shape[a];
  }
  x.data = probing ? nullptr : t->bytes.data();
  x.device = {kDLCPU, 0};
  x.ndim = int32_t(shape.size());
  x.dtype = dl_dtype(t->dtype);
  x.shape = shape.data();
  x.strides = strides.data();
  x.byte_offset = uint64_t(t->offset) * uint64_t(dtype_size(t->dtype));
  return x;
}

// One call (probing: every data pointer NULL); its return code.
int call(const fc_kernel* k, const MergeProblem& p, HostTensor* o_p, HostTensor* lse_p, HostTensor* o, HostTensor* lse,
         bool probing) {
  std::vector<int64_t> sh[4], st[4];
  fc_merge_args a{view(o_p, sh[0], st[0], probing), view(lse_p, sh[1], st[1], probing), view(o, sh[2], st[2], probing),
                  view(lse, sh[3], st[3], probing)};
  const fc_merge_problem mp = abi_problem(p, probing ? 1 : 0);
  return k->merge(&mp, &a, nullptr);
}

bool takes(const fc_kernel* k, const MergeProblem& p) {
  HostTensor o_p(p.dtype, shape_merge_o_partial(p)), lse_p(DType::F32, shape_merge_lse_partial(p));
  MergeOutputs out = alloc_merge_outputs(p);
  return call(k, p, &o_p, &lse_p, &out.o, &out.lse, true) == 0;
}

}  // namespace

Kernel merge_kernel(const fc_kernel* k, const std::string& description) {
  const Meta m = validate(k, "the kernel");
  if (!m.merge) throw LoadError(fmt::format("{}: not a merge kernel", m.name));
  Kernel out;
  KernelInfo& i = out.info;
  i.name = m.name;
  i.device = "cpu";
  i.kind = KernelKind::Merge;
  i.description = description;
  i.external = true;
  i.masks = {};
  for (DType t : sweep_dtypes()) {
    MergeProblem p;
    p.partials = 2, p.rows = 2, p.heads = 2, p.d_v = 8, p.dtype = t;
    if (takes(k, p)) i.merge_dtypes.push_back(t);
  }
  if (i.merge_dtypes.empty())
    throw LoadError(fmt::format("{}: merge() declines every probe ({}; 2 partials, 2 rows, 2 heads, d_v 8)", m.name,
                                dtype_names(kernel_float)));
  out.merge_supports = [k](const MergeProblem& p) { return takes(k, p); };
  out.merge = [k, name = m.name](const MergeInputs& in, MergeOutputs& o) {
    HostTensor op = in.o, lp = in.lse;  // the plugin sees the inputs' own strides
    if (const int rc = call(k, in.p, &op, &lp, &o.o, &o.lse, false); rc != 0) {
      const char* why = k->last_error ? k->last_error() : nullptr;
      throw std::runtime_error(fmt::format("{}: merge returned {}{}{}", name, rc, why ? ": " : "", why ? why : ""));
    }
  };
  return out;
}

}  // namespace fc::plugin
