#include "cli/audit_sweep.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "cli/command.hpp"
#include "kernels/registry.hpp"

namespace fc::cli {

std::pair<int, int> parse_shard(const std::string& s) {
  if (s.empty()) return {0, 1};
  const size_t slash = s.find('/');
  auto to_int = [&](const std::string& x, int* out) {
    if (x.empty() || x.size() > 6 || x.find_first_not_of("0123456789") != std::string::npos) return false;
    *out = std::atoi(x.c_str());
    return true;
  };
  int i = 0, n = 0;
  if (slash == std::string::npos || !to_int(s.substr(0, slash), &i) || !to_int(s.substr(slash + 1), &n) || n < 1 ||
      i >= n)
    throw UsageError(fmt::format("--shard {}: expected i/n with 0 <= i < n (e.g. 0/4)", s));
  return {i, n};
}

std::vector<DType> parse_dtypes(const std::vector<std::string>& names) {
  if (names.empty()) return sweep_dtypes();
  std::vector<DType> out;
  for (const std::string& n : names) {
    DType t;
    if (!parse_dtype(n.c_str(), &t) || !kernel_float(t))
      throw UsageError(fmt::format("--dtype {}: expected {}", n, dtype_names(kernel_float)));
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

void check_regimes(const std::vector<std::string>& names, const std::vector<std::string>& known) {
  for (const std::string& n : names)
    if (std::find(known.begin(), known.end(), n) == known.end())
      throw UsageError(fmt::format("--regime {}: expected one of {}", n, fmt::join(known, ", ")));
}

report::Selection select_kernels(const std::vector<std::string>& kernels) {
  report::Selection s;
  auto take = [&](const Kernel& k) {
    if (!device_present(k.info.device)) {
      s.skipped.emplace_back(k.info.name, "no " + k.info.device + " device on this machine");
      return;
    }
    s.subjects.push_back(report::subject_of(k, report::audit_config(k)));
    s.names.push_back(k.info.name);
  };
  if (kernels.empty()) {
    for (const Kernel& k : registry())
      if (!k.info.mutant && k.info.kind == KernelKind::Attention) take(k);
    return s;
  }
  for (const std::string& name : kernels) {
    const Kernel* k = find_kernel(name);
    if (!k) throw UsageError(fmt::format("--kernel {}: unknown kernel (`flashcheck kernels` lists them)", name));
    if (k->info.kind != KernelKind::Attention)
      throw UsageError(fmt::format("--kernel {}: a merge-state kernel; the audit sweeps attention kernels", name));
    if (std::find(s.names.begin(), s.names.end(), name) == s.names.end()) take(*k);
  }
  return s;
}

report::CaseSpec case_by_id(const std::string& id, CaseFinder find) {
  report::CaseSpec c;
  if (!find(id, &c))
    throw UsageError(
        fmt::format("--case {}: no such case (ids look like F16/normal/n1024; report.json lists them)", id));
  return c;
}

std::vector<report::CaseSpec> plan_cases(std::vector<report::CaseSpec> plan, const std::vector<std::string>& case_ids,
                                         CaseFinder find, const std::vector<report::Subject>& subjects,
                                         std::pair<int, int> shard) {
  std::vector<report::CaseSpec> all;
  if (case_ids.empty()) {
    all = std::move(plan);
  } else {
    for (const std::string& id : case_ids) {
      report::CaseSpec c = case_by_id(id, find);
      c.seq = int32_t(all.size());
      all.push_back(c);
    }
  }
  std::erase_if(all, [&](const report::CaseSpec& c) {
    return std::none_of(subjects.begin(), subjects.end(), [&](const report::Subject& s) { return s.claims(c); });
  });
  if (shard.second == 1) return all;
  std::vector<report::CaseSpec> mine;
  for (size_t i : report::shard_cases(all, shard.first, shard.second)) mine.push_back(all[i]);
  return mine;
}

}  // namespace fc::cli
