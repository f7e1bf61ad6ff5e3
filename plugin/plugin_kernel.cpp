#include "plugin/plugin_kernel.hpp"

#include "plugin/executor.hpp"
#include "plugin/merge_plugin.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <stdexcept>

namespace fc::plugin {
namespace {

// Head dims tried first when probing dtypes and masks (the common ones, then odd ones).
constexpr int32_t kProbeDims[] = {64, 128, 32, 16, 96, 256, 8, 80, 40, 192, 1, 7};
constexpr Mask kProbeMasks[] = {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight};

// The variants' tensors of a call (null where the problem does not use them).
HostArgs variant_args(const Inputs& in) {
  HostArgs a;
  if (in.p.varlen) a.cu_q = &in.cu_seqlens_q, a.cu_k = &in.cu_seqlens_k;
  if (is_paged(in.p)) a.page_table = &in.page_table;
  if (in.p.alibi) a.alibi = &in.alibi_slopes;
  if (in.p.sinks) a.sinks = &in.sinks;
  if (in.p.padded) a.cu_q_padded = &in.cu_seqlens_q_padded, a.cu_k_padded = &in.cu_seqlens_k_padded;
  if (has_mask_tensor(in.p)) a.mask = &in.mask;
  if (has_block_mask(in.p)) a.block_mask = &in.block_mask;
  return a;
}

Lengths lengths_of(const fc_lengths& l) {
  Lengths x;
  x.multiple = std::max(l.multiple_of, 1), x.residue = x.multiple > 1 ? l.residue : 0;
  x.min = l.min,
  x.max = l.max;  // 0 admits empty sequences, as the contract does; a kernel declares min 1 to decline them
  return x;
}

DType dtype_of(int32_t code, DType dflt) { return dtype_of_abi(code, dflt); }

// The declared arithmetic (fc_arithmetic) as the error model's Arithmetic for one problem and
// config. FC_SUM_SERIAL is kernels/cpu/arithmetic.cpp's FA2 tiling (tiled_arithmetic) with the
// declared accumulator, products, P rounding and libm; FC_SUM_TENSOR_CORE is tensor_core_arithmetic
// (d_q merged in any order per key tile when the backward reduces with atomics). A tile the config
// does not name is the declaration's; an unknown block_n is charged a rescale after every key.
Arithmetic plugin_arithmetic(const fc_arithmetic& d, bool atomic, const Problem& p, const Config& cfg) {
  const int32_t bm = cfg.block_m > 0 ? cfg.block_m : std::max(d.block_m, 1);
  const int32_t bn = cfg.block_n > 0 ? cfg.block_n : std::max(d.block_n, 1);
  // Per-tensor dtypes: tensor cores take their operands in the coarsest type; a serial kernel reads each
  // tensor in its own type (exact), so its operand type is the finest, and a product of two inputs is
  // exact in fp32 when their significands fit in 24 bits together (16-bit by 16-bit).
  const DtypeSet t = dtypes_of(p);
  if (d.summation == FC_SUM_TENSOR_CORE) return tensor_core_arithmetic(coarsest(t), bm, bn, atomic ? bn : 0);
  const bool all64 = t.q == DType::F64 && t.kv == DType::F64 && t.o == DType::F64;
  const DType acc = all64 ? DType::F64 : dtype_of(d.accumulator, DType::F32);
  const DType soft = acc == DType::F64 ? DType::F64 : DType::F32;
  const DType finest = significand_bits(t.q) >= significand_bits(t.kv) && significand_bits(t.q) >= significand_bits(t.o)
                           ? t.q
                       : significand_bits(t.kv) >= significand_bits(t.o) ? t.kv
                                                                         : t.o;
  Arithmetic a;
  a.soft = soft;
  a.operand = significand_bits(acc) < significand_bits(finest) ? acc : finest;
  const bool fused = d.fused_products != 0;
  auto exact = [&](DType x, DType y) { return fused || significand_bits(x) + significand_bits(y) <= 24; };
  a.s = serial_chain(soft, exact(t.q, t.kv));   // over d, in the softmax type
  a.dp = serial_chain(soft, exact(t.o, t.kv));  // d_o . v
  a.d_o_o = serial_chain(soft, exact(t.o, t.o));
  a.dq = a.dkv = a.pv = serial_chain(acc, fused);
  a.l = serial_chain(soft, true);
  a.pv.block = a.l.block = bn;
  a.pv.merge = a.l.merge = Merge::Rescale;
  a.pv.merge_old =
      significand_bits(acc) < significand_bits(soft) ? 2 : 1;  // a narrow accumulator rounds the rescale again
  if (atomic) a.dq.block = bn, a.dq.merge = Merge::AnyOrder;
  a.block_m = bm;
  a.rounds_p = d.p_unrounded == 0;
  a.p_type = dtype_of(d.p_type, DType::F64);
  a.o_normalise = 1;
  a.exp_ulps = d.exp_ulps > 0 ? d.exp_ulps : 4;
  a.log_ulps = d.log_ulps > 0 ? d.log_ulps : 4;
  a.tanh_ulps = 4;
  a.exp_exact_at_zero = d.exp_exact_at_zero != 0;
  a.flush_subnormals = d.flushes_subnormals != 0;
  return a;
}

}  // namespace

// Every axis longer than 1 (batch 2, heads 2, n 16) where the declarations allow: in a problem with
// an axis of length 1 a strided layout can have a compact one's strides (DLPack ignores a length-1
// axis' stride), and a kernel that takes compact tensors only would seem to take that layout. The
// lengths, batch, heads and scale are moved inside what the kernel declares.
Problem PluginKernel::probe_problem(DtypeSet t, Mask m, int32_t d) const {
  const KernelInfo& i = kernel_.info;
  Problem p;
  p.batch = i.max_batch > 0 ? std::min(2, i.max_batch) : 2;
  p.heads_q = p.heads_kv = i.max_heads > 0 ? std::min(2, i.max_heads) : 2;
  p.n_q = i.n_q.snap(16), p.n_k = i.n_k.snap(16), p.d = d;
  set_dtypes(p, t);
  p.mask = m, p.scale = i.fixed_scale > 0 ? i.fixed_scale : default_scale(d);
  return p;
}

// The configuration a call runs under: the declared one the suite's Config names (its tiles, splits
// and deterministic flag), else one with the same tiles and splits, else the first.
int32_t PluginKernel::config_index(const Config& c) const {
  const Declared& d = declared_;
  auto same_tiles = [&](const fc_config& x) {
    return x.block_m == c.block_m && x.block_n == c.block_n && x.splits == c.splits;
  };
  for (int32_t i = 0; i < d.num_configs; ++i)
    if (same_tiles(d.configs[i]) && (d.configs[i].deterministic != 0) == c.deterministic) return i;
  for (int32_t i = 0; i < d.num_configs; ++i)
    if (same_tiles(d.configs[i])) return i;
  return 0;
}

// The size bounds asked for, within the declarations: LoadError when they leave no length.
void PluginKernel::bound() {
  KernelInfo& i = kernel_.info;
  auto clamp = [](int32_t& have, int32_t cap) { have = have > 0 ? std::min(have, cap) : cap; };
  if (opt_.max_n > 0) {
    clamp(i.n_q.max, opt_.max_n), clamp(i.n_k.max, opt_.max_n);
    for (const Lengths* l : {&i.n_q, &i.n_k})
      if (l->snap(1) == 0 || !l->admits(l->snap(1)))
        throw LoadError(fmt::format("{}: --max-n {} leaves no length the kernel declares ({} mod {}, >= {})", i.name,
                                    opt_.max_n, l->residue, l->multiple, l->min));
  }
  if (opt_.shape_buckets) {
    i.n_q.pow2 = i.n_k.pow2 = true;
    for (const Lengths* l : {&i.n_q, &i.n_k})
      if (l->snap(1) == 0)
        throw LoadError(
            fmt::format("{}: --shape-buckets: no power of two is a length the kernel declares ({} mod {}, "
                        "in [{}, {}])",
                        i.name, l->residue, l->multiple, l->min, l->max));
  }
  if (opt_.max_batch > 0) clamp(i.max_batch, opt_.max_batch);
  if (opt_.max_heads > 0) clamp(i.max_heads, opt_.max_heads);
}

void PluginKernel::declare() {
  KernelInfo& i = kernel_.info;
  const Declared& d = declared_;
  if (!d.present) return;
  i.n_q = lengths_of(d.n_q), i.n_k = lengths_of(d.n_k);
  i.max_batch = d.max_batch, i.max_heads = d.max_heads;
  i.fixed_scale = d.scale;
  i.exact.rows = d.exact.rows != 0, i.exact.d_q_rows = d.exact.d_q_rows != 0;
  i.exact.shared_scores = d.exact.shared_scores != 0, i.exact.tile_weights = d.exact.tile_weights != 0;
  i.exact.exact_scores = d.exact.exact_scores != 0;
  i.atomic_backward = d.backward_reduction == FC_BACKWARD_ATOMIC;
  if (i.atomic_backward) i.exact.d_q_rows = false;  // atomics are no exact d_q rows
  i.large_offsets = d.large_offsets != 0;
  if (d.num_configs > 0) {
    i.configs.clear();
    for (int32_t x = 0; x < d.num_configs; ++x) {
      Config c;
      c.block_m = d.configs[x].block_m, c.block_n = d.configs[x].block_n;
      c.splits = d.configs[x].splits, c.deterministic = d.configs[x].deterministic != 0;
      i.configs.push_back(c);
    }
  }
  if (d.arithmetic.summation != FC_SUM_UNKNOWN) {
    const fc_arithmetic a = d.arithmetic;
    const bool atomic = i.atomic_backward;
    i.arithmetic = [a, atomic](const Problem& p, const Config& c) { return plugin_arithmetic(a, atomic, p, c); };
  }
}

PluginKernel::PluginKernel(std::unique_ptr<Backend> backend, PluginKernelOptions opt)
    : backend_(std::move(backend)), opt_(std::move(opt)) {
  const Meta m = backend_->meta();
  if (m.merge) {  // a merge-state kernel (ABI version 5): no attention probe, its calls in this process
    const fc_kernel* k = backend_->in_process_kernel();
    if (!k)
      throw LoadError(
          fmt::format("{}: a merge-state kernel runs in flashcheck's process: add --isolation none", m.name));
    kernel_ = merge_kernel(k, opt_.description);
    return;
  }
  KernelInfo& i = kernel_.info;
  i.name = m.name;
  i.device = m.device_type == kDLCUDA ? "cuda" : "cpu";
  i.description = opt_.description;
  i.backward = m.backward;
  i.writes_lse = m.writes_lse;
  i.configs = {Config{}};
  i.external = true;
  declared_ = m.declared;
  declare();
  bound();
  probe();
  kernel_.supports = [this](const Problem& p) { return supports(p); };
  kernel_.forward = [this](const Inputs& in, const Config& cfg, Outputs& out) {
    HostArgs args = variant_args(in);
    args.q = &in.q, args.k = &in.k, args.v = &in.v;
    CallPlan plan = plan_call(in.p, layout_for(in.p, opt_.layout), false);
    plan.problem.config = config_index(cfg);
    run(plan, args, {&out.o, &out.lse});
  };
  if (m.backward)
    kernel_.backward = [this](const Inputs& in, const Config& cfg, Outputs& out) {
      HostArgs args = variant_args(in);
      args.q = &in.q, args.k = &in.k, args.v = &in.v, args.o = &out.o, args.lse = &out.lse, args.d_o = &in.d_o;
      HostOuts outs;
      outs.d_q = &out.d_q, outs.d_k = &out.d_k, outs.d_v = &out.d_v;
      CallPlan plan = plan_call(in.p, layout_for(in.p, opt_.layout), true);
      plan.problem.config = config_index(cfg);
      run(plan, args, outs);
    };
}

bool PluginKernel::accepts(const Problem& p, Layout layout) {
  std::string fault;
  CallPlan plan = plan_call(p, layout, false);
  plan.probing = 1;
  const bool yes = backend_->supports(plan, &fault);
  if (!fault.empty())
    throw LoadError(fmt::format("{}: supports() failed while flashcheck probed what the kernel accepts: {}",
                                kernel_.info.name, fault));
  return yes;
}

// dtypes and masks at the common head dims, then every head dim 1..256 on the first accepted pair,
// then GQA/MQA, then whether strided layouts are accepted at all. Declared dtype combinations are
// asked instead of the four single dtypes; one that supports() declines at every mask and head dim
// contradicts the declaration (LoadError).
void PluginKernel::probe() {
  KernelInfo& i = kernel_.info;
  bool any = false;
  DtypeSet t0{};
  Mask m0 = Mask::None;
  int32_t d0 = 64;
  bool mask_ok[3] = {false, false, false};
  std::vector<int32_t> dims(std::begin(kProbeDims), std::end(kProbeDims));
  if (declared_.num_head_dims > 0) dims.assign(declared_.head_dims, declared_.head_dims + declared_.num_head_dims);
  std::vector<DtypeSet> sets;
  for (DType t : dtypes_in_order(abi_float)) sets.push_back({t, t, t});  // F16, BF16, F32, F64
  if (declared_.num_dtypes > 0) {
    sets.clear();
    for (int32_t x = 0; x < declared_.num_dtypes; ++x) {
      const fc_dtypes& c = declared_.dtypes[x];
      sets.push_back({dtype_of(c.q, DType::F32), dtype_of(c.kv, DType::F32), dtype_of(c.o, DType::F32)});
    }
  }
  for (const DtypeSet& t : sets) {
    bool dtype_ok = false;
    for (Mask m : kProbeMasks)
      for (int32_t d : dims)
        if (accepts(probe_problem(t, m, d), Layout::Compact)) {
          if (!any) any = true, t0 = t, m0 = m, d0 = d;
          dtype_ok = mask_ok[int(m)] = true;
          break;
        }
    if (dtype_ok) (t.uniform() ? i.dtypes.push_back(t.q) : i.mixed_dtypes.push_back(t));
    if (!dtype_ok && declared_.num_dtypes > 0) {
      Problem p;
      set_dtypes(p, t);
      throw LoadError(
          fmt::format("{}: declarations.dtypes names {{{}}}, but supports() declines it at every mask and "
                      "head dim flashcheck offers",
                      i.name, dtypes_str(p)));
    }
  }
  if (!any) {
    const Problem p = probe_problem({DType::F32, DType::F32, DType::F32}, Mask::None, dims.front());
    throw LoadError(fmt::format(
        "{}: supports() declines every problem flashcheck offers ({}; every mask; d in {}; "
        "batch {}, heads {}, n_q = {}, n_k = {}; compact tensors){}",
        i.name, dtype_names(abi_float), declared_.num_head_dims > 0 ? "the declared head dims" : "1..256", p.batch,
        p.heads_q, p.n_q, p.n_k,
        declared_.present ? "" : "; a kernel that takes only some lengths declares them (fc_declarations)"));
  }
  for (Mask m : kProbeMasks)
    if (mask_ok[int(m)]) i.masks.push_back(m);
  bool every_d = declared_.num_head_dims == 0;
  if (declared_.num_head_dims > 0) {
    for (int32_t d : dims)
      if (accepts(probe_problem(t0, m0, d), Layout::Compact) &&
          std::find(i.head_dims.begin(), i.head_dims.end(), d) == i.head_dims.end())
        i.head_dims.push_back(d);
  } else {
    for (int32_t d = 1; d <= 256; ++d)
      if (accepts(probe_problem(t0, m0, d), Layout::Compact))
        i.head_dims.push_back(d);
      else
        every_d = false;
  }
  if (every_d) i.head_dims.clear();  // any d
  Problem g = probe_problem(t0, m0, d0);
  g.heads_q = 4, g.heads_kv = 2;
  if (i.max_heads > 0 && i.max_heads < 4) g.heads_q = i.max_heads, g.heads_kv = 1;
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
  // The hostile harness (docs/laws.md): what every call of this kernel meets.
  notes_ += "; NaN in gaps, unused page slots and padding tokens";
  if (i.device == "cuda")
    notes_ += producer_allowed() ? "; inputs written on the stream by a producer kernel on half the problems"
                                 : "; inputs uploaded and synchronised (no producer mode behind the C API)";
}

// Each variant of contract v2 on one problem of the first accepted kind, under each accepted mask (a
// kernel may take a window only with a causal mask). supports() sees the variant's fields and which of
// its tensors are present; their data are NULL while probing.
void PluginKernel::probe_variants(const Problem& plain) {
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
  // Attention sinks reach a kernel of ABI version 4 that declares them (fc_problem.sinks).
  p = plain, p.sinks = true;
  v.sinks = declared_.sinks != 0 && any_mask(p);
  // Padded varlen reaches a kernel of ABI version 5 that declares it (fc_problem.cu_seqlens_*_padded).
  p = plain, p.varlen = true, p.padded = true, p.batch = 2;
  p.total_q = p.n_q + p.n_q / 2 + 3, p.total_k = p.n_k + p.n_k / 2 + 2;
  v.padded = declared_.padded_varlen != 0 && v.varlen && any_mask(p);
  // Mask tensors and block masks reach a kernel of ABI version 5 that declares them; additive masks in
  // the dtypes it declares (probed in the first of them).
  p = plain, p.mask_kind = MaskKind::Bool;
  v.mask_bool = (declared_.mask_tensors & 1) != 0 && any_mask(p);
  std::vector<DType>& mask_dtypes = kernel_.info.mask_dtypes;
  mask_dtypes.clear();
  for (DType t : kernel_floats())  // F32, F16, BF16
    if (declared_.mask_dtypes & (1 << abi_code(t))) mask_dtypes.push_back(t);
  v.mask_additive = false;
  if ((declared_.mask_tensors & 2) != 0 && !mask_dtypes.empty()) {
    p = plain, p.mask_kind = MaskKind::Additive, p.mask_dtype = mask_dtypes[0];
    v.mask_additive = any_mask(p);
  }
  p = plain, p.block_q = p.block_k = 16;
  v.block_mask = declared_.block_masks != 0 && any_mask(p);
}

bool PluginKernel::supports(const Problem& p) {
  std::string fault;
  const CallPlan plan = plan_call(p, layout_for(p, opt_.layout), false);
  const std::lock_guard<std::mutex> lock(mutex_);
  const bool yes = backend_->supports(plan, &fault);
  if (fault.empty()) return yes;
  // The case is claimed so that it runs, and fails with the fault (shrinking then minimises it).
  for (const Pending& x : pending_)  // asked again (a law's gate, then its run): kept once
    if (std::memcmp(&x.problem, &plan.problem, sizeof plan.problem) == 0 && x.dtypes == dtypes_of(p)) return true;
  if (pending_.size() >= 64) pending_.erase(pending_.begin());  // claimed cases that never ran
  pending_.push_back({plan.problem, dtypes_of(p), "supports(): " + fault});
  return true;
}

void PluginKernel::run(const CallPlan& plan, const HostArgs& in, const HostOuts& out) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    auto same_dtype = [&](int32_t slot, DType t) {
      return plan.slot[slot].dtype.code == dl_dtype(t).code && plan.slot[slot].dtype.bits == dl_dtype(t).bits;
    };
    const bool same = std::memcmp(&plan.problem, &it->problem, sizeof plan.problem) == 0 &&
                      same_dtype(kQ, it->dtypes.q) && same_dtype(kK, it->dtypes.kv) && same_dtype(kO, it->dtypes.o);
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
