#include "kernels/cuda/device_buffer.hpp"

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/guard.hpp"

namespace fc::cuda {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes_ > 0) check(cudaMalloc(&ptr_, bytes_), "cudaMalloc");
}

DeviceBuffer::DeviceBuffer(const HostTensor& t) : DeviceBuffer(t.bytes.size()) {
  if (bytes_ > 0) check(cudaMemcpy(ptr_, t.bytes.data(), bytes_, cudaMemcpyHostToDevice), "upload");
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::download(HostTensor& t) const {
  if (t.bytes.size() != bytes_) throw std::invalid_argument("download: size mismatch");
  if (bytes_ > 0) check(cudaMemcpy(t.bytes.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), "download");
}

static_assert(GuardedBuffer::kGuard == kGuardBytes, "the guard of guard_breach");

GuardedBuffer::GuardedBuffer(size_t bytes) : all_(bytes + 2 * kGuard), bytes_(bytes) {
  check(cudaMemset(all_.get(), kGuardFill, bytes + 2 * kGuard), "cudaMemset (output guards)");
}

void GuardedBuffer::download(HostTensor& t) const {
  if (t.bytes.size() != bytes_) throw std::invalid_argument("download: size mismatch");
  if (bytes_ > 0) check(cudaMemcpy(t.bytes.data(), get(), bytes_, cudaMemcpyDeviceToHost), "download");
}

std::string GuardedBuffer::breach(const std::string& name, int elem_size) const {
  std::vector<unsigned char> before(kGuard), after(kGuard);
  const char* base = static_cast<const char*>(all_.get());
  check(cudaMemcpy(before.data(), base, kGuard, cudaMemcpyDeviceToHost), "download (output guard)");
  check(cudaMemcpy(after.data(), base + kGuard + bytes_, kGuard, cudaMemcpyDeviceToHost), "download (output guard)");
  return guard_breach(name, int64_t(bytes_) / (elem_size > 0 ? elem_size : 1), elem_size, before.data(), after.data(),
                      kGuard);
}

}  // namespace fc::cuda
