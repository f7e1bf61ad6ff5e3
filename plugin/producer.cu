// The hostile harness's producer (device_stage.cpp, DeviceStage::upload in producer mode): a kernel
// that writes a CUDA plugin's inputs into its arena on the kernel's own stream, after a spin, with no
// host synchronisation before the plugin is called. Until it has run, the arena holds 0xFF (NaN)
// everywhere: a kernel ordered after it on the stream reads its inputs; one that launches on another
// stream, or lets a dependent launch (programmatic dependent launch) start before its producer has
// finished, reads NaN.
#include <cuda_runtime.h>

#include <cstdint>

namespace fc::plugin {
namespace {

__global__ void produce(unsigned char* __restrict__ dst, const unsigned char* __restrict__ src, uint64_t bytes,
                        long long spin_cycles) {
  const long long start = clock64();
  while (clock64() - start < spin_cycles) {
  }
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  const uint64_t words = bytes / 16;  // the arena is 256-aligned: 16-byte words, then the tail
  for (uint64_t x = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < words; x += stride)
    reinterpret_cast<uint4*>(dst)[x] = reinterpret_cast<const uint4*>(src)[x];
  for (uint64_t x = words * 16 + uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < bytes; x += stride)
    dst[x] = src[x];
}

}  // namespace

cudaError_t launch_producer(unsigned char* dst, const unsigned char* src, uint64_t bytes, long long spin_cycles,
                            cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  const uint64_t words = (bytes + 15) / 16;
  const unsigned blocks = unsigned(words / 256 + 1 < 1024 ? words / 256 + 1 : 1024);
  produce<<<blocks, 256, 0, stream>>>(dst, src, bytes, spin_cycles);
  return cudaGetLastError();
}

}  // namespace fc::plugin
