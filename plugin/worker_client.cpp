// The suite's side of isolation (worker.hpp).
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "plugin/worker.hpp"
#include "plugin/worker_io.hpp"
#include "plugin/worker_proto.hpp"

extern char** environ;

namespace fc::plugin {
namespace {

constexpr double kGreetingS = 120;  // loading a plugin (or importing torch) may take a while

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    return fmt::format("was killed by SIG{} ({})", abbrev ? abbrev : std::to_string(sig).c_str(), strsignal(sig));
  }
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return "stopped";
}

// An fd number >= 10, close-on-exec (posix_spawn then dup2s it onto 3 or 4, clearing the flag there).
int high_fd(int fd) {
  const int h = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  close(fd);
  return h;
}

}  // namespace

WorkerClient::WorkerClient(std::vector<std::string> argv, double timeout_s, std::vector<std::string> env)
    : argv_(std::move(argv)), env_(std::move(env)), timeout_s_(timeout_s) {
  const int fd = memfd_create("flashcheck-arena", MFD_CLOEXEC);
  if (fd < 0) throw LoadError(fmt::format("memfd_create: {}", std::strerror(errno)));
  mem_ = high_fd(fd);
}

WorkerClient::~WorkerClient() {
  stop();
  if (map_) munmap(map_, mapped_);
  if (mem_ >= 0) close(mem_);
}

void WorkerClient::spawn() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw LoadError(fmt::format("socketpair: {}", std::strerror(errno)));
  sock_ = high_fd(sv[0]);
  const int child = high_fd(sv[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, child, proto::kSockFd);
  posix_spawn_file_actions_adddup2(&fa, mem_, proto::kMemFd);
  posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);  // the kernel's prints stay off the report
  std::vector<char*> args;
  for (std::string& a : argv_) args.push_back(a.data());
  args.push_back(nullptr);
  // The suite's environment less the keys env_ sets, then env_, then where the worker finds its fds.
  std::string fds = std::string(proto::kFdsEnv) + "=3,4";
  std::vector<char*> env;
  auto key_set = [&](const char* e) {
    auto same = [e](const std::string& x) { return std::strncmp(e, x.c_str(), x.find('=') + 1) == 0; };
    return same(fds) || std::any_of(env_.begin(), env_.end(), same);
  };
  for (char** e = environ; *e; ++e)
    if (!key_set(*e)) env.push_back(*e);
  for (std::string& e : env_) env.push_back(e.data());
  env.push_back(fds.data());
  env.push_back(nullptr);
  const int rc = posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&fa);
  close(child);
  if (rc != 0) {
    pid_ = -1;
    throw LoadError(fmt::format("cannot start the worker {}: {}", argv_[0], std::strerror(rc)));
  }
  ++restarts_;
}

std::string WorkerClient::reap(bool kill_first) {
  if (pid_ < 0) return "is not running";
  if (kill_first) kill(pid_, SIGKILL);
  int status = 0;
  // A worker that closed its socket may still be exiting: give it a moment, then kill it.
  for (int i = 0; !kill_first && i < 200; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return describe_status(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!kill_first) kill(pid_, SIGKILL);
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
  pid_ = -1;
  return describe_status(status);
}

void WorkerClient::stop() {
  if (sock_ >= 0) close(sock_), sock_ = -1;  // the worker reads EOF and exits
  if (pid_ >= 0) reap(false);
}

Meta WorkerClient::start() {
  stop();
  spawn();
  proto::Hello h;
  const Recv r = recv_all(sock_, &h, sizeof h, std::max(timeout_s_, kGreetingS));
  if (r != Recv::Ok || h.magic != proto::kMagic) {
    const std::string how = reap(r == Recv::TimedOut);
    close(sock_), sock_ = -1;
    throw LoadError(fmt::format("the worker ({}) {} before it was ready", argv_[0], how));
  }
  if (!h.ok) {
    stop();
    throw LoadError(h.error);
  }
  meta_ = Meta{std::string(h.name, strnlen(h.name, sizeof h.name)),
               h.device_type,
               h.writes_lse != 0,
               h.backward != 0,
               h.abi_version,
               h.declared};
  meta_.merge = h.merge != 0;
  return meta_;
}

unsigned char* WorkerClient::arena(uint64_t bytes) {
  if (bytes <= mapped_) return map_;
  const uint64_t size = std::max<uint64_t>(bytes, 2 * mapped_) + (1 << 20);  // grow geometrically
  if (ftruncate(mem_, off_t(size)) != 0) throw std::runtime_error(fmt::format("ftruncate: {}", std::strerror(errno)));
  if (map_) munmap(map_, mapped_);
  void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, mem_, 0);
  if (m == MAP_FAILED) throw std::runtime_error(fmt::format("mmap of {} bytes: {}", size, std::strerror(errno)));
  map_ = static_cast<unsigned char*>(m), mapped_ = size;
  return map_;
}

bool WorkerClient::exchange(const proto::Request& req, proto::Reply* rep, std::string* fault) {
  const bool ok = exchange_once(req, rep, fault);
  faults_ += !ok || rep->fatal != 0;
  return ok;
}

bool WorkerClient::exchange_once(const proto::Request& req, proto::Reply* rep, std::string* fault) {
  const char* what = req.op == proto::kSupports ? "supports" : req.plan.backward ? "backward" : "forward";
  // A worker that died after its last reply (or was never started after a fault) is started afresh.
  if (pid_ < 0 || !send_all(sock_, &req, sizeof req)) {
    try {
      start();
    } catch (const LoadError& e) {
      *fault = fmt::format("the worker could not be restarted: {}", e.what());
      return false;
    }
    if (!send_all(sock_, &req, sizeof req)) {
      *fault = fmt::format("the worker {} before {} ran", reap(true), what);
      return false;
    }
  }
  const Recv r = recv_all(sock_, rep, sizeof *rep, timeout_s_);
  if (r == Recv::Ok && rep->magic == proto::kMagic) {
    if (rep->fatal) reap(false);  // it exits after a broken CUDA context; the next call starts another
    return true;
  }
  if (r == Recv::TimedOut) {
    reap(true);
    *fault = fmt::format("{} did not return within {} s (--timeout); the worker was killed", what, timeout_s_);
  } else {
    *fault = fmt::format("the worker {} during {}", reap(false), what);
  }
  close(sock_), sock_ = -1;
  return false;
}

bool WorkerClient::supports(const CallPlan& plan, std::string* fault) {
  auto req = std::make_unique<proto::Request>();
  req->op = proto::kSupports, req->arena_bytes = mapped_, req->plan = plan;
  proto::Reply rep;
  return exchange(*req, &rep, fault) && rep.status != 0;
}

CallResult WorkerClient::call(const CallPlan& plan) {
  auto req = std::make_unique<proto::Request>();
  req->op = proto::kCall, req->arena_bytes = mapped_, req->plan = plan;
  proto::Reply rep;
  std::string fault;
  if (!exchange(*req, &rep, &fault)) return {false, fault, true};
  return {rep.status == 0, std::string(rep.error, strnlen(rep.error, sizeof rep.error)), rep.fatal != 0};
}

}  // namespace fc::plugin
