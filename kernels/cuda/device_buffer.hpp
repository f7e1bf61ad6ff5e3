// Device memory for the registry's host-tensor entry points: an owning cudaMallocAsync buffer with
// upload/download of HostTensor bytes (fp16 and bf16 bits are the same on host and device), an output
// buffer between two guards (kernels/guard.hpp), and a checker that turns CUDA errors into exceptions.
// Host only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "contract/tensor.hpp"

namespace fc::cuda {

// Every operation of these buffers, and the registry's launches (cuda_kernels.cpp), runs on the calling
// thread's default stream, allocating from the device's memory pool (cudaMallocAsync): calls from
// several host threads (fuzz's batches in flight) overlap, and no free synchronises the device.
inline const cudaStream_t kStream = cudaStreamPerThread;

// Throws std::runtime_error naming `what` when e is not cudaSuccess.
void check(cudaError_t e, const char* what);

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  explicit DeviceBuffer(const HostTensor& t);  // allocate and upload
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t size() const { return bytes_; }
  void download(HostTensor& t) const;  // t.bytes must already have this buffer's size

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// An output's device memory: `bytes` between a guard of kGuardBytes before and one after, the whole
// allocation filled with kGuardFill (NaN), so that the output starts poisoned and a write outside it
// changes a guard. get() is the output's first byte (aligned as cudaMalloc aligns).
class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 256;  // kGuardBytes (kernels/guard.hpp)
  explicit GuardedBuffer(size_t bytes);
  void* get() const { return static_cast<char*>(all_.get()) + kGuard; }
  size_t size() const { return bytes_; }
  void download(HostTensor& t) const;  // t.bytes must already have this buffer's size
  // After the call (synchronised): "" when both guards are untouched, else the line naming the
  // element of tensor `name` (elements of elem_size bytes) next to the stray write.
  std::string breach(const std::string& name, int elem_size) const;

 private:
  DeviceBuffer all_;
  size_t bytes_ = 0;
};

}  // namespace fc::cuda
