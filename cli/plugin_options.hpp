// The plugin options shared by `check` and `kernels`: --plugin PATH, --timeout, --isolation,
// --layout, and opening the plugin they name as a registry Kernel (plugin/plugin_kernel.hpp).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "plugin/plugin_kernel.hpp"

namespace fc::cli {

struct PluginArgs {
  std::string path;                                 // --plugin
  double timeout_s = 60;                            // --timeout: the most one call may take (isolated)
  std::string isolation = "process";                // --isolation process|none
  std::string layout = "mixed";                     // --layout mixed|compact
  int32_t max_n = 0, max_batch = 0, max_heads = 0;  // --max-n, --max-batch, --max-heads (0: none)
  bool shape_buckets = false;                       // --shape-buckets
};

// Which options a subcommand offers: --plugin alone (kernels), --plugin with --timeout, --isolation
// and --layout (check), or --timeout and --layout alone (check on a kernel given by the C API).
enum class PluginOptions { Path, Run, Embedded };
// Returns the --plugin option (nullptr for Embedded).
CLI::Option* add_plugin_options(CLI::App* sub, PluginArgs& a, PluginOptions which);
// --max-n, --max-batch, --max-heads, --shape-buckets (check): bounds on the shapes drawn for a plugin
// or Python kernel.
void add_size_options(CLI::App* sub, PluginArgs& a);
// The ranges and names the options above check on a command line, for arguments built without it
// (the C API's requests): UsageError, one line.
void validate(const PluginArgs& a);
plugin::LayoutPolicy layout_policy(const PluginArgs& a);
// The PluginKernelOptions the arguments ask for (layout, size bounds), with a description.
plugin::PluginKernelOptions subject_options(const PluginArgs& a, std::string description);

// Loads (and, isolated, starts the worker for) the plugin; UsageError, one line, when it cannot.
std::unique_ptr<plugin::PluginKernel> open_plugin(const PluginArgs& a);

// "flashcheck check --plugin /abs/lib.so [--layout compact] [--timeout S]": the replay lines' prefix.
std::string plugin_replay_prefix(const PluginArgs& a, const plugin::PluginKernel& s);

// This program's path (/proc/self/exe): what a plugin's worker and check --jobs's law processes run.
std::string self_exe();

}  // namespace fc::cli
