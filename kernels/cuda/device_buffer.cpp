#include "kernels/cuda/device_buffer.hpp"

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>
#include <utility>

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

}  // namespace fc::cuda
