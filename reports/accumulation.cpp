#include "reports/accumulation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "kernels/cpu/cpu_kernels.hpp"

namespace fc::report {

namespace {

constexpr int32_t kCheckedRows = 256;  // rows checked past N = 1024 (each costs O(N d) in the oracle)

// A cpu_tiled forward with an explicit tiling and accumulation type.
Subject tiled_variant(const std::string& name, cpu::Tiling t, DType accum) {
  Subject s;
  s.name = name;
  s.device = "cpu";
  const char* p_type = t.p_operand == cpu::POperand::Storage ? "storage"
                       : t.p_operand == cpu::POperand::BF16  ? "BF16"
                                                             : "F32";
  s.config = fmt::format("{}x{} {} acc={} P={}", t.block_m, t.block_n, t.order == LoopOrder::FA1 ? "FA1" : "FA2",
                         dtype_name(accum), p_type);
  s.cut_rows = true;
  s.claims = [](const CaseSpec&) { return true; };
  s.run = [t, accum](const Inputs& in, bool) {
    Outputs out;
    out.o = HostTensor(in.p.dtype, shape_q(in.p));      // (batch, heads_q, n_q, d)
    out.lse = HostTensor(DType::F32, shape_lse(in.p));  // (batch, heads_q, n_q)
    cpu::tiled_forward(in, t, accum, out);
    return out;
  };
  s.precision = [t, accum](const Problem& p) {  // cpu_tiled's declaration for this tiling
    Config cfg;
    cfg.block_m = t.block_m, cfg.block_n = t.block_n, cfg.order = t.order, cfg.accum = accum;
    ref::Precision pr;
    pr.storage = p.dtype;
    pr.ar = cpu::tiled_arithmetic(p, cfg);
    pr.ar.rounds_p = t.p_operand != cpu::POperand::Accum;
    if (t.p_operand == cpu::POperand::BF16) pr.ar.p_type = DType::BF16;  // coarser than storage or not
    return pr;
  };
  return s;
}

std::vector<Subject> cpu_variants() {
  auto tiling = [](int32_t m, int32_t n, LoopOrder order = LoopOrder::FA2,
                   cpu::POperand p_operand = cpu::POperand::Storage) {
    cpu::Tiling t;
    t.block_m = m, t.block_n = n, t.order = order, t.p_operand = p_operand;
    return t;
  };
  std::vector<Subject> v = {
      tiled_variant("cpu_tiled", tiling(64, 64), DType::F32),
      tiled_variant("cpu_tiled:acc=f16", tiling(64, 64), DType::F16),
      tiled_variant("cpu_tiled:p=f32", tiling(64, 64, LoopOrder::FA2, cpu::POperand::Accum), DType::F32),
      // an fp16 kernel whose P fragment is bf16 (for bf16 storage, cpu_tiled itself)
      tiled_variant("cpu_tiled:p=bf16", tiling(64, 64, LoopOrder::FA2, cpu::POperand::BF16), DType::F32),
      tiled_variant("cpu_tiled:fa1", tiling(64, 64, LoopOrder::FA1), DType::F32),
      tiled_variant("cpu_tiled:16x16", tiling(16, 16), DType::F32),
      tiled_variant("cpu_tiled:128x128", tiling(128, 128), DType::F32),
  };
  const Kernel* naive = find_kernel("cpu_naive");
  if (!naive) throw std::logic_error("cpu_naive is not registered");
  v.push_back(subject_of(*naive, Config{}));
  Config f16;
  f16.accum = DType::F16;
  Subject n16 = subject_of(*naive, f16);
  n16.name = "cpu_naive:acc=f16";
  v.push_back(n16);
  for (Subject& s : v) s.backward = false, s.claims = [](const CaseSpec&) { return true; };
  return v;
}

std::vector<CaseSpec> cases_of(DType t, bool gpu) {
  std::vector<CaseSpec> out;
  std::vector<int32_t> ns = {64, 256, 1024, 4096, 16384};
  if (gpu) ns.push_back(65536);
  for (const char* regime : {"normal", "positive_v"})
    for (int32_t n : ns) {
      CaseSpec c;
      c.regime = regime;
      c.positive_v = std::string(regime) == "positive_v";
      c.p = Problem{1, 1, 1, n, n, 64, t, Mask::None, default_scale(64)};
      c.id = fmt::format("acc/{}/{}/n{}", dtype_name(t), regime, n);
      c.rows = n > 1024 ? kCheckedRows : 0;
      c.gpu_only = n > 16384;
      out.push_back(c);
    }
  return out;
}

}  // namespace

Selection accumulation_subjects(const std::vector<std::string>& kernels) {
  Selection sel;
  std::vector<Subject> variants = cpu_variants();
  auto add = [&](Subject s) {
    if (std::find(sel.names.begin(), sel.names.end(), s.name) != sel.names.end()) return;
    sel.names.push_back(s.name);
    sel.subjects.push_back(std::move(s));
  };
  auto add_kernel = [&](const Kernel& k) {
    if (!device_present(k.info.device)) {
      sel.skipped.emplace_back(k.info.name, "no " + k.info.device + " device on this machine");
      return;
    }
    Subject s = subject_of(k, audit_config(k));
    s.backward = false;
    add(std::move(s));
  };
  if (kernels.empty()) {
    for (Subject& s : variants) add(std::move(s));
    for (const Kernel& k : registry())
      if (!k.info.mutant && k.info.device != "cpu") add_kernel(k);
    return sel;
  }
  for (const std::string& name : kernels) {
    auto it = std::find_if(variants.begin(), variants.end(), [&](const Subject& s) { return s.name == name; });
    if (it != variants.end()) {
      add(*it);
    } else if (const Kernel* k = find_kernel(name)) {
      add_kernel(*k);
    } else {
      throw std::invalid_argument(
          fmt::format("--kernel {}: neither an accumulation variant (cpu_tiled, cpu_tiled:acc=f16, cpu_tiled:p=f32, "
                      "cpu_tiled:p=bf16, cpu_tiled:fa1, cpu_tiled:16x16, cpu_tiled:128x128, cpu_naive, "
                      "cpu_naive:acc=f16) nor a kernel",
                      name));
    }
  }
  return sel;
}

std::vector<CaseSpec> accumulation_plan(const PlanOptions& o) {
  std::vector<CaseSpec> plan;
  for (DType t : o.dtypes)
    for (CaseSpec& c : cases_of(t, o.gpu))
      if (o.regimes.empty() || std::find(o.regimes.begin(), o.regimes.end(), c.regime) != o.regimes.end())
        plan.push_back(std::move(c));
  for (size_t i = 0; i < plan.size(); ++i) plan[i].seq = int32_t(i);
  return plan;
}

bool find_accumulation_case(const std::string& id, CaseSpec* out) {
  for (DType t : sweep_dtypes())
    for (const CaseSpec& c : cases_of(t, true))
      if (c.id == id) return *out = c, true;
  return false;
}

}  // namespace fc::report
