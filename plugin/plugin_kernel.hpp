// A plugin (or a Python callable behind the same ABI) as a registry Kernel, so that every law,
// generator, bound, shrink, replay line and exit code is the `--kernel` path's. Its capabilities
// (KernelInfo) come from probing supports() at load; each call is planned in a layout (abi_map.hpp),
// packed into the backend's arena, run, and unpacked; a nonzero return, a crash, a time-out or a
// write outside the outputs is thrown as the case's failure.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plugin/abi_map.hpp"
#include "plugin/backend.hpp"
#include "kernels/registry.hpp"

namespace fc::plugin {

struct PluginKernelOptions {
  LayoutPolicy layout = LayoutPolicy::Mixed;
  std::string description;  // KernelInfo::description, e.g. "plugin /path/lib.so"
  // Size bounds from the command line or the Python call (0: none), intersected with what the kernel
  // declares: the longest n_q and n_k, the largest batch, the most query heads.
  int32_t max_n = 0, max_batch = 0, max_heads = 0;
  // Shape buckets (a kernel that compiles per shape): every n_q and n_k a power of two inside the
  // declarations, so a law meets a few lengths (docs/plugins.md, "Shape buckets").
  bool shape_buckets = false;
};

class PluginKernel {
 public:
  // Probes the backend's supports(); LoadError when it declines everything or faults while probed.
  PluginKernel(std::unique_ptr<Backend> backend, PluginKernelOptions opt);
  const Kernel& kernel() const { return kernel_; }
  LayoutPolicy layout_policy() const { return opt_.layout; }
  const std::string& notes() const { return notes_; }  // what probing decided, for the run's header
  int restarts() const { return backend_->restarts(); }
  int faults() const { return backend_->faults(); }  // calls that crashed, timed out or broke the context

 private:
  void declare();  // KernelInfo from a version-3 kernel's declarations
  void bound();    // PluginKernelOptions' size bounds
  void probe();
  Problem probe_problem(DtypeSet t, Mask m, int32_t d) const;
  int32_t config_index(const Config& c) const;
  void probe_variants(const Problem& plain);
  bool accepts(const Problem& p, Layout layout);  // supports(), a fault while probing is a LoadError
  bool supports(const Problem& p);                // a fault is kept for the case's forward
  void run(const CallPlan& plan, const HostArgs& in, const HostOuts& out);

  std::unique_ptr<Backend> backend_;
  PluginKernelOptions opt_;
  Kernel kernel_;
  Declared declared_;
  std::string notes_;
  struct Pending {  // supports() faulted on this problem: its case fails with that
    fc_problem problem{};
    DtypeSet dtypes{};
    std::string fault;
  };
  // One worker and one arena serve every thread of a sweep (the audit runs cases in parallel): each
  // call into the backend, and the faults kept between supports() and the case's run, under mutex_.
  std::mutex mutex_;
  std::vector<unsigned char> before_;  // the arena as packed, held against the arena after the call
  std::vector<Pending> pending_;
};

}  // namespace fc::plugin
