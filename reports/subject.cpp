#include "reports/subject.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "verdict/verdict.hpp"

namespace fc::report {

Config audit_config(const Kernel& k) {
  if (k.info.any_tile || k.info.configs.empty()) return Config{};
  return k.info.configs.front();
}

std::string config_name(const Config& c) {
  std::string s = c.block_m == 0 && c.block_n == 0 ? "default" : fmt::format("{}x{}", c.block_m, c.block_n);
  if (c.order == LoopOrder::FA1) s += " FA1";
  if (c.accum != DType::F32) s += fmt::format(" acc={}", dtype_name(c.accum));
  if (c.deterministic) s += " deterministic";
  return s;
}

Subject subject_of(const Kernel& k, const Config& cfg) {
  Subject s;
  s.name = k.info.name;
  s.device = k.info.device;
  s.config = config_name(cfg);
  s.backward = k.info.backward && bool(k.backward);
  s.writes_lse = k.info.writes_lse;
  // Our CPU kernels compute every query row on its own, so a long case may run on its checked rows.
  s.cut_rows = k.info.device == "cpu" && !k.info.mutant && (k.info.name == "cpu_naive" || k.info.name == "cpu_tiled");
  s.exclusive = k.info.device != "cpu";
  // A case with a variant the kernel does not declare (strides included) is never sent to it.
  s.claims = [&k](const CaseSpec& c) {
    return claims(k, c.p) && covers(k.info.variants, case_variants(c)) && !(c.gpu_only && k.info.device == "cpu");
  };
  s.run = [&k, cfg](const Inputs& in, bool backward) {
    verdict::Run r = verdict::execute(k, in, cfg, backward);
    if (r.refused) throw Refusal(r.error);
    if (!r.error.empty()) throw std::runtime_error(r.error);
    return r.out;
  };
  s.precision = [&k, cfg](const Problem& p) { return verdict::precision_of(k, cfg, p); };
  return s;
}

Subject baseline_subject() {
  const Kernel* k = find_kernel("cpu_naive");
  if (!k) throw std::logic_error("the cpu_naive baseline is not registered");
  Subject s = subject_of(*k, Config{});
  s.claims = [k](const CaseSpec& c) {  // it runs on the checked rows
    return claims(*k, checked_problem(c)) && covers(k->info.variants, case_variants(c));
  };
  return s;
}

}  // namespace fc::report
