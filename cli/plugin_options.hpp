// The plugin options shared by `check` and `kernels`: --plugin PATH, --timeout, --isolation,
// --layout, and opening the plugin they name as a registry Kernel (kernels/plugin/subject.hpp).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "kernels/plugin/subject.hpp"

namespace fc::cli {

struct PluginArgs {
  std::string path;                   // --plugin
  double timeout_s = 60;              // --timeout: the most one call may take (isolated)
  std::string isolation = "process";  // --isolation process|none
  std::string layout = "mixed";       // --layout mixed|compact
};

// Adds --plugin (and, with `running`, the options that matter when cases run).
CLI::Option* add_plugin_options(CLI::App* sub, PluginArgs& a, bool running);

// Loads (and, isolated, starts the worker for) the plugin; UsageError, one line, when it cannot.
std::unique_ptr<plugin::Subject> open_plugin(const PluginArgs& a);

// "flashcheck check --plugin /abs/lib.so [--layout compact] [--timeout S]": the replay lines' prefix.
std::string plugin_replay_prefix(const PluginArgs& a, const plugin::Subject& s);

}  // namespace fc::cli
