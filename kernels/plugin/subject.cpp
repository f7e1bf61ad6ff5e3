#include "kernels/plugin/subject.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <stdexcept>

namespace fc::plugin {
namespace {

// Head dims tried first when probing dtypes and masks (the common ones, then odd ones).
constexpr int32_t kProbeDims[] = {64, 128, 32, 16, 96, 256, 8, 80, 40, 192, 1, 7};
constexpr DType kProbeDtypes[] = {DType::F16, DType::BF16, DType::F32, DType::F64};
constexpr Mask kProbeMasks[] = {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight};

// The variants' tensors of a call (null where the problem does not use them).
HostArgs variant_args(const Inputs& in) {
  HostArgs a;
  if (in.p.varlen) a.cu_q = &in.cu_seqlens_q, a.cu_k = &in.cu_seqlens_k;
  if (is_paged(in.p)) a.page_table = &in.page_table;
  if (in.p.alibi) a.alibi = &in.alibi_slopes;
  return a;
}

// Every axis longer than 1 (batch 2, heads 2, n 16): in a problem with an axis of length 1 a strided
// layout can have a compact one's strides (DLPack ignores a length-1 axis' stride), and a kernel that
// takes compact tensors only would seem to take that layout.
Problem probe_problem(DType t, Mask m, int32_t d) {
  Problem p;
  p.batch = 2, p.heads_q = 2, p.heads_kv = 2, p.n_q = 16, p.n_k = 16, p.d = d;
  p.dtype = t, p.mask = m, p.scale = default_scale(d);
  return p;
}

}  // namespace

Subject::Subject(std::unique_ptr<Backend> backend, SubjectOptions opt)
    : backend_(std::move(backend)), opt_(std::move(opt)) {
  const Meta m = backend_->meta();
  KernelInfo& i = kernel_.info;
  i.name = m.name;
  i.device = m.device_type == kDLCUDA ? "cuda" : "cpu";
  i.description = opt_.description;
  i.backward = m.backward;
  i.writes_lse = m.writes_lse;
  i.configs = {Config{}};
  probe();
  kernel_.supports = [this](const Problem& p) { return supports(p); };
  kernel_.forward = [this](const Inputs& in, const Config&, Outputs& out) {
    HostArgs args = variant_args(in);
    args.q = &in.q, args.k = &in.k, args.v = &in.v;
    run(plan_call(in.p, layout_for(in.p, opt_.layout), false), args, {&out.o, &out.lse});
  };
  if (m.backward)
    kernel_.backward = [this](const Inputs& in, const Config&, Outputs& out) {
      HostArgs args = variant_args(in);
      args.q = &in.q, args.k = &in.k, args.v = &in.v, args.o = &out.o, args.lse = &out.lse, args.d_o = &in.d_o;
      HostOuts outs;
      outs.d_q = &out.d_q, outs.d_k = &out.d_k, outs.d_v = &out.d_v;
      run(plan_call(in.p, layout_for(in.p, opt_.layout), true), args, outs);
    };
}

bool Subject::accepts(const Problem& p, Layout layout) {
  std::string fault;
  const bool yes = backend_->supports(plan_call(p, layout, false), &fault);
  if (!fault.empty())
    throw LoadError(fmt::format("{}: supports() failed while flashcheck probed what the kernel accepts: {}",
                                kernel_.info.name, fault));
  return yes;
}

// dtypes and masks at the common head dims, then every head dim 1..256 on the first accepted pair,
// then GQA/MQA, then whether strided layouts are accepted at all.
void Subject::probe() {
  KernelInfo& i = kernel_.info;
  bool any = false;
  DType t0 = DType::F32;
  Mask m0 = Mask::None;
  int32_t d0 = 64;
  bool mask_ok[3] = {false, false, false};
  for (DType t : kProbeDtypes) {
    bool dtype_ok = false;
    for (Mask m : kProbeMasks)
      for (int32_t d : kProbeDims)
        if (accepts(probe_problem(t, m, d), Layout::Compact)) {
          if (!any) any = true, t0 = t, m0 = m, d0 = d;
          dtype_ok = mask_ok[int(m)] = true;
          break;
        }
    if (dtype_ok) i.dtypes.push_back(t);
  }
  if (!any)
    throw LoadError(
        fmt::format("{}: supports() declines every problem flashcheck offers (F16, BF16, F32, F64; "
                    "every mask; d in 1..256; batch 2, heads 2, n = 16; compact tensors)",
                    i.name));
  for (Mask m : kProbeMasks)
    if (mask_ok[int(m)]) i.masks.push_back(m);
  bool every_d = true;
  for (int32_t d = 1; d <= 256; ++d)
    if (accepts(probe_problem(t0, m0, d), Layout::Compact))
      i.head_dims.push_back(d);
    else
      every_d = false;
  if (every_d) i.head_dims.clear();  // any d
  Problem g = probe_problem(t0, m0, d0);
  g.heads_q = 4, g.heads_kv = 2;
  Problem mqa = g;
  mqa.heads_kv = 1;
  i.gqa = accepts(g, Layout::Compact) || accepts(mqa, Layout::Compact);
  probe_variants(probe_problem(t0, m0, d0));
  const Problem plain = probe_problem(t0, m0, d0);
  const bool bshd = accepts(plain, Layout::Bshd), padded = accepts(plain, Layout::Padded);
  if (opt_.layout == LayoutPolicy::Mixed && !bshd && !padded) {
    opt_.layout = LayoutPolicy::Compact;
    notes_ = "the kernel declines strided tensors: every case uses compact ones";
  } else if (opt_.layout == LayoutPolicy::Mixed) {
    notes_ = "tensors compact, bshd or padded, chosen per problem";
  } else {
    notes_ = "tensors compact";
  }
  const std::vector<std::string> names = variant_names(i.variants);
  notes_ += names.empty() ? "; no variant of contract v2" : fmt::format("; variants: {}", fmt::join(names, ", "));
}

// Each variant of contract v2 on one problem of the first accepted kind, under each accepted mask (a
// kernel may take a window only with a causal mask). supports() sees the variant's fields and which of
// its tensors are present; their data are NULL while probing.
void Subject::probe_variants(const Problem& plain) {
  Variants& v = kernel_.info.variants;
  const std::vector<Mask> masks = kernel_.info.masks;
  auto any_mask = [&](Problem p) {
    for (Mask m : masks) {
      p.mask = m;
      if (accepts(p, Layout::Compact)) return true;
    }
    return false;
  };
  Problem p = plain;
  for (int32_t d_v : {plain.d / 2, plain.d * 2, plain.d + 8}) {
    p.d_v = d_v;
    if (d_v >= 1 && d_v != plain.d && (v.d_v = any_mask(p))) break;
  }
  p = plain, p.window_left = 3, p.window_right = 0;
  Problem wide = plain;
  wide.window_left = 2, wide.window_right = 5;
  v.window = any_mask(p) || any_mask(wide);
  p = plain, p.softcap = 10;
  v.softcap = any_mask(p);
  p = plain, p.alibi = true;
  v.alibi = any_mask(p);
  p = plain, p.varlen = true, p.batch = 2, p.total_q = p.n_q + p.n_q / 2, p.total_k = p.n_k + p.n_k / 2;
  v.varlen = any_mask(p);
  p.page_size = 16, p.num_pages = 3, p.pages_per_seq = (p.n_k + 15) / 16;
  v.paged = v.varlen && any_mask(p);
  // The suite's own strided inputs are not offered: every call is re-laid out here (layout_for).
  v.strides = false;
}

bool Subject::supports(const Problem& p) {
  std::string fault;
  const CallPlan plan = plan_call(p, layout_for(p, opt_.layout), false);
  const std::lock_guard<std::mutex> lock(mutex_);
  const bool yes = backend_->supports(plan, &fault);
  if (fault.empty()) return yes;
  // The case is claimed so that it runs, and fails with the fault (shrinking then minimises it).
  for (const Pending& x : pending_)  // asked again (a law's gate, then its run): kept once
    if (std::memcmp(&x.problem, &plan.problem, sizeof plan.problem) == 0 && x.dtype == p.dtype) return true;
  if (pending_.size() >= 64) pending_.erase(pending_.begin());  // claimed cases that never ran
  pending_.push_back({plan.problem, p.dtype, "supports(): " + fault});
  return true;
}

void Subject::run(const CallPlan& plan, const HostArgs& in, const HostOuts& out) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    const bool same = std::memcmp(&plan.problem, &it->problem, sizeof plan.problem) == 0 &&
                      plan.slot[kQ].dtype.code == dl_dtype(it->dtype).code &&
                      plan.slot[kQ].dtype.bits == dl_dtype(it->dtype).bits;
    if (!same) continue;
    const std::string fault = std::move(it->fault);
    pending_.erase(it);
    throw std::runtime_error(fault);
  }
  unsigned char* arena = backend_->arena(plan.bytes);
  pack(plan, in, arena);
  before_.assign(arena, arena + plan.bytes);
  const CallResult r = backend_->run(plan);
  if (!r.ok) throw std::runtime_error(r.error);
  const std::string stray = unpack(plan, arena, before_.data(), out);
  if (!stray.empty()) throw std::runtime_error(stray);
}

}  // namespace fc::plugin
