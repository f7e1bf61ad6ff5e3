/* A tiled host attention kernel that takes only some shapes and says so (plugin ABI version 3,
 * <flashcheck/plugin.h>, docs/plugins.md "Declarations"): FlashAttention-2's forward on the CPU, in
 * fp32 arithmetic, over tiles of 64 query rows and block_n keys.
 *
 *   - n_q and n_k multiples of 64 (declarations.n_q, n_k); head dims 32, 64, 128;
 *   - F16, BF16 and F32 storage, the three masks, GQA, compact tensors only;
 *   - three configurations: 64 x 64, 64 x 128 and 128 x 64 (fc_problem.config selects one);
 *   - its arithmetic declared (FC_SUM_SERIAL): each score a fused multiply-add chain over d in fp32, times
 *     the scale in fp32; the online softmax per key tile (one rescale per tile); P = expf(s - m) rounded
 *     to storage before P.V, P.V a fused multiply-add chain per row into an fp32 accumulator (fp16 with
 *     FC_ACC16); l summed in fp32 from the unrounded P; o = acc * (1 / l); lse = m + logf(l);
 *   - its exactness declared: rows, shared scores, tile weights, exact scores.
 *
 * Compile definitions, for flashcheck's own tests: FC_FAULT=TAIL drops the last key of a row whose
 * keys span 2 tiles or more (a missing tail tile); FC_FAULT=TAILKEYS (TAILROWS) sums the dot products
 * of the last 8 keys (rows) over d in reverse; FC_NO_EXACT=1 declares
 * the arithmetic but no exactness; FC_ACC16=1 accumulates P.V in fp16 (F16 storage,
 * rows of at most 512 keys, where an fp16 sum's error bound stays below 1), declared
 * (FC_HIDE_ACC16 undefined) or hidden (FC_HIDE_ACC16=1: it claims fp32); FC_UNDECLARED=1 leaves the
 * declarations out. */
#include <flashcheck/plugin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef FC_NAME
#define FC_NAME "example_tiled"
#endif
enum { NONE, TAIL, TAILKEYS, TAILROWS };
#ifndef FC_FAULT
#define FC_FAULT NONE
#endif
#ifndef FC_ACC16
#define FC_ACC16 0
#endif
#ifndef FC_HIDE_ACC16
#define FC_HIDE_ACC16 0
#endif
#ifndef FC_NO_EXACT /* 1: the arithmetic declared, no exactness claim (the permutation laws' differential) */
#define FC_NO_EXACT 0
#endif
#ifndef FC_UNDECLARED /* 1: the same kernel without its declarations (flashcheck's test that it is then refused) */
#define FC_UNDECLARED 0
#endif

static char error_text[256];
static const char *last_error(void) { return error_text; }

/* 2^k for a normal exponent k, from its bits. */
static double pow2(int k) {
  const uint64_t bits = (uint64_t)(k + 1023) << 52;
  double d;
  memcpy(&d, &bits, 8);
  return d;
}

