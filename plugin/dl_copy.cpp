#include "plugin/dl_copy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#ifdef FLASHCHECK_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace fc::plugin {
namespace {

std::string dtype_name(const DLDataType& t) {
  const char* base = t.code == kDLFloat    ? "float"
                     : t.code == kDLBfloat ? "bfloat"
                     : t.code == kDLInt    ? "int"
                     : t.code == kDLUInt   ? "uint"
                                           : "type";
  return fmt::format("{}{}{}", base, int(t.bits), t.lanes == 1 ? "" : fmt::format("x{}", int(t.lanes)));
}

const char* device_name(int32_t type) {
  switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host";
    case kDLCUDAManaged: return "cuda_managed";
    default: return "another device";
  }
}

int64_t stride(const DLTensor& t, int a) {
  if (t.strides) return t.strides[a];
  int64_t s = 1;
  for (int b = t.ndim - 1; b > a; --b) s *= t.shape[b];
  return s;
}

// Element-by-element copy between two host views (base pointers at element (0, ..., 0)).
void host_copy(const DLTensor& src, const unsigned char* s0, const DLTensor& dst, unsigned char* d0, int64_t esize) {
  int64_t n = 1;
  for (int d = 0; d < src.ndim; ++d) n *= src.shape[d];
  std::vector<int64_t> idx(size_t(std::max(src.ndim, 1)), 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t so = 0, dof = 0;
    for (int d = 0; d < src.ndim; ++d) so += idx[size_t(d)] * stride(src, d), dof += idx[size_t(d)] * stride(dst, d);
    std::memcpy(d0 + dof * esize, s0 + so * esize, size_t(esize));
    for (int d = src.ndim - 1; d >= 0 && ++idx[size_t(d)] == src.shape[d]; --d) idx[size_t(d)] = 0;
  }
}

#ifdef FLASHCHECK_HAVE_CUDA
// The byte range [lo, hi) the tensor's elements cover, relative to data + byte_offset.
void span(const DLTensor& t, int64_t esize, int64_t* lo, int64_t* hi) {
  int64_t a = 0, b = 0;
  for (int d = 0; d < t.ndim; ++d) {
    const int64_t s = stride(t, d) * (t.shape[d] - 1);
    (s < 0 ? a : b) += s;
  }
  *lo = a * esize, *hi = (b + 1) * esize;
}
#endif

}  // namespace

std::string dl_describe(const DLTensor& t) {
  std::string shape;
  for (int d = 0; d < t.ndim; ++d) shape += fmt::format("{}{}", d ? ", " : "", t.shape[d]);
  if (t.ndim == 1) shape += ",";
  return fmt::format("{} ({}) on {}", dtype_name(t.dtype), shape, device_name(t.device.device_type));
}

std::string dl_copy(const DLTensor& src, const DLTensor& dst) {
  const bool same_shape = src.ndim == dst.ndim && std::equal(src.shape, src.shape + src.ndim, dst.shape);
  const bool same_dtype =
      src.dtype.code == dst.dtype.code && src.dtype.bits == dst.dtype.bits && src.dtype.lanes == dst.dtype.lanes;
  if (!same_shape || !same_dtype || src.device.device_type != dst.device.device_type)
    return fmt::format("got {}, expected {}", dl_describe(src), dl_describe(dst));
  if (src.dtype.bits % 8) return "sub-byte dtypes are not supported";
  const int64_t esize = src.dtype.bits / 8 * src.dtype.lanes;
  for (int d = 0; d < src.ndim; ++d)
    if (src.shape[d] == 0) return "";
  if (!src.data || !dst.data) return "a tensor without data";
  const unsigned char* s = static_cast<const unsigned char*>(src.data) + src.byte_offset;
  unsigned char* d = static_cast<unsigned char*>(dst.data) + dst.byte_offset;
  if (dst.device.device_type == kDLCPU) return host_copy(src, s, dst, d, esize), "";
#ifdef FLASHCHECK_HAVE_CUDA
  if (dst.device.device_type == kDLCUDA) {
    // Both spans through host memory: outputs are small next to the oracle's work, and any strides
    // (and the destination's gaps) survive untouched.
    int64_t slo, shi, dlo, dhi;
    span(src, esize, &slo, &shi), span(dst, esize, &dlo, &dhi);
    std::vector<unsigned char> hs(size_t(shi - slo)), hd(size_t(dhi - dlo));
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(hs.data(), s + slo, hs.size(), cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) e = cudaMemcpy(hd.data(), d + dlo, hd.size(), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return fmt::format("reading the tensors: {}", cudaGetErrorString(e));
    host_copy(src, hs.data() - slo, dst, hd.data() - dlo, esize);
    e = cudaMemcpy(d + dlo, hd.data(), hd.size(), cudaMemcpyHostToDevice);
    return e == cudaSuccess ? "" : fmt::format("writing the output: {}", cudaGetErrorString(e));
  }
#endif
  return fmt::format("cannot copy tensors on {}", device_name(dst.device.device_type));
}

}  // namespace fc::plugin
