// Strict command-line values shared by the subcommands: integers are plain decimal (no "-1" read as
// 2^64 - 1, no "010" read as octal 8), sizes are decimal with an optional binary suffix, and the
// oracle's resource limits (--max-memory, --max-seconds) come with a cost estimate that refuses a
// problem in one line, naming its shape and what it would need, before any work starts.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "contract/attention.h"

namespace fc::cli {

// Validators run on the option's text before CLI11 converts it.
CLI::Validator decimal_unsigned();  // 0, 1, 42; not -1, 010, 0x10, 1e3, +1
CLI::Validator decimal_signed();    // as above with an optional leading '-'

// "512M", "16G", "1T", "1048576" (bytes; K M G T are powers of 1024). False when malformed.
bool parse_size(const std::string& s, uint64_t* bytes);
std::string human_bytes(double bytes);      // "17.6 TB" style, binary units
std::string human_seconds(double seconds);  // "37 min", "30 h"

// What a certified-oracle run on a problem costs on this machine's oracle threads, and the limits it
// is held to.
struct Cost {
  double bytes = 0;    // peak memory
  double seconds = 0;  // wall time (the fit is in cli/options.cpp)
};
Cost certified_cost(const Problem& p, bool grads);
// The cost of the oracle --oracle chose: certified_cost on the CPU; when the GPU oracle takes the
// problem, host memory for the tensors and their copies and the GPU's time (cli/options.cpp).
// gpu: set to whether it does.
Cost oracle_cost(const Problem& p, bool grads, bool* gpu = nullptr);

struct ResourceLimits {
  uint64_t max_memory = 0;   // bytes; 0 = three quarters of this machine's physical memory
  double max_seconds = 600;  // estimated wall seconds
  std::string max_memory_text;
};
// Adds --max-memory SIZE and --max-seconds S to a subcommand.
void add_limit_options(CLI::App* sub, ResourceLimits& limits);
uint64_t physical_memory();
// --oracle cpu|gpu|auto (reference/gpu/oracle_select.hpp) on a subcommand, into `text` (default
// "auto"); apply_oracle sets the process-wide choice when the command runs (each run of the C API
// starts from its own argv, so a previous run's choice never lingers).
void add_oracle_option(CLI::App* sub, std::string& text);
void apply_oracle(const std::string& text);

// Throws io::FileError(FileFault::TooLarge) naming `file`, the shape and the need when the problem's
// cost exceeds a limit; returns the cost otherwise.
Cost require_affordable(const std::string& file, const Problem& p, bool grads, const ResourceLimits& limits);

}  // namespace fc::cli