static float half_to_float(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double mag = e == 0 ? m * 0x1p-24 : e == 31 ? (m ? NAN : INFINITY) : (1024 + m) * pow2(e - 25);
  return (float)((h & 0x8000) ? -mag : mag);
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
static float round_half(double x) { return (float)round_format(x, 11, -14, 15); }

/* x rounded to the storage type of t (exact in float afterwards). */
static float to_storage(const DLTensor *t, float x) {
  if (t->dtype.bits == 32) return x;
  if (t->dtype.code == kDLFloat) return round_half(x);
  return (float)round_format(x, 8, -126, 127);
}

static float load(const DLTensor *t, int64_t at) {
  if (t->dtype.bits == 32) return ((const float *)t->data)[at];
  const uint16_t h = ((const uint16_t *)t->data)[at];
  if (t->dtype.code == kDLFloat) return half_to_float(h);
  const uint32_t w = (uint32_t)h << 16;
  float f;
  memcpy(&f, &w, 4);
  return f;
}

static uint16_t half_bits(float q) {
  const uint16_t sign = signbit(q) ? 0x8000 : 0;
  const double a = fabs(q);
  if (isnan(q)) return 0x7E00;
  if (isinf(a)) return sign | 0x7C00;
  if (a < 0x1p-14) return sign | (uint16_t)(a * 0x1p24);
  int e;
  const double m = frexp(a, &e);
  return sign | (uint16_t)((e + 14) << 10) | (uint16_t)((m * 2 - 1) * 1024);
}

static void store(const DLTensor *t, int64_t at, float x) { /* x already rounded to t's type */
  if (t->dtype.bits == 32) {
    ((float *)t->data)[at] = x;
  } else if (t->dtype.code == kDLFloat) {
    ((uint16_t *)t->data)[at] = half_bits(x);
  } else {
    uint32_t w;
    memcpy(&w, &x, 4);
    ((uint16_t *)t->data)[at] = (uint16_t)(w >> 16);
  }
}

static const fc_config configs[] = {{64, 64, 0, 0}, {64, 128, 0, 0}, {128, 64, 0, 0}};
static const int32_t head_dims[] = {32, 64, 128};

static int dtype_ok(const DLTensor *t) {
  if (t->dtype.lanes != 1) return 0;
  if (FC_ACC16) return t->dtype.code == kDLFloat && t->dtype.bits == 16;
  return (t->dtype.code == kDLFloat && (t->dtype.bits == 16 || t->dtype.bits == 32)) ||
         (t->dtype.code == kDLBfloat && t->dtype.bits == 16);
}

static int supports(const fc_problem *p, const fc_forward_args *a) {
  const DLTensor *ts[] = {&a->q, &a->k, &a->v, &a->o};
  for (int i = 0; i < 4; ++i)
    if (ts[i]->ndim != 4 || ts[i]->strides || !dtype_ok(ts[i])) return 0;
  if (a->cu_seqlens_q.ndim || a->page_table.ndim || a->alibi_slopes.ndim) return 0;
  if (p->n_q % 64 || p->n_k % 64 || p->n_q < 64 || p->n_k < 64 || p->d != p->d_v) return 0;
  if (FC_ACC16 && p->n_k > 512) return 0;
  if (p->d != 32 && p->d != 64 && p->d != 128) return 0;
  if (p->window_left != -1 || p->window_right != -1 || p->softcap != 0) return 0;
  return p->config >= 0 && p->config < 3;
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
  const int64_t d = p->d, bn = configs[p->config].block_n;
  const float scale = (float)p->scale;
  /* One head's K and V, and one row of q, decoded to float once (the values load() gives). */
  float *s = malloc(sizeof(float) * (size_t)bn), *acc = malloc(sizeof(float) * (size_t)d);
  float *kf = malloc(sizeof(float) * (size_t)(p->n_k * d + 1)), *vf = malloc(sizeof(float) * (size_t)(p->n_k * d + 1));
  float *qf = malloc(sizeof(float) * (size_t)d);
  if (!s || !acc || !kf || !vf || !qf) {
    free(s), free(acc), free(kf), free(vf), free(qf);
    strcpy(error_text, "out of memory");
    return 1;
  }
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads_q; ++h) {
      const int64_t g = h / (p->heads_q / p->heads_kv);
      const int64_t oq = (b * p->heads_q + h) * p->n_q * d, ok = (b * p->heads_kv + g) * p->n_k * d;
      for (int64_t x = 0; x < p->n_k * d; ++x) kf[x] = load(&a->k, ok + x), vf[x] = load(&a->v, ok + x);
      /* The rows of a query tile walk the same key tiles; each row is independent, so a row at a time. */
      for (int64_t i = 0; i < p->n_q; ++i) {
        int64_t end = visible_end(p, i);
        if (FC_FAULT == TAIL && end > bn) end -= 1; /* the tail tile loses its last key */
        float m = -INFINITY, l = 0;
        for (int64_t c = 0; c < d; ++c) acc[c] = 0, qf[c] = load(&a->q, oq + i * d + c);
        for (int64_t j0 = 0; j0 < end; j0 += bn) {
          const int64_t j1 = j0 + bn < end ? j0 + bn : end;
          float m_new = m;
          for (int64_t j = j0; j < j1; ++j) {
            /* FC_FAULT=TAILKEYS (TAILROWS): the last 8 keys (rows), a remainder path, sum their dot
             * products over d from the last column: within every error bound, but a key's (row's)
             * score then depends on its position. */
            const int rev = (FC_FAULT == TAILKEYS && j >= p->n_k - 8) || (FC_FAULT == TAILROWS && i >= p->n_q - 8);
            float dot = 0;
            for (int64_t e = 0; e < d; ++e) {
              const int64_t c = rev ? d - 1 - e : e;
              dot = fmaf(qf[c], kf[j * d + c], dot);
            }
            s[j - j0] = dot * scale;
            if (s[j - j0] > m_new) m_new = s[j - j0];
          }
          const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
          const float shift = m_new == -INFINITY ? 0.0f : m_new;
          l *= alpha;
          for (int64_t c = 0; c < d; ++c) acc[c] = FC_ACC16 ? round_half((double)acc[c] * alpha) : acc[c] * alpha;
          for (int64_t j = j0; j < j1; ++j) {
            const float pj = expf(s[j - j0] - shift);
            l += pj;
            const float p_op = to_storage(&a->v, pj);
            for (int64_t c = 0; c < d; ++c) {
              const float vj = vf[j * d + c];
              acc[c] = FC_ACC16 ? round_half(fma((double)p_op, (double)vj, (double)acc[c])) : fmaf(p_op, vj, acc[c]);
            }
          }
          m = m_new;
        }
        const float inv = l == 0 ? 0.0f : 1.0f / l;
        for (int64_t c = 0; c < d; ++c) store(&a->o, oq + i * d + c, to_storage(&a->o, acc[c] * inv));
        ((float *)a->lse.data)[(b * p->heads_q + h) * p->n_q + i] = l == 0 ? -INFINITY : m + logf(l);
      }
    }
  free(s), free(acc), free(kf), free(vf), free(qf);
  return 0;
}

