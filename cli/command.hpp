// The flashcheck CLI's one interface. Each subcommand lives in its own cli/cmd_*.cpp and is one row
// of the table in cli/main.cpp: `setup` adds the subcommand (and its options) to the app and returns
// the action to run when the user picked it. Actions return an exit code (docs/interfaces.md); bad input is
// reported by throwing fc::io::FileError or fc::cli::UsageError, which main.cpp turns into exit 2 and
// exactly one line on stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <iosfwd>
#include <memory>
#include <stdexcept>
#include <string>

namespace fc::plugin {
class PluginKernel;
}

namespace fc::cli {

// Exit codes (docs/interfaces.md).
constexpr int kExitPass = 0;          // everything passed
constexpr int kExitFail = 1;          // a check failed
constexpr int kExitUsage = 2;         // bad usage or bad input
constexpr int kExitInconclusive = 3;  // check: no law failed, and one could not be judged (too few accepted cases)

// A subcommand's action, run after parsing; returns one of the exit codes above.
using Action = std::function<int()>;

struct Command {
  const char* name;                // the subcommand's name, as typed: `flashcheck NAME ...`
  Action (*setup)(CLI::App& app);  // adds app.add_subcommand(name, ...) with its options
};

// Bad usage discovered after parsing (e.g. an unknown kernel name): exit 2, what() on stderr.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One setup per cli/cmd_*.cpp.
Action setup_kernels(CLI::App& app);    // cmd_kernels.cpp:   flashcheck kernels [--json]
Action setup_reference(CLI::App& app);  // cmd_reference.cpp: flashcheck reference --inputs F --out F
Action setup_audit(CLI::App& app);      // cmd_audit.cpp:     flashcheck audit [--kernel K] [--quick] [--out DIR] ...
Action setup_compare(CLI::App& app);    // cmd_compare.cpp:   flashcheck compare --inputs F --outputs F [--out DIR]
Action setup_gate(CLI::App& app);       // cmd_gate.cpp:      flashcheck gate --baseline F --current F
Action setup_merge(CLI::App& app);      // cmd_merge.cpp:     flashcheck merge --out DIR SHARD.json...
Action setup_render(CLI::App& app);     // cmd_render.cpp:    flashcheck render REPORT.json --out DIR
Action setup_fuzz(CLI::App& app);       // cmd_fuzz.cpp:      flashcheck fuzz --kernel NAME --seconds T ...
Action register_check_command(CLI::App& app);  // cmd_check.cpp: flashcheck check --kernel NAME [--cases N] [--seed S]

struct PluginArgs;
// `check` or `audit` on a kernel given by the program embedding flashcheck (the C API, the Python
// bridge): no --plugin option; `open` makes the kernel (--timeout and --layout given), replay lines
// start with `replay_prefix` ("{cmd}" in it becomes the subcommand), and `check`'s report goes to
// `out` (std::cout when null).
struct ExternalKernel {
  std::function<std::unique_ptr<plugin::PluginKernel>(const PluginArgs&)> open;
  std::string replay_prefix;  // e.g. "python -m flashcheck {cmd} mypkg.attn:kernel"
  std::ostream* out = nullptr;
  std::string replay_for(const std::string& cmd) const {
    std::string s = replay_prefix;
    const auto at = s.find("{cmd}");
    return at == std::string::npos ? s : s.replace(at, 5, cmd);
  }
};
Action setup_check(CLI::App& app, const ExternalKernel* ext);
Action setup_audit(CLI::App& app, const ExternalKernel* ext);

}  // namespace fc::cli
