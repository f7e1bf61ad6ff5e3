#include "plugin/tests/run_cli.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

namespace fc::plugin::testing {
namespace {

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int Ran::err_lines() const {
  int n = 0;
  for (char c : err) n += c == '\n';
  return n + (!err.empty() && err.back() != '\n');
}

Ran run_cli(const std::vector<std::string>& args, int timeout_s) {
  static int counter = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("fc_plugin_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::create_directories(dir);
  const char* bin = std::getenv("FLASHCHECK_BIN");  // a carried build (the GPU machine) says where it is
  std::string cmd = "timeout " + std::to_string(timeout_s) + " " + quote(bin ? bin : FLASHCHECK_BIN);
  for (const std::string& a : args) cmd += ' ' + quote(a);
  cmd += fmt::format(" >{} 2>{}", quote((dir / "out").string()), quote((dir / "err").string()));
  const auto t0 = std::chrono::steady_clock::now();
  const int status = std::system(cmd.c_str());
  Ran r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp((dir / "out").string());
  r.err = slurp((dir / "err").string());
  std::filesystem::remove_all(dir);
  return r;
}

std::string plugin_path(const std::string& target) {
  const char* dir = std::getenv("FC_PLUGIN_DIR");
  return std::string(dir ? dir : FC_PLUGIN_DIR) + "/lib" + target + ".so";
}

std::string no_regressions() {
  const auto dir = std::filesystem::temp_directory_path() / ("fc_plugin_no_regressions_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string replay_of(const std::string& out) {
  const auto at = out.find("replay: ");
  if (at == std::string::npos) return "";
  return out.substr(at + 8, out.find('\n', at) - at - 8);
}

}  // namespace fc::plugin::testing
