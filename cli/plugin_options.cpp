#include "cli/plugin_options.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

#include "cli/command.hpp"
#include "plugin/loader.hpp"

namespace fc::cli {

std::string self_exe() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw UsageError("cannot find the flashcheck executable (/proc/self/exe) to start a worker");
  return p.string();
}

CLI::Option* add_plugin_options(CLI::App* sub, PluginArgs& a, PluginOptions which) {
  CLI::Option* opt = nullptr;
  if (which != PluginOptions::Embedded)
    opt = sub->add_option("--plugin", a.path, "a kernel as a shared library (<flashcheck/plugin.h>)");
  if (which == PluginOptions::Path) return opt;
  sub->add_option("--timeout", a.timeout_s, "seconds one kernel call may take before it fails (default 60)")
      ->check(CLI::Range(0.001, 1e6));
  if (which == PluginOptions::Run)
    sub->add_option("--isolation", a.isolation, "process: the plugin runs in a worker process (default); none: here")
        ->check(CLI::IsMember({"process", "none"}));
  sub->add_option("--layout", a.layout, "mixed: compact and strided tensors (default); compact: compact only")
      ->check(CLI::IsMember({"mixed", "compact"}));
  return opt;
}

void add_size_options(CLI::App* sub, PluginArgs& a) {
  sub->add_option("--max-n", a.max_n, "longest n_q and n_k drawn (within what the kernel declares)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--max-batch", a.max_batch, "largest batch drawn")->check(CLI::Range(1, 1 << 16));
  sub->add_option("--max-heads", a.max_heads, "most query heads drawn")->check(CLI::Range(1, 1 << 16));
  sub->add_flag("--shape-buckets", a.shape_buckets,
                "n_q and n_k powers of two only (a kernel that compiles per shape meets a few lengths)");
}

void validate(const PluginArgs& a) {
  if (!(a.timeout_s >= 0.001 && a.timeout_s <= 1e6))
    throw UsageError(fmt::format("--timeout {}: expected 0.001 to 1000000 seconds", a.timeout_s));
  if (a.isolation != "process" && a.isolation != "none")
    throw UsageError(fmt::format("--isolation {}: expected process or none", a.isolation));
  if (a.layout != "mixed" && a.layout != "compact")
    throw UsageError(fmt::format("--layout {}: expected mixed or compact", a.layout));
  struct Size {
    const char* flag;
    int32_t value, most;
  };
  for (const Size& z : {Size{"--max-n", a.max_n, 1 << 20}, Size{"--max-batch", a.max_batch, 1 << 16},
                        Size{"--max-heads", a.max_heads, 1 << 16}})
    if (z.value < 0 || z.value > z.most)
      throw UsageError(fmt::format("{} {}: expected 1 to {} (0: no bound)", z.flag, z.value, z.most));
}

plugin::PluginKernelOptions subject_options(const PluginArgs& a, std::string description) {
  plugin::PluginKernelOptions so;
  so.layout = layout_policy(a);
  so.description = std::move(description);
  so.max_n = a.max_n, so.max_batch = a.max_batch, so.max_heads = a.max_heads;
  so.shape_buckets = a.shape_buckets;
  return so;
}

plugin::LayoutPolicy layout_policy(const PluginArgs& a) {
  return a.layout == "compact" ? plugin::LayoutPolicy::Compact : plugin::LayoutPolicy::Mixed;
}

std::unique_ptr<plugin::PluginKernel> open_plugin(const PluginArgs& a) {
  std::error_code ec;
  const std::string path = std::filesystem::absolute(a.path, ec).lexically_normal().string();
  const plugin::PluginKernelOptions so = subject_options(a, "plugin " + path);
  try {
    std::unique_ptr<plugin::Backend> b = a.isolation == "none"
                                             ? plugin::in_process(plugin::load_plugin(path))
                                             : plugin::isolated({self_exe(), "__worker", path}, a.timeout_s);
    // A merge-state kernel (ABI 5) runs in this process: the worker, which loaded it first, serves
    // attention calls only.
    if (b->meta().merge && !b->in_process_kernel()) b = plugin::in_process(plugin::load_plugin(path));
    return std::make_unique<plugin::PluginKernel>(std::move(b), so);
  } catch (const plugin::LoadError& e) {
    throw UsageError(e.what());
  }
}

std::string plugin_replay_prefix(const PluginArgs& a, const plugin::PluginKernel& s) {
  std::error_code ec;
  std::string line = "flashcheck check --plugin " + std::filesystem::absolute(a.path, ec).lexically_normal().string();
  if (s.layout_policy() == plugin::LayoutPolicy::Compact && a.layout == "compact") line += " --layout compact";
  if (a.timeout_s != 60) line += fmt::format(" --timeout {}", a.timeout_s);
  if (a.isolation == "none") line += " --isolation none";
  if (a.max_n > 0) line += fmt::format(" --max-n {}", a.max_n);
  if (a.max_batch > 0) line += fmt::format(" --max-batch {}", a.max_batch);
  if (a.max_heads > 0) line += fmt::format(" --max-heads {}", a.max_heads);
  if (a.shape_buckets) line += " --shape-buckets";
  return line;
}

}  // namespace fc::cli
