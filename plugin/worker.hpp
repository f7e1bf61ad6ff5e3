// Isolation: the kernel under test runs in a worker process. The parent side (WorkerClient) spawns it
// with posix_spawn (never a bare fork: the parent may hold a CUDA context), hands it a socket and the
// shared arena, and turns a crash, an abort, a time-out or a broken CUDA context into a failing call;
// the next call starts a fresh worker. One worker serves every case until it faults.
// The child side (serve) is the loop a worker runs: `flashcheck __worker lib.so` for a plugin, or the
// Python bridge's worker for a Python callable.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "plugin/executor.hpp"
#include "plugin/loader.hpp"
#include "plugin/worker_proto.hpp"

namespace fc::plugin {

// Child side: serve `k` on the inherited fds until the parent closes the socket; `load_error`
// non-empty (k null) reports why the kernel could not be loaded. Returns the process's exit code.
int serve(const fc_kernel* k, const std::string& load_error);
// `flashcheck __worker PATH`: load the plugin at PATH and serve it.
int worker_main(int argc, char** argv);

class WorkerClient {
 public:
  // argv: the worker command (argv[0] a path). timeout_s: the most one call may take. env: KEY=VALUE
  // entries added to the worker's environment (replacing this process's value of KEY), its alone.
  WorkerClient(std::vector<std::string> argv, double timeout_s, std::vector<std::string> env = {});
  ~WorkerClient();
  WorkerClient(const WorkerClient&) = delete;
  WorkerClient& operator=(const WorkerClient&) = delete;

  Meta start();                          // spawn and greet; LoadError when it cannot serve the kernel
  unsigned char* arena(uint64_t bytes);  // the shared arena, grown to at least `bytes`
  // supports() in the worker; a fault (crash, time-out) sets *fault and returns false.
  bool supports(const CallPlan& plan, std::string* fault);
  CallResult call(const CallPlan& plan);  // the arena holds the packed call
  int restarts() const { return restarts_; }
  int faults() const { return faults_; }  // calls that cost the worker: a crash, a time-out, a broken context

 private:
  void spawn();
  void stop();
  std::string reap(bool kill_first);                                                // wait for the worker; how it ended
  bool exchange(const proto::Request& req, proto::Reply* rep, std::string* fault);  // counts faults_
  bool exchange_once(const proto::Request& req, proto::Reply* rep, std::string* fault);

  std::vector<std::string> argv_, env_;
  double timeout_s_;
  int sock_ = -1, mem_ = -1;
  pid_t pid_ = -1;
  unsigned char* map_ = nullptr;
  uint64_t mapped_ = 0;
  int restarts_ = -1;  // spawns after the first
  int faults_ = 0;
  Meta meta_;
};

}  // namespace fc::plugin
