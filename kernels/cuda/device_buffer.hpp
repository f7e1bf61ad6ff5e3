// Device memory for the registry's host-tensor entry points: an owning cudaMalloc buffer with
// upload/download of HostTensor bytes (fp16 and bf16 bits are the same on host and device), and a
// checker that turns CUDA errors into exceptions. Host only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/tensor.hpp"

namespace fc::cuda {

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

}  // namespace fc::cuda
