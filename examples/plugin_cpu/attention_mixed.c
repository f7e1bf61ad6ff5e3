/* A host attention kernel whose tensors do not share one dtype, as a CPU inference library calls it
 * (plugin ABI version 3, <flashcheck/plugin.h>, docs/plugins.md "Per-tensor dtypes"): q and o in F32,
 * the K/V cache in F16 (or BF16), lse in fp32. FlashAttention-2's forward in fp32 arithmetic:
 *
 *   - declarations.dtypes: {q, kv, o} = {F32, F16, F32} and {F32, BF16, F32}; supports() reads each
 *     tensor's DLTensor dtype and takes exactly those;
 *   - any lengths, head dims 1..256 (d_v may differ), the three masks, GQA, compact tensors only;
 *   - its arithmetic declared (FC_SUM_SERIAL): each key widened exactly to fp32, each score a fused
 *     multiply-add chain over d in fp32, times the scale in fp32; the online softmax per key tile of 64
 *     (one rescale per tile); P = expf(s - m) kept in fp32 (p_unrounded) and P.V a fused multiply-add
 *     chain per row into an fp32 accumulator; l summed in fp32; o = acc * (1 / l) stored as fp32;
 *     lse = m + logf(l);
 *   - its exactness declared: rows, shared scores, tile weights, exact scores.
 *
 *   cmake -S . -B build && cmake --build build
 *   flashcheck check --plugin build/libattention_mixed.so
 *
 * FC_FAULT (a compile definition), for flashcheck's own tests: K_BF16 reads an F16 key as if it were
 * stored in bf16 (its significand cut to 8 bits: a narrower K than the declared one); O_F16 rounds o to
 * fp16 before storing it in its F32 tensor (a coarser output than declared). FC_BAD_DTYPES=1 or 2
 * declares a combination with an unknown dtype code, or one supports() declines (refused at load). */
#include <flashcheck/plugin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef FC_NAME
#define FC_NAME "example_mixed"
#endif
enum { NONE, K_BF16, O_F16 };
#ifndef FC_FAULT
#define FC_FAULT NONE
#endif

enum { BLOCK_N = 64 };

static char error_text[256];
static const char *last_error(void) { return error_text; }

/* 2^k for a normal exponent k, from its bits. */
static double pow2(int k) {
  const uint64_t bits = (uint64_t)(k + 1023) << 52;
  double d;
  memcpy(&d, &bits, 8);
  return d;
}

/* x rounded once to a binary format of p significand bits, normal exponents emin..emax (ties to even). */
static double round_format(double x, int p, int emin, int emax) {
  if (!isfinite(x) || x == 0) return x;
  uint64_t bits;
  memcpy(&bits, &x, 8);
  const int e = (int)((bits >> 52) & 0x7ff) - 1023; /* floor(log2 |x|) for a normal double */
  if (e > emax) return copysign(INFINITY, x);
  const int E = e < emin ? emin : e;
  /* c = 1.5 * 2^(E - p + 53): x + c lies in c's binade, whose ulp is x's grid 2^(E - p + 1), and c's
   * last bit is even, so the addition rounds x to its grid to nearest even and the subtraction is exact.
   * (The same bits as nearbyint(ldexp(x, p - 1 - E)) scaled back, without the libm calls.) */
  const double c = 1.5 * pow2(E - p + 53);
  const double q = (x + c) - c;
  return fabs(q) > (2 - pow2(1 - p)) * pow2(emax) ? copysign(INFINITY, x) : copysign(q, x);
}

static float half_to_float(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double mag = e == 0 ? m * 0x1p-24 : e == 31 ? (m ? NAN : INFINITY) : (1024 + m) * pow2(e - 25);
  return (float)((h & 0x8000) ? -mag : mag);
}

/* Element `at` of a 16-bit key or value tensor, widened exactly to float. */
static float load_kv(const DLTensor *t, int64_t at) {
  const uint16_t h = ((const uint16_t *)t->data)[at];
  if (t->dtype.code == kDLFloat) return half_to_float(h);
  const uint32_t w = (uint32_t)h << 16; /* bfloat16: the top half of a float */
  float f;
  memcpy(&f, &w, 4);
  return f;
}

static int is(const DLTensor *t, int code, int bits) {
  return t->dtype.code == code && t->dtype.bits == bits && t->dtype.lanes == 1;
}

static int supports(const fc_problem *p, const fc_forward_args *a) {
  const DLTensor *ts[] = {&a->q, &a->k, &a->v, &a->o};
  for (int i = 0; i < 4; ++i)
    if (ts[i]->ndim != 4 || ts[i]->strides) return 0;
  /* q, o F32; k and v one 16-bit type (the declared combinations) */
  if (!is(&a->q, kDLFloat, 32) || !is(&a->o, kDLFloat, 32) || !is(&a->lse, kDLFloat, 32)) return 0;
  if (!(is(&a->k, kDLFloat, 16) || is(&a->k, kDLBfloat, 16)) || a->v.dtype.code != a->k.dtype.code ||
      a->v.dtype.bits != a->k.dtype.bits)
    return 0;
  if (a->cu_seqlens_q.ndim || a->page_table.ndim || a->alibi_slopes.ndim) return 0;
  if (p->window_left != -1 || p->window_right != -1 || p->softcap != 0) return 0;
  return p->mask >= 0 && p->mask <= 2;
}

