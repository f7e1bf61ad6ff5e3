/* A merge-state kernel (FlashInfer's merge_states, the split-KV combine) as a flashcheck plugin, ABI
 * version 5: P partial results (o_p, lse_p) of the same rows merged into the attention over the union
 * of their keys, in fp32, the largest lse subtracted, any strides read.
 *   flashcheck check --plugin libmerge_cpu.so
 * FC_FAULT plants a shipped bug: NAN_EMPTY drops the guard for a row whose partials are all empty,
 * so exp(-inf - -inf) = NaN reaches o and lse. */
#include <flashcheck/plugin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define NONE 0
#define NAN_EMPTY 1
#ifndef FC_FAULT
#define FC_FAULT NONE
#endif
#ifndef FC_NAME
#define FC_NAME "example_merge_cpu"
#endif

static char error[256];
static const char* last_error(void) { return error; }

/* fp16 and bf16 through fp32 (round to nearest even on the way back). */
static float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) return (sign ? -1.0f : 1.0f) * ldexpf((float)man, -24);
  uint32_t bits = exp == 31 ? sign | 0x7f800000u | (man << 13) : sign | ((exp + 112) << 23) | (man << 13);
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  const float a = fabsf(f);
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < 0x1p-14f) { /* subnormal: multiples of 2^-24, nearest even */
    const float q = nearbyintf(a * 0x1p24f);
    return sign | (uint16_t)q;
  }
  uint32_t m = x & 0x7fffffff;
  const uint32_t rest = m & 0x1fff, keep = m >> 13;
  uint32_t h = keep - (112u << 10);
  if (rest > 0x1000 || (rest == 0x1000 && (keep & 1))) ++h;
  return sign | (uint16_t)h;
}
static float bf16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
static uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static float get(const DLTensor* t, const int64_t* idx) {
  int64_t at = 0;
  for (int a = 0; a < t->ndim; ++a) at += idx[a] * (t->strides ? t->strides[a] : 1);
  const char* base = (const char*)t->data + t->byte_offset;
  if (t->dtype.bits == 32) return ((const float*)base)[at];
  const uint16_t v = ((const uint16_t*)base)[at];
  return t->dtype.code == kDLBfloat ? bf16_to_float(v) : half_to_float(v);
}
static void put(const DLTensor* t, int64_t at, float x) {
  char* base = (char*)t->data + t->byte_offset;
  if (t->dtype.bits == 32)
    ((float*)base)[at] = x;
  else
    ((uint16_t*)base)[at] = t->dtype.code == kDLBfloat ? float_to_bf16(x) : float_to_half(x);
}

static int merge(const fc_merge_problem* p, const fc_merge_args* a, void* stream) {
  (void)stream;
  if (p->dtype != FC_DTYPE_F16 && p->dtype != FC_DTYPE_BF16 && p->dtype != FC_DTYPE_F32) {
    strcpy(error, "dtype must be F16, BF16 or F32");
    return 1;
  }
  if (p->probing) return 0;
  float w[64];
  if (p->partials > 64) {
    strcpy(error, "at most 64 partials");
    return 1;
  }
  for (int64_t r = 0; r < p->rows; ++r)
    for (int64_t h = 0; h < p->heads; ++h) {
      float m = -INFINITY, sum = 0;
      for (int64_t q = 0; q < p->partials; ++q) {
        const int64_t i[3] = {q, h, r};
        w[q] = get(&a->lse_partial, i);
        if (w[q] > m) m = w[q];
      }
      for (int64_t q = 0; q < p->partials; ++q) {
#if FC_FAULT == NAN_EMPTY
        w[q] = expf(w[q] - m); /* no guard: -inf - -inf = NaN on an empty row */
#else
        w[q] = w[q] == -INFINITY ? 0.0f : expf(w[q] - m);
#endif
        sum += w[q];
      }
#if FC_FAULT == NAN_EMPTY
      const float inv = 1.0f / sum, lse = m + logf(sum);
#else
      const float inv = sum == 0 ? 0.0f : 1.0f / sum, lse = sum == 0 ? -INFINITY : m + logf(sum);
#endif
      for (int64_t c = 0; c < p->d_v; ++c) {
        float acc = 0;
        for (int64_t q = 0; q < p->partials; ++q) {
          const int64_t i[4] = {q, r, h, c};
          acc += w[q] * get(&a->o_partial, i);
        }
        put(&a->o, (r * p->heads + h) * p->d_v + c, acc * inv);
      }
      put(&a->lse, h * p->rows + r, lse);
    }
  return 0;
}

static const fc_kernel kernel = {.abi_version = 5,
                                 .name = FC_NAME,
                                 .device_type = kDLCPU,
                                 .writes_lse = 1,
                                 .last_error = last_error,
                                 .merge = merge};

FC_PLUGIN_EXPORT const fc_kernel* flashcheck_kernel(void) { return &kernel; }
