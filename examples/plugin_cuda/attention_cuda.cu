// A CUDA attention forward as a flashcheck plugin (<flashcheck/plugin.h>): one thread per query row,
// online softmax in fp32 (FMA dot products, expf), any strides, F16/BF16/F32 storage, the three masks,
// GQA, d and d_v up to 256. No backward (the ABI's backward entry is NULL). It declines the variants it
// does not implement (varlen, paged K/V, windows, softcap, ALiBi).
//
//   cmake -S . -B build && cmake --build build
//   flashcheck check --plugin build/libattention_cuda.so
//
// FC_FAULT=ILLEGAL (a compile definition) plants an illegal address for n_k > 3, for flashcheck's own
// test that a broken CUDA context is a failing case and the suite goes on. FC_FAULT=OTHER_STREAM
// launches on a stream of its own instead of the one it is given, unordered with the work before the
// call (a producer race: the hostile harness's producer mode writes the inputs on the given stream).
// FC_FAULT=DEVICE0 makes device 0 current before it launches, whatever device its tensors and stream
// are on (the suite's second-GPU calls put them on device 1: the launch fails there).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <flashcheck/plugin.h>

#include <cmath>
#include <cstdio>

#ifndef FC_NAME
#define FC_NAME "example_cuda"
#endif
#define NONE 0
#define ILLEGAL 1
#define OTHER_STREAM 2
#define DEVICE0 3
#ifndef FC_FAULT
#define FC_FAULT NONE
#endif

namespace {

constexpr int kMaxDim = 256;
constexpr int kRows = 64;  // query rows (threads) per block
char error_text[256];

struct View {  // a rank-4 (or rank-3) tensor: base pointer and strides in elements
  char* data;
  int64_t s[4];
};

View view_of(const DLTensor& t) {
  View v{static_cast<char*>(t.data) + t.byte_offset, {0, 0, 0, 0}};
  int64_t stride = 1;
  for (int a = t.ndim - 1; a >= 0; --a) {
    v.s[a] = t.strides ? t.strides[a] : stride;
    stride *= t.shape[a];
  }
  return v;
}

__device__ float to_float(__half x) { return __half2float(x); }
__device__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float to_float(float x) { return x; }
template <class T>
__device__ T from_float(float x);
template <>
__device__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ float from_float<float>(float x) {
  return x;
}

template <class T>
__device__ T& at(const View& v, int64_t b, int64_t h, int64_t i, int64_t x) {
  return reinterpret_cast<T*>(v.data)[b * v.s[0] + h * v.s[1] + i * v.s[2] + x * v.s[3]];
}

template <class T>
__global__ void attention_forward(fc_problem p, View q, View k, View v, View o, View lse) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, h = blockIdx.y, b = blockIdx.z;
  if (i >= p.n_q) return;
  const int64_t hk = h / (p.heads_q / p.heads_kv);
  int64_t n_visible = p.n_k;  // visible keys are a prefix
  if (p.mask == FC_CAUSAL_TOP_LEFT) n_visible = i + 1;
  if (p.mask == FC_CAUSAL_BOTTOM_RIGHT) n_visible = i + 1 + p.n_k - p.n_q;
  n_visible = n_visible < 0 ? 0 : (n_visible > p.n_k ? p.n_k : n_visible);
  if (FC_FAULT == ILLEGAL && p.n_k > 3) reinterpret_cast<float*>(16)[threadIdx.x] = 1;
  float m = -INFINITY, l = 0, acc[kMaxDim];
  for (int x = 0; x < p.d_v; ++x) acc[x] = 0;
  for (int64_t j = 0; j < n_visible; ++j) {
    float s = 0;
    for (int x = 0; x < p.d; ++x) s = fmaf(to_float(at<T>(q, b, h, i, x)), to_float(at<T>(k, b, hk, j, x)), s);
    s *= float(p.scale);
    const float m_new = fmaxf(m, s);  // a NaN score never becomes the max: it poisons through its weight
    // -inf - -inf guard: while every score so far is -inf, nothing is rescaled and nothing is added.
    const float alpha = m == -INFINITY ? 0.f : expf(m - m_new);
    const float w = s == -INFINITY ? 0.f : expf(s - m_new);
    l = l * alpha + w;
    for (int x = 0; x < p.d_v; ++x) acc[x] = acc[x] * alpha + w * to_float(at<T>(v, b, hk, j, x));
    m = m_new;
  }
  for (int x = 0; x < p.d_v; ++x) at<T>(o, b, h, i, x) = from_float<T>(l > 0 ? acc[x] / l : 0.f);
  reinterpret_cast<float*>(lse.data)[b * lse.s[0] + h * lse.s[1] + i * lse.s[2]] = l > 0 ? m + logf(l) : -INFINITY;
}

bool is(const DLDataType& t, uint8_t code, uint8_t bits) { return t.code == code && t.bits == bits && t.lanes == 1; }

int supports(const fc_problem* p, const fc_forward_args* a) {
  const DLDataType t = a->q.dtype;
  return (is(t, kDLFloat, 16) || is(t, kDLBfloat, 16) || is(t, kDLFloat, 32)) && is(a->lse.dtype, kDLFloat, 32) &&
         a->q.ndim == 4 && a->q.device.device_type == kDLCUDA && p->d <= kMaxDim && p->d_v <= kMaxDim && p->mask >= 0 &&
         p->mask <= 2 && p->softcap == 0 && p->window_left == -1 && p->window_right == -1 &&
         // a variant's tensor is present by its shape: every data pointer is NULL in supports()
         a->cu_seqlens_q.ndim == 0 && a->cu_seqlens_k.ndim == 0 && a->page_table.ndim == 0 && a->alibi_slopes.ndim == 0;
}

template <class T>
void launch(const fc_problem* p, const fc_forward_args* a, cudaStream_t stream) {
  const dim3 grid(unsigned((p->n_q + kRows - 1) / kRows), unsigned(p->heads_q), unsigned(p->batch));
  attention_forward<T>
      <<<grid, kRows, 0, stream>>>(*p, view_of(a->q), view_of(a->k), view_of(a->v), view_of(a->o), view_of(a->lse));
}

int forward(const fc_problem* p, const fc_forward_args* a, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (FC_FAULT == OTHER_STREAM) {  // the planted bug: a stream of its own, never waiting on the caller's
    static cudaStream_t own = nullptr;
    if (!own && cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking) != cudaSuccess) own = nullptr;
    if (own) s = own;
  }
  if (FC_FAULT == DEVICE0) cudaSetDevice(0);  // the planted bug: device 0 made current, whatever the tensors say
  if (is(a->q.dtype, kDLFloat, 16)) launch<__half>(p, a, s);
  if (is(a->q.dtype, kDLBfloat, 16)) launch<__nv_bfloat16>(p, a, s);
  if (is(a->q.dtype, kDLFloat, 32)) launch<float>(p, a, s);
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return 0;
  std::snprintf(error_text, sizeof error_text, "launch: %s", cudaGetErrorString(e));
  return 1;
}

const char* last_error() { return error_text; }

const fc_kernel kernel = {FC_ABI_VERSION, FC_NAME, kDLCUDA, 1, supports, forward, nullptr, last_error};

}  // namespace

const fc_kernel* flashcheck_kernel(void) { return &kernel; }