/* Keys row i sees: [0, end). */
static int64_t visible_end(const fc_problem *p, int64_t i) {
  int64_t end = p->n_k;
  if (p->mask == FC_CAUSAL_TOP_LEFT) end = i + 1;
  if (p->mask == FC_CAUSAL_BOTTOM_RIGHT) end = i + 1 + p->n_k - p->n_q;
  if (end < 0) end = 0;
  return end < p->n_k ? end : p->n_k;
}

static int forward(const fc_problem *p, const fc_forward_args *a, void *stream) {
  (void)stream;
  const int64_t d = p->d, dv = p->d_v;
  const float scale = (float)p->scale;
  const float *q = (const float *)a->q.data;
  float *o = (float *)a->o.data, *lse = (float *)a->lse.data;
  float *s = malloc(sizeof(float) * BLOCK_N), *acc = malloc(sizeof(float) * (size_t)dv);
  if (!s || !acc) {
    free(s), free(acc);
    strcpy(error_text, "out of memory");
    return 1;
  }
  const int k_f16 = a->k.dtype.code == kDLFloat;
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads_q; ++h) {
      const int64_t g = h / (p->heads_q / p->heads_kv);
      const int64_t oq = (b * p->heads_q + h) * p->n_q, okv = (b * p->heads_kv + g) * p->n_k;
      for (int64_t i = 0; i < p->n_q; ++i) {
        const int64_t end = visible_end(p, i);
        float m = -INFINITY, l = 0;
        for (int64_t c = 0; c < dv; ++c) acc[c] = 0;
        for (int64_t j0 = 0; j0 < end; j0 += BLOCK_N) {
          const int64_t j1 = j0 + BLOCK_N < end ? j0 + BLOCK_N : end;
          float m_new = m;
          for (int64_t j = j0; j < j1; ++j) {
            float dot = 0;
            for (int64_t c = 0; c < d; ++c) {
              float kx = load_kv(&a->k, (okv + j) * d + c);
              if (FC_FAULT == K_BF16 && k_f16) kx = (float)round_format(kx, 8, -126, 127);
              dot = fmaf(q[(oq + i) * d + c], kx, dot);
            }
            s[j - j0] = dot * scale;
            if (s[j - j0] > m_new) m_new = s[j - j0];
          }
          const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
          const float shift = m_new == -INFINITY ? 0.0f : m_new;
          l *= alpha;
          for (int64_t c = 0; c < dv; ++c) acc[c] *= alpha;
          for (int64_t j = j0; j < j1; ++j) {
            const float pj = expf(s[j - j0] - shift);
            l += pj;
            for (int64_t c = 0; c < dv; ++c) acc[c] = fmaf(pj, load_kv(&a->v, (okv + j) * dv + c), acc[c]);
          }
          m = m_new;
        }
        const float inv = l == 0 ? 0.0f : 1.0f / l;
        for (int64_t c = 0; c < dv; ++c) {
          float y = acc[c] * inv;
          if (FC_FAULT == O_F16) y = (float)round_format(y, 11, -14, 15);
          o[(oq + i) * dv + c] = y;
        }
        lse[oq + i] = l == 0 ? -INFINITY : m + logf(l);
      }
    }
  free(s), free(acc);
  return 0;
}

#ifndef FC_BAD_DTYPES /* flashcheck's tests of refused declarations: 1 an unknown code, 2 one supports() declines */
#define FC_BAD_DTYPES 0
#endif
#if FC_BAD_DTYPES == 1
#define SECOND_DTYPES {FC_DTYPE_F32, 9, FC_DTYPE_F32}
#elif FC_BAD_DTYPES == 2
#define SECOND_DTYPES {FC_DTYPE_F16, FC_DTYPE_F16, FC_DTYPE_F16}
#else
#define SECOND_DTYPES {FC_DTYPE_F32, FC_DTYPE_BF16, FC_DTYPE_F32}
#endif
static const fc_dtypes dtypes[] = {{FC_DTYPE_F32, FC_DTYPE_F16, FC_DTYPE_F32}, SECOND_DTYPES};

static const fc_declarations declarations = {
    .arithmetic = {.summation = FC_SUM_SERIAL,
                   .accumulator = FC_DTYPE_F32,
                   .fused_products = 1,
                   .p_unrounded = 1,
                   .block_m = 1,
                   .block_n = BLOCK_N,
                   .exp_ulps = 1,
                   .log_ulps = 1,
                   .exp_exact_at_zero = 1},
    .exact = {.rows = 1, .shared_scores = 1, .tile_weights = 1, .exact_scores = 1},
    .dtypes = dtypes,
    .num_dtypes = 2,
};

static const fc_kernel kernel = {
    .abi_version = FC_ABI_VERSION,
    .name = FC_NAME,
    .device_type = kDLCPU,
    .writes_lse = 1,
    .supports = supports,
    .forward = forward,
    .backward = NULL,
    .last_error = last_error,
    .declarations = &declarations,
};

FC_PLUGIN_EXPORT const fc_kernel *flashcheck_kernel(void) { return &kernel; }
