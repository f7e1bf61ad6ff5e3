// Calling a loaded kernel on an arena (abi_map.hpp): supports() on a plan, forward/backward on the
// arena's tensors. Host kernels get the arena itself; CUDA kernels a device copy of it (uploaded
// before, downloaded after, the device synchronised and its error state read). Used in-process and
// by the worker process alike.
#pragma once

#include <flashcheck/plugin.h>

#include <memory>
#include <string>

#include "plugin/abi_map.hpp"

namespace fc::plugin {

struct CallResult {
  bool ok = true;
  std::string error;   // why not: the kernel's nonzero return with last_error's text, a CUDA error
  bool fatal = false;  // the process's CUDA context is broken: nothing more can run in it
};

// Device memory mirroring an arena (CUDA builds; elsewhere every method reports that CUDA is absent).
class DeviceStage {
 public:
  DeviceStage();
  ~DeviceStage();
  DeviceStage(const DeviceStage&) = delete;
  DeviceStage& operator=(const DeviceStage&) = delete;
  // Select `device` and create the context and stream there: "" or why it failed. Every later method
  // makes the device current first.
  std::string init(int device = 0);
  int device() const { return device_; }
  static int count();  // CUDA devices present (0 without CUDA)
  // Upload `bytes` of host memory (growing the device buffer); "" or the CUDA error. With `producer`
  // (the hostile harness's producer mode) the device buffer is filled with 0xFF and the bytes land
  // through a kernel on stream() that spins first, enqueued and not waited for: the plugin's call is
  // ordered after them only by the stream (producer.cu).
  std::string upload(const unsigned char* host, uint64_t bytes, bool producer = false);
  std::string download(unsigned char* host, uint64_t bytes);
  unsigned char* data() const { return data_; }
  void* stream() const { return stream_; }
  // Synchronise after a kernel call: "" or the error, *fatal when the context stays broken.
  std::string sync(bool* fatal);

 private:
  unsigned char* data_ = nullptr;
  unsigned char* staging_ = nullptr;  // producer mode: the inputs on the device, before the producer copies them
  uint64_t bytes_ = 0;
  int device_ = 0;
  void* stream_ = nullptr;
};

// Whether a CUDA call of this plan runs in producer mode (DeviceStage::upload): half the problems, by
// a hash of the plan's problem, so that every run of one case shares the choice and a replay reproduces it.
bool producer_call(const CallPlan& plan);
// Whether this process calls CUDA kernels in producer mode at all (default: yes). The Python bridge
// turns it off (capi.cpp): its frameworks run on streams of their own (JAX has no way to wait on a
// foreign stream), so their calls are ordered by the upload's synchronisation instead.
void allow_producer(bool yes);
bool producer_allowed();
// Whether a CUDA call of this plan runs on the second GPU when there is one: another half of the
// problems, by another bit of the same hash. Its tensors are on device 1 (DLDevice device_id 1), its
// stream is device 1's and device 1 is current: a kernel that launches on device 0 whatever its
// tensors say fails there.
bool second_gpu_call(const CallPlan& plan);

// Whether the supports() call running on this thread is the start-up probe's (CallPlan::probing):
// the Python bridge shows it to a kernel's supports() as Problem.probing.
bool probing_supports();

class Executor {
 public:
  explicit Executor(const fc_kernel* k);
  bool on_cuda() const { return k_->device_type == kDLCUDA; }
  std::string init();  // CUDA kernels: the device and its context
  bool supports(const CallPlan& plan) const;
  // Forward or backward (plan.backward) on a host arena of plan.bytes, outputs written into it.
  CallResult call(const CallPlan& plan, unsigned char* arena);

 private:
  const fc_kernel* k_;
  DeviceStage stage_;   // device 0
  DeviceStage second_;  // device 1, when there is one (init)
  bool has_second_ = false;
};

}  // namespace fc::plugin
