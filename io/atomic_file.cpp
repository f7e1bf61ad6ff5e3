#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <mutex>
#include <random>

#include "io/errors.hpp"

namespace fc::io {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw FileError(FileFault::Io, path, what); }

std::string errno_text(int e) { return std::strerror(e); }

// The file behind `path`, when it exists: device and inode identify it across links and spellings.
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// Temporaries in flight, for the signal handler: fixed slots of plain chars, because a handler may
// only call async-signal-safe functions (unlink) and read lock-free atomics.
constexpr int kSlots = 64;
enum : int { kFree = 0, kClaimed = 1, kActive = 2 };  // the handler reads only kActive slots
struct HandlerSlot {
  std::atomic<int> state{kFree};
  char path[PATH_MAX + 1];
};
HandlerSlot g_slots[kSlots];
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGXFSZ};

struct sigaction g_previous[std::size(kSignals)];  // what each signal did before our handler

extern "C" void remove_temporaries(int sig, siginfo_t* info, void* context) {
  for (HandlerSlot& s : g_slots)
    if (s.state.load() == kActive) ::unlink(s.path);
  size_t i = 0;
  while (i + 1 < std::size(kSignals) && kSignals[i] != sig) ++i;
  const struct sigaction& prev = g_previous[i];
  if (prev.sa_flags & SA_SIGINFO) return prev.sa_sigaction(sig, info, context);  // chain to the program's
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) return prev.sa_handler(sig);
  ::signal(sig, SIG_DFL);  // the signal's own course: terminate (or dump core, for SIGXFSZ)
  ::raise(sig);
}

// Puts the handler in front of whatever each signal does now, unless it is ignored (then the write
// is never interrupted) or ours already. Checked on every write, not once: a program (or a test
// framework) may install and restore its own handlers around ours.
void install_handler() {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    struct sigaction now {};
    if (::sigaction(kSignals[i], nullptr, &now) != 0) continue;
    if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == remove_temporaries) continue;
    if (!(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_IGN) continue;
    g_previous[i] = now;
    struct sigaction sa {};
    sa.sa_sigaction = remove_temporaries;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(kSignals[i], &sa, nullptr);
  }
}

// A registered temporary: created with O_EXCL beside the target, removed on any exit but success.
class Temporary {
 public:
  Temporary(const std::string& target, const std::filesystem::path& dir) : target_(target) {
    install_handler();
    static std::atomic<uint64_t> counter{0};
    std::random_device rd;
    std::string base = ".";  // (appended, not "." + name: GCC 12 warns falsely on that operator+)
    base += std::filesystem::path(target).filename().string();
    for (int attempt = 0; fd_ < 0; ++attempt) {
      const uint64_t tag = (uint64_t(rd()) << 20) ^ (uint64_t(::getpid()) << 8) ^ counter++;
      std::string name = base;
      name += '.';
      for (int i = 0; i < 6; ++i) name += "abcdefghijklmnopqrstuvwxyz0123456789"[(tag >> (6 * i)) % 36];
      path_ = (dir / name).string();
      if (path_.size() > PATH_MAX) fail(target_, "path too long for a temporary file beside it");
      claim_slot();
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);  // mode less the umask
      if (fd_ >= 0) break;
      const int e = errno;
      release_slot();
      if (e != EEXIST || attempt > 100) fail(target_, "cannot create a temporary file beside it: " + errno_text(e));
    }
  }
  ~Temporary() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
    release_slot();
  }
  Temporary(const Temporary&) = delete;
  Temporary& operator=(const Temporary&) = delete;

  void write(std::string_view bytes) {
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(target_, "write failed: " + errno_text(n < 0 ? errno : ENOSPC));
      done += size_t(n);
    }
  }

  void commit(const std::filesystem::path& dir) {
    if (::fsync(fd_) != 0) fail(target_, "fsync failed: " + errno_text(errno));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail(target_, "close failed: " + errno_text(errno));
    if (::rename(path_.c_str(), target_.c_str()) != 0)
      fail(target_, "cannot rename the temporary file over it: " + errno_text(errno));
    committed_ = true;
    // The rename itself is durable once the folder's entry is on disk.
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  void claim_slot() {
    for (int i = 0; i < kSlots; ++i) {
      int expected = kFree;
      if (!g_slots[i].state.compare_exchange_strong(expected, kClaimed)) continue;
      std::memcpy(g_slots[i].path, path_.c_str(), path_.size() + 1);
      g_slots[i].state.store(kActive);  // the name is complete before the handler may read it
      slot_ = i;
      return;
    }
    slot_ = -1;  // more than kSlots writes at once: this one is cleaned up on failure, not on a signal
  }
  void release_slot() {
    if (slot_ >= 0) g_slots[slot_].state.store(kFree);
    slot_ = -1;
  }

  std::string target_, path_;
  int fd_ = -1, slot_ = -1;
  bool committed_ = false;
};

std::filesystem::path folder_of(const std::string& path) {
  const std::filesystem::path target(path);
  return target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
}

}  // namespace

void check_output_path(const std::string& path, const std::vector<std::string>& inputs) {
  if (path.empty()) fail(path, "empty output path");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail(path, "the output exists and is not a regular file (refusing to write to it)");
  for (const std::string& in : inputs)
    if (!in.empty() && same_file(path, in)) fail(path, "the output is the same file as the input " + quoted(in));
  const std::filesystem::path dir = folder_of(path);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail(path, "the output's folder does not exist");
}

void write_file_atomic(const std::string& path, const std::function<void(const ChunkSink&)>& produce,
                       const std::vector<std::string>& inputs) {
  check_output_path(path, inputs);
  const std::filesystem::path dir = folder_of(path);
  Temporary tmp(path, dir);
  produce([&](std::string_view chunk) { tmp.write(chunk); });
  tmp.commit(dir);
}

void write_file_atomic(const std::string& path, std::string_view bytes, const std::vector<std::string>& inputs) {
  write_file_atomic(
      path, [&](const ChunkSink& sink) { sink(bytes); }, inputs);
}

}  // namespace fc::io
