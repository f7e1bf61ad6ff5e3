// `flashcheck kernels [--json] [--plugin lib.so]`: the registry (or one plugin, its capabilities probed
// through supports()) as a table, or as JSON for other programs.
#include <fmt/format.h>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/plugin_options.hpp"
#include "kernels/registry.hpp"

namespace fc::cli {

namespace {

template <class T, class F>
std::vector<std::string> names(const std::vector<T>& xs, F name) {
  std::vector<std::string> out;
  for (const T& x : xs) out.emplace_back(name(x));
  return out;
}

std::string tile(const Config& c) {
  if (c.block_m == 0 && c.block_n == 0) return c.order == LoopOrder::FA1 ? "default/FA1" : "default";
  return fmt::format("{}x{}{}", c.block_m, c.block_n, c.order == LoopOrder::FA1 ? "/FA1" : "");
}

std::string joined(const std::vector<std::string>& xs) { return fmt::format("{}", fmt::join(xs, ",")); }

// The dtypes column: the single dtypes, then each per-tensor combination as q/kv/o ("F32/F16/F32").
std::vector<std::string> dtype_names(const KernelInfo& i) {
  std::vector<std::string> out = names(i.dtypes, dtype_name);
  for (const DtypeSet& t : i.mixed_dtypes)
    out.push_back(fmt::format("{}/{}/{}", dtype_name(t.q), dtype_name(t.kv), dtype_name(t.o)));
  return out;
}

nlohmann::json kernel_json(const KernelInfo& i) {
  nlohmann::json configs = nlohmann::json::array();
  for (const Config& c : i.configs)
    configs.push_back({{"block_m", c.block_m},
                       {"block_n", c.block_n},
                       {"order", c.order == LoopOrder::FA1 ? "FA1" : "FA2"},
                       {"accum", dtype_name(c.accum)},
                       {"deterministic", c.deterministic},
                       {"splits", c.splits}});
  nlohmann::json splits = nlohmann::json::array();
  for (const Config& c : i.split_configs)
    splits.push_back({{"block_m", c.block_m}, {"block_n", c.block_n}, {"splits", c.splits}});
  nlohmann::json j = {{"name", i.name},
                      {"kind", i.kind == KernelKind::Merge ? "merge" : "attention"},
                      {"device", i.device},
                      {"mutant", i.mutant},
                      {"dtypes", names(i.dtypes, dtype_name)},
                      {"masks", names(i.masks, mask_name)},
                      {"backward", i.backward},
                      {"gqa", i.gqa},
                      {"head_dims", i.head_dims},
                      {"any_tile", i.any_tile},
                      {"writes_lse", i.writes_lse},
                      {"variants", variant_names(i.variants)},
                      {"configs", configs},
                      {"split_configs", splits},
                      {"description", i.description}};
  if (i.kind == KernelKind::Merge) j["merge_dtypes"] = names(i.merge_dtypes, dtype_name);
  if (!i.mixed_dtypes.empty()) {  // per-tensor dtypes: {q, kv, o} per combination
    j["mixed_dtypes"] = nlohmann::json::array();
    for (const DtypeSet& t : i.mixed_dtypes)
      j["mixed_dtypes"].push_back({{"q", dtype_name(t.q)}, {"kv", dtype_name(t.kv)}, {"o", dtype_name(t.o)}});
  }
  return j;
}

int run_kernels(bool as_json, const std::vector<const Kernel*>& kernels) {
  if (as_json) {
    nlohmann::json list = nlohmann::json::array();
    for (const Kernel* k : kernels) list.push_back(kernel_json(k->info));
    fmt::print("{}\n", nlohmann::json{{"kernels", list}}.dump(2));
    return kExitPass;
  }
  fmt::print("{:<22} {:<6} {:<6} {:<16} {:<44} {:<8} {:<4} {}\n", "kernel", "device", "mutant", "dtypes", "masks",
             "backward", "gqa", "tiles");
  for (const Kernel* k : kernels) {
    const KernelInfo& i = k->info;
    std::string tiles = i.any_tile ? "any" : "";
    for (const Config& c : i.configs) {
      if (!tiles.empty()) tiles += ',';
      tiles += tile(c);
    }
    for (const Config& c : i.split_configs) tiles += fmt::format(",{}/s{}", tile(c), c.splits);
    const bool merge = i.kind == KernelKind::Merge;
    fmt::print("{:<22} {:<6} {:<6} {:<16} {:<44} {:<8} {:<4} {}\n", i.name, i.device, i.mutant ? "yes" : "no",
               joined(merge ? names(i.merge_dtypes, dtype_name) : dtype_names(i)),
               merge ? "(merges states)" : joined(names(i.masks, mask_name)), i.backward ? "yes" : "no",
               i.gqa ? "yes" : "no", tiles);
  }
  fmt::print("{} kernels\n", kernels.size());
  return kExitPass;
}

}  // namespace

Action setup_kernels(CLI::App& app) {
  auto* sub = app.add_subcommand("kernels", "List every registered kernel and what it claims");
  auto as_json = std::make_shared<bool>(false);
  auto plugin = std::make_shared<PluginArgs>();
  sub->add_flag("--json", *as_json, "Print {\"kernels\": [...]} as JSON");
  add_plugin_options(sub, *plugin, PluginOptions::Path);  // --plugin PATH: that plugin's row (probed capabilities)
  return [as_json, plugin] {
    std::vector<const Kernel*> kernels;
    std::unique_ptr<plugin::PluginKernel> subject;
    if (!plugin->path.empty()) {
      subject = open_plugin(*plugin);
      kernels.push_back(&subject->kernel());
    } else {
      for (const Kernel& k : registry()) kernels.push_back(&k);
    }
    return run_kernels(*as_json, kernels);
  };
}

}  // namespace fc::cli
