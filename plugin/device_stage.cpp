// DeviceStage (executor.hpp): the CUDA half of the executor, host code over the runtime API. Without
// CUDA every method says so, and a kDLCUDA plugin fails to start with that message.
#include <fmt/format.h>

#include <algorithm>

#include "plugin/executor.hpp"

#ifdef FLASHCHECK_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace fc::plugin {

#ifdef FLASHCHECK_HAVE_CUDA

cudaError_t launch_producer(unsigned char* dst, const unsigned char* src, uint64_t bytes, long long spin_cycles,
                            cudaStream_t stream);  // producer.cu

namespace {
std::string why(cudaError_t e) { return fmt::format("{} ({})", cudaGetErrorString(e), cudaGetErrorName(e)); }
// The producer's spin before it writes: 2^21 cycles, about 1 ms at the H200's 1.98 GHz, long past a
// kernel launch, so a plugin kernel that is not ordered after the producer runs before its inputs land.
constexpr long long kProducerSpin = 1ll << 21;
}  // namespace

DeviceStage::DeviceStage() = default;

int DeviceStage::count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

DeviceStage::~DeviceStage() {
  if (data_ || staging_ || stream_) cudaSetDevice(device_);
  if (data_) cudaFree(data_);
  if (staging_) cudaFree(staging_);
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

std::string DeviceStage::init(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return "no CUDA device is present";
  if (device >= n) return fmt::format("no CUDA device {} ({} present)", device, n);
  device_ = device;
  cudaError_t e = cudaSetDevice(device_);
  if (e != cudaSuccess) return fmt::format("selecting CUDA device {}: {}", device_, why(e));
  cudaStream_t s = nullptr;
  e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) return "creating a CUDA stream: " + why(e);
  stream_ = s;
  return "";
}

std::string DeviceStage::upload(const unsigned char* host, uint64_t bytes, bool producer) {
  if (const cudaError_t e = cudaSetDevice(device_); e != cudaSuccess)
    return fmt::format("selecting CUDA device {}: {}", device_, why(e));
  if (bytes > bytes_) {
    if (data_) cudaFree(data_);
    if (staging_) cudaFree(staging_);
    data_ = staging_ = nullptr, bytes_ = 0;
    cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&data_), bytes);
    if (e == cudaSuccess) e = cudaMalloc(reinterpret_cast<void**>(&staging_), bytes);
    if (e != cudaSuccess) return fmt::format("cudaMalloc of {} bytes: {}", bytes, why(e));
    bytes_ = bytes;
  }
  // cudaMemcpy from pageable memory may return before its DMA has landed, and it orders only the
  // legacy default stream: a kernel on our non-blocking stream, or a framework reading on streams of
  // its own (JAX), could read the bytes before they arrive. Copy on our stream and wait for it.
  const auto s = static_cast<cudaStream_t>(stream_);
  if (producer) {  // the arena NaN, the inputs staged; then the producer, not waited for
    cudaError_t e = cudaMemsetAsync(data_, 0xFF, bytes, s);
    if (e == cudaSuccess) e = cudaMemcpyAsync(staging_, host, bytes, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e == cudaSuccess) e = launch_producer(data_, staging_, bytes, kProducerSpin, s);
    return e == cudaSuccess ? "" : "producer mode: " + why(e);
  }
  cudaError_t e = cudaMemcpyAsync(data_, host, bytes, cudaMemcpyHostToDevice, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  return e == cudaSuccess ? "" : why(e);
}

std::string DeviceStage::download(unsigned char* host, uint64_t bytes) {
  cudaError_t e = cudaSetDevice(device_);
  if (e == cudaSuccess) e = cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost);
  return e == cudaSuccess ? "" : why(e);
}

std::string DeviceStage::sync(bool* fatal) {
  // The kernel may have ignored our stream: synchronise the whole device (every device: a kernel given
  // device 1's tensors may have launched on device 0).
  int n = 0;
  cudaGetDeviceCount(&n);
  n = std::min(n, 2);  // the devices calls use
  cudaError_t e = cudaSuccess;
  for (int x = 0; x < n && e == cudaSuccess; ++x)
    if (x != device_ && (e = cudaSetDevice(x)) == cudaSuccess) e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaSetDevice(device_);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e == cudaSuccess) return "";
  cudaGetLastError();  // clears a launch error; a sticky error (illegal address, ...) stays
  *fatal = cudaDeviceSynchronize() != cudaSuccess || cudaFree(nullptr) != cudaSuccess;
  return why(e) + (*fatal ? " — the CUDA context is broken" : "");
}

#else

DeviceStage::DeviceStage() = default;
DeviceStage::~DeviceStage() = default;
int DeviceStage::count() { return 0; }
std::string DeviceStage::init(int) { return "this flashcheck was built without CUDA"; }
std::string DeviceStage::upload(const unsigned char*, uint64_t, bool) { return "this flashcheck was built without CUDA"; }
std::string DeviceStage::download(unsigned char*, uint64_t) { return "this flashcheck was built without CUDA"; }
std::string DeviceStage::sync(bool*) { return ""; }

#endif

}  // namespace fc::plugin
