// flashcheck: the command-line entry point. Parses with CLI11, dispatches to the subcommand table
// below, and owns the exit-code policy: CLI11 parse errors and bad input exit 2 (not CLI11's own
// codes), with one line on stderr.
#include <malloc.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <exception>
#include <string>
#include <vector>

#include "cli/check_jobs.hpp"
#include "cli/command.hpp"
#include "io/errors.hpp"
#include "plugin/worker.hpp"
#include "reference/parallel.hpp"

namespace {

using fc::cli::Command;

const Command kCommands[] = {
    {"kernels", fc::cli::setup_kernels},         // cli/cmd_kernels.cpp
    {"reference", fc::cli::setup_reference},     // cli/cmd_reference.cpp
    {"audit", fc::cli::setup_audit},             // cli/cmd_audit.cpp
    {"compare", fc::cli::setup_compare},         // cli/cmd_compare.cpp
    {"gate", fc::cli::setup_gate},               // cli/cmd_gate.cpp
    {"merge", fc::cli::setup_merge},             // cli/cmd_merge.cpp
    {"render", fc::cli::setup_render},           // cli/cmd_render.cpp
    {"fuzz", fc::cli::setup_fuzz},               // cli/cmd_fuzz.cpp
    {"check", fc::cli::register_check_command},  // cli/cmd_check.cpp
};

// One line: newlines inside a message would break "exactly one line on stderr".
void print_error(const std::string& what) {
  std::string line = what;
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  std::fprintf(stderr, "flashcheck: %s\n", line.c_str());
}

// A command's verdict is only as good as the report it printed: when standard output could not be
// written (a full disk, a closed pipe, /dev/full), a passing run must not exit 0.
int stdout_checked(int code) {
  std::cout.flush();
  const bool bad = !std::cout || std::fflush(stdout) != 0 || std::ferror(stdout);
  if (!bad) return code;
  print_error(std::string("cannot write the report to standard output: ") + std::strerror(errno));
  return code == fc::cli::kExitPass ? fc::cli::kExitUsage : code;
}

// Freed memory stays with the process. A check or an audit allocates and frees the same large vectors
// case after case (inputs in float64, certificates, bounds: tens of MB on a long row), and glibc's
// defaults return them to the kernel on free and fault them in, zeroed, on the next case: on the
// 2-core VM that was half the CPU time of `check --law reference` on long rows (docs/DECISIONS.md).
// Blocks under 32 MiB come from the heap, which is trimmed only past 1 GiB free at its top; the
// peak resident size is unchanged.
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace

int main(int argc, char** argv) {
  // A plugin's worker process (plugin/worker.hpp): started by `check --plugin`, not by users.
  if (argc >= 2 && std::string(argv[1]) == "__worker") return fc::plugin::worker_main(argc, argv);
  fc::ref::restart_with_huge_pages(argv);
  keep_freed_memory();
  fc::cli::set_command_line(argc, argv);  // check --jobs starts a process per law with it
  CLI::App app{"flashcheck: property-based correctness and numerics for attention kernels"};
  app.require_subcommand(1);
  std::vector<std::pair<const char*, fc::cli::Action>> runs;
  for (const Command& c : kCommands) runs.emplace_back(c.name, c.setup(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // --help: usage on stdout, exit 0
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error(std::string(e.what()) + " (run with --help for usage)");
    return fc::cli::kExitUsage;
  }

  try {
    for (auto& [name, run] : runs)
      if (app.got_subcommand(name)) return stdout_checked(run());
    print_error("no subcommand given");
    return fc::cli::kExitUsage;
  } catch (const std::bad_alloc&) {
    print_error("out of memory (a smaller problem, or --max-memory below what this machine has, avoids this)");
    return fc::cli::kExitUsage;
  } catch (const fc::io::FileError& e) {
    print_error(e.what());
    return fc::cli::kExitUsage;
  } catch (const fc::cli::UsageError& e) {
    print_error(e.what());
    return fc::cli::kExitUsage;
  } catch (const std::exception& e) {
    // Anything else (a kernel or oracle refusing its input) is still reported as bad input.
    print_error(std::string("error: ") + e.what());
    return fc::cli::kExitUsage;
  }
}
