// Running the flashcheck binary for the plugin tests: exit code, stdout, stderr, wall time. No
// address-space cap (a CUDA worker needs a large one), a wall-clock limit through timeout(1).
// FLASHCHECK_BIN and FC_PLUGIN_DIR in the environment override the build's paths (a carried build).
#pragma once

#include <string>
#include <vector>

namespace fc::plugin::testing {

struct Ran {
  int code = -1;
  std::string out, err;
  double seconds = 0;
  int err_lines() const;
};

Ran run_cli(const std::vector<std::string>& args, int timeout_s = 300);
std::string plugin_path(const std::string& target);  // a MODULE built beside the test (its file)
std::string replay_of(const std::string& out);       // the first "replay: ..." line's command
// An empty regression folder (--regressions): the random cases and their shrinking, without the
// repository's saved cases, which a broken kernel fails first.
std::string no_regressions();

}  // namespace fc::plugin::testing
