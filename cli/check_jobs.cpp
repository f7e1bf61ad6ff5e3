#include "cli/check_jobs.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <stdexcept>
#include <thread>

#include "cli/plugin_options.hpp"
#include "io/atomic_file.hpp"

extern char** environ;

namespace fc::cli {
namespace {

std::vector<std::string>& command_line_store() {
  static std::vector<std::string> args;
  return args;
}

// The user's arguments less those a law's process gets its own value of: options with a value
// (`--seed 3` or `--seed=3`) and flags.
std::vector<std::string> law_process_args(const std::string& law, uint64_t seed, const std::string& record) {
  static const char* const kValued[] = {"--jobs", "--seed", "--json-out", "--law"};
  static const char* const kFlags[] = {"--no-progress"};
  const std::vector<std::string>& in = command_line_store();
  std::vector<std::string> out;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string& a = in[i];
    bool drop = false;
    for (const char* v : kValued) {
      if (a == v) {
        drop = true, ++i;  // and its value
        break;
      }
      if (a.rfind(std::string(v) + "=", 0) == 0) drop = true;
    }
    for (const char* f : kFlags) drop = drop || a == f;
    if (!drop) out.push_back(a);
  }
  for (const std::string& a : {std::string("--law"), law, std::string("--seed"), std::to_string(seed),
                               std::string("--no-progress"), std::string("--law-record"), record})
    out.push_back(a);
  return out;
}

std::string last_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

// A temporary folder for the records, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "flashcheck-jobs-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error(std::string("--jobs: mkdtemp: ") + std::strerror(errno));
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// The law processes still running; on the way out (an error) they are ended and reaped.
class Children {
 public:
  struct Child {
    pid_t pid;
    size_t index;
  };
  ~Children() {
    for (const Child& c : running_) kill(c.pid, SIGTERM);
    for (const Child& c : running_) waitpid(c.pid, nullptr, 0);
  }
  void start(size_t index, const std::vector<std::string>& args, const std::string& err_path) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw std::runtime_error(fmt::format("--jobs: cannot start {}: {}", argv[0], std::strerror(rc)));
    running_.push_back({pid, index});
  }
  size_t size() const { return running_.size(); }
  // Waits until one of them ends (not any other child, e.g. a plugin's worker): its index and status.
  std::pair<size_t, int> wait_one() {
    for (;;) {
      for (auto it = running_.begin(); it != running_.end(); ++it) {
        int status = 0;
        if (waitpid(it->pid, &status, WNOHANG) == it->pid) {
          const size_t index = it->index;
          running_.erase(it);
          return {index, status};
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

 private:
  std::vector<Child> running_;
};

std::string how_it_ended(int status) {
  if (WIFSIGNALED(status)) return fmt::format("died of signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("exited {}", WEXITSTATUS(status));
}

LawRecord read_law_record(const std::string& path) {
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  return {j.at("id").get<std::string>(), j.at("block").get<std::string>(), j.at("entry"), j.at("restarts").get<int>()};
}

}  // namespace

void set_command_line(int argc, char** argv) { command_line_store().assign(argv, argv + argc); }

void write_law_record(const std::string& path, const LawRecord& r) {
  const nlohmann::json j = {{"id", r.id}, {"block", r.block}, {"entry", r.entry}, {"restarts", r.restarts}};
  io::write_file_atomic(path, j.dump());
}

std::vector<LawRecord> run_laws_in_processes(const std::vector<std::string>& ids, int jobs, uint64_t seed,
                                             std::ostream* progress, double progress_after_s) {
  if (command_line_store().empty()) throw std::logic_error("--jobs: set_command_line was not called");
  const std::string exe = self_exe();
  const auto start = std::chrono::steady_clock::now();
  ScratchDir dir;
  Children children;
  std::vector<LawRecord> records(ids.size());
  size_t next = 0, done = 0;
  while (done < ids.size()) {
    for (; next < ids.size() && children.size() < size_t(jobs); ++next) {
      std::vector<std::string> args = law_process_args(ids[next], seed, dir.file(fmt::format("{}.json", next)));
      args.front() = exe;
      children.start(next, args, dir.file(fmt::format("{}.err", next)));
    }
    const auto [i, status] = children.wait_one();
    const std::string record = dir.file(fmt::format("{}.json", i));
    const bool verdict = WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1 ||
                                               WEXITSTATUS(status) == 3);
    if (!verdict || !std::filesystem::exists(record)) {
      const std::string last = last_line_of(dir.file(fmt::format("{}.err", i)));
      throw std::runtime_error(fmt::format("--jobs: the process of law {} {} without a verdict{}{}", ids[i],
                                           how_it_ended(status), last.empty() ? "" : ": ", last));
    }
    records[i] = read_law_record(record);
    ++done;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (progress && s >= progress_after_s) {
      *progress << fmt::format("flashcheck check: {} {} ({} of {} laws, {:.1f} s)\n", ids[i],
                               records[i].entry.value("status", "?"), done, ids.size(), s);
    }
  }
  return records;
}

}  // namespace fc::cli
