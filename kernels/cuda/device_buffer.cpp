#include "kernels/cuda/device_buffer.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/guard.hpp"

namespace fc::cuda {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

namespace {

// The device's default memory pool keeps up to this much freed memory for the next allocation (its
// default, 0, hands every freed byte back at the next synchronisation): a fuzz batch or a law's run
// allocates the same sizes call after call. Larger frees still go back, so a big case's buffers do
// not stay held against the GPU oracle's cudaMalloc.
constexpr uint64_t kPoolKeeps = uint64_t(1) << 30;

void keep_freed_memory() {
  static const bool once = [] {
    int dev = 0;
    cudaMemPool_t pool;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) {
      uint64_t keep = kPoolKeeps;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);  // a hint: failure costs only time
    }
    return true;
  }();
  (void)once;
}

}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  keep_freed_memory();
  if (bytes_ > 0) check(cudaMallocAsync(&ptr_, bytes_, kStream), "cudaMallocAsync");
}

DeviceBuffer::DeviceBuffer(const HostTensor& t) : DeviceBuffer(t.bytes.size()) {
  // From pageable memory the copy has left t.bytes when it returns.
  if (bytes_ > 0) check(cudaMemcpyAsync(ptr_, t.bytes.data(), bytes_, cudaMemcpyHostToDevice, kStream), "upload");
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFreeAsync(ptr_, kStream);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFreeAsync(ptr_, kStream);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::download(HostTensor& t) const {
  if (t.bytes.size() != bytes_) throw std::invalid_argument("download: size mismatch");
  if (bytes_ > 0) check(cudaMemcpyAsync(t.bytes.data(), ptr_, bytes_, cudaMemcpyDeviceToHost, kStream), "download");
  check(cudaStreamSynchronize(kStream), "download (sync)");
}

static_assert(GuardedBuffer::kGuard == kGuardBytes, "the guard of guard_breach");

GuardedBuffer::GuardedBuffer(size_t bytes) : all_(bytes + 2 * kGuard), bytes_(bytes) {
  check(cudaMemsetAsync(all_.get(), kGuardFill, bytes + 2 * kGuard, kStream), "cudaMemset (output guards)");
}

void GuardedBuffer::download(HostTensor& t) const {
  if (t.bytes.size() != bytes_) throw std::invalid_argument("download: size mismatch");
  if (bytes_ > 0) check(cudaMemcpyAsync(t.bytes.data(), get(), bytes_, cudaMemcpyDeviceToHost, kStream), "download");
  check(cudaStreamSynchronize(kStream), "download (sync)");
}

std::string GuardedBuffer::breach(const std::string& name, int elem_size) const {
  std::vector<unsigned char> before(kGuard), after(kGuard);
  const char* base = static_cast<const char*>(all_.get());
  check(cudaMemcpyAsync(before.data(), base, kGuard, cudaMemcpyDeviceToHost, kStream), "download (output guard)");
  check(cudaMemcpyAsync(after.data(), base + kGuard + bytes_, kGuard, cudaMemcpyDeviceToHost, kStream),
        "download (output guard)");
  check(cudaStreamSynchronize(kStream), "download (output guard, sync)");
  return guard_breach(name, int64_t(bytes_) / (elem_size > 0 ? elem_size : 1), elem_size, before.data(), after.data(),
                      kGuard);
}

}  // namespace fc::cuda
