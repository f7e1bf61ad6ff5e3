#include "cli/tests/subprocess.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fc::cli::testing {

namespace {

// The child runs under a 4 GiB address-space cap, so that a runaway allocation fails at once instead
// of swapping -- except under AddressSanitizer, which reserves terabytes of shadow address space.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
constexpr bool kAsan = __has_feature(address_sanitizer);
#else
constexpr bool kAsan = false;
#endif

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

int RunResult::stderr_lines() const {
  int n = 0;
  for (char c : err) n += c == '\n';
  if (!err.empty() && err.back() != '\n') ++n;
  return n;
}

RunResult run_flashcheck(const std::vector<std::string>& args, int timeout_s, const std::string& stdout_path) {
  static int counter = 0;
  const std::string dir = scratch_dir("run" + std::to_string(counter++));
  std::string cmd = std::string(kAsan ? "" : "ulimit -v 4194304; ") + "timeout " + std::to_string(timeout_s) + " " +
                    shell_quote(FLASHCHECK_BIN);
  for (const std::string& a : args) cmd += " " + shell_quote(a);
  cmd += " >" + shell_quote(stdout_path.empty() ? dir + "/out" : stdout_path) + " 2>" + shell_quote(dir + "/err");
  const auto t0 = std::chrono::steady_clock::now();
  // fork + wait4 rather than std::system: wait4 reports the peak resident memory of the command's
  // whole process tree (the shell's waited-for children included).
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  ::wait4(pid, &status, 0, &usage);
  RunResult r;
  r.max_rss_kb = usage.ru_maxrss;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(dir + "/out");
  r.err = slurp(dir + "/err");
  std::filesystem::remove_all(dir);
  return r;
}

std::string scratch_dir(const std::string& tag) {
  const auto dir = std::filesystem::temp_directory_path() / ("fc_cli_test_" + std::to_string(::getpid()) + "_" + tag);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace fc::cli::testing
