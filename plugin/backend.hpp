// Where a plugin's calls run: in this process (InProcess) or in a worker process (Isolated). Both
// hand out an arena to pack a call into and run the call on it; PluginKernel (plugin_kernel.hpp) does the rest.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "plugin/executor.hpp"
#include "plugin/loader.hpp"

namespace fc::plugin {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Meta meta() const = 0;
  virtual unsigned char* arena(uint64_t bytes) = 0;  // 256-aligned, at least `bytes`
  // supports(); a fault (the worker crashed or hung in it) sets *fault and returns false.
  virtual bool supports(const CallPlan& plan, std::string* fault) = 0;
  virtual CallResult run(const CallPlan& plan) = 0;  // the packed arena in, outputs in it
  // A merge kernel's fc_kernel, where its calls can run in this process (InProcess); nullptr otherwise.
  virtual const fc_kernel* in_process_kernel() const { return nullptr; }
  virtual int restarts() const { return 0; }
  virtual int faults() const { return 0; }  // calls that cost the worker (crash, time-out, broken context)
};

// k validated here (LoadError); CUDA kernels get their device now.
std::unique_ptr<Backend> in_process(const fc_kernel* k);
// The worker command (e.g. {flashcheck, "__worker", lib.so}); started, and greeted, now. `env`:
// KEY=VALUE entries the worker's environment has beside (or in place of) this process's.
std::unique_ptr<Backend> isolated(std::vector<std::string> worker_argv, double timeout_s,
                                  std::vector<std::string> env = {});

}  // namespace fc::plugin