#ifndef FC_ABI /* 3: built as a version-3 plugin (flashcheck's test that version 3 still loads) */
#define FC_ABI FC_ABI_VERSION
#endif
static const fc_declarations declarations = {
#if FC_ABI < 4 /* a version-3 struct ends at large_offsets: what lies past it is never read (here: nonsense) */
    .num_dtypes = -1,
    .sinks = 1,
#endif
    .n_q = {.multiple_of = 64},
    .n_k = {.multiple_of = 64, .max = FC_ACC16 ? 512 : 0}, /* fp16 sums stay meaningful to 512 keys */
    .head_dims = head_dims,
    .num_head_dims = 3,
    .arithmetic = {.summation = FC_SUM_SERIAL,
                   .accumulator = FC_ACC16 && !FC_HIDE_ACC16 ? FC_DTYPE_F16 : FC_DTYPE_F32,
                   .fused_products = 1,
                   .block_m = 64,
                   .block_n = 64,
                   .exp_ulps = 1,
                   .log_ulps = 1,
                   .exp_exact_at_zero = 1},
    .exact = {.rows = !FC_NO_EXACT, .shared_scores = !FC_NO_EXACT, .tile_weights = !FC_NO_EXACT,
              .exact_scores = !FC_NO_EXACT},
    .configs = configs,
    .num_configs = 3,
};

static const fc_kernel kernel = {
    .abi_version = FC_ABI,
    .name = FC_NAME,
    .device_type = kDLCPU,
    .writes_lse = 1,
    .supports = supports,
    .forward = forward,
    .backward = NULL,
    .last_error = last_error,
    .declarations = FC_UNDECLARED ? NULL : &declarations,
};

FC_PLUGIN_EXPORT const fc_kernel *flashcheck_kernel(void) { return &kernel; }
