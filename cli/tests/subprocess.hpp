// Running the built flashcheck binary as a subprocess (path from the FLASHCHECK_BIN definition),
// with a wall-clock timeout and a 4 GiB address-space cap, capturing exit code, stdout, stderr and
// peak memory.
#pragma once

#include <string>
#include <vector>

namespace fc::cli::testing {

struct RunResult {
  int code = -1;        // exit status; 124 when the timeout killed it
  std::string out;      // stdout
  std::string err;      // stderr
  double seconds = 0;   // wall time
  long max_rss_kb = 0;  // peak resident memory of the command (its largest process), KiB
  int stderr_lines() const;
};

// stdout_path: where stdout goes instead of being captured (e.g. /dev/full).
RunResult run_flashcheck(const std::vector<std::string>& args, int timeout_s = 60, const std::string& stdout_path = "");

// A fresh scratch directory for one test, removed by the caller when done.
std::string scratch_dir(const std::string& tag);
void write_bytes(const std::string& path, const std::string& bytes);

}  // namespace fc::cli::testing
