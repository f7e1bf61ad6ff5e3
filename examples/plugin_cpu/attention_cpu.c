/* A correct host attention kernel as a flashcheck plugin (<flashcheck/plugin.h>): forward and backward
 * in double precision, any strides, F16/BF16/F32/F64 storage, the three masks, GQA, d_v != d, varlen
 * batches (cu_seqlens_q/k, zero-length sequences included), padded varlen (cu_seqlens_*_padded, ABI
 * version 5), attention sinks (ABI version 4), mask tensors (boolean, additive in F32/F16/BF16) and
 * block masks on dense problems (ABI version 5), each output
 * rounded once (to nearest even) into its storage type. It declines the variants it does not implement
 * (paged K/V, windows, softcap, ALiBi).
 *
 *   cmake -S . -B build && cmake --build build
 *   flashcheck check --plugin build/libattention_cpu.so
 *
 * FC_FAULT (a compile definition) plants one bug, for flashcheck's own tests of its plugin path; the
 * faults fire only when n_k > 3, so each minimal counterexample has n_k = 4 (LAYOUT_CACHE, a cache of
 * strides by shape, fires on any call after the first of a shape; PADDED, padded varlen's sequences
 * located by cu_seqlens instead of cu_seqlens_*_padded, fires on every padded problem). */
#include <flashcheck/plugin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef FC_NAME
#define FC_NAME "example_cpu"
#endif
/* MASK_F16: an F32 additive mask read as F16 elements (element x: the half at bytes 2x, 2x + 1). */
enum { NONE, SEGV, ABORT, HANG, ERROR, STRIDES, CAUSAL, EXIT, OOB, LAYOUT_CACHE, SINK, PADDED, MASK_F16 };
#ifndef FC_FAULT
#define FC_FAULT NONE
#endif
#ifndef FC_MAX_N /* nonzero: decline longer sequences (flashcheck's test of declined cases) */
#define FC_MAX_N 0
#endif
/* FC_COMPACT 1: compact tensors only (axes of length 1 aside, as DLPack's importers take them), 2: compact
 * varlen tensors only; supports() declines others, and forward/backward fail if one reaches them. */
#ifndef FC_COMPACT
#define FC_COMPACT 0
#endif

/* FC_DQ (flashcheck's own tests of the determinism law): d_q summed in fp32 (fp64 storage: fp64) over
 * keys in an order that changes from call to call, as atomics do (DQ_ATOMIC, declared
 * FC_BACKWARD_ATOMIC; DQ_ATOMIC_HIDDEN: the same claiming FC_BACKWARD_DETERMINISTIC); two
 * configurations, the atomic one and a deterministic mode in key order (DQ_MODE), or a mode that sums
 * in reverse order in one call of 30 (DQ_MODE_RARE). */
enum { DQ_NONE, DQ_ATOMIC, DQ_ATOMIC_HIDDEN, DQ_MODE, DQ_MODE_RARE };
#ifndef FC_DQ
#define FC_DQ DQ_NONE
#endif
#define DQ_ON (FC_DQ != DQ_NONE)

static char error_text[256];
static const char *last_error(void) { return error_text; }

/* FC_FAULT LAYOUT_CACHE: a plan cached per problem (its fc_problem, the tensor's dtype and shape),
 * strides included: the strides of the first tensor seen of each (problem, shape), reused for every later call
 * of that problem whatever its tensors' strides (as kernels that build TMA descriptors or launch plans
 * per problem do). The cache holds 256 entries, then stops caching. */
typedef struct {
  fc_problem problem;
  DLDataType dtype;
  int ndim, has_strides;
  int64_t shape[4], strides[4];
} layout_entry;
static layout_entry layout_cache[256];
static int layout_cached;
static fc_problem current_problem; /* the call's problem, set by forward and backward */

static const int64_t *cached_strides(const DLTensor *t) {
  for (int x = 0; x < layout_cached; ++x) {
    const layout_entry *e = &layout_cache[x];
    if (e->ndim == t->ndim && memcmp(&e->problem, &current_problem, sizeof current_problem) == 0 &&
        e->dtype.code == t->dtype.code && e->dtype.bits == t->dtype.bits &&
        memcmp(e->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) == 0)
      return e->has_strides ? e->strides : NULL;
  }
  if (layout_cached < 256 && t->ndim <= 4) {
    layout_entry *e = &layout_cache[layout_cached++];
    e->problem = current_problem, e->dtype = t->dtype;
    e->ndim = t->ndim, e->has_strides = t->strides != NULL;
    memcpy(e->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    if (t->strides) memcpy(e->strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
  }
  return t->strides;
}

/* Element (i0, i1, i2, i3) of a rank-3 or rank-4 tensor, honouring its strides (NULL: compact). */
static int64_t offset_of(const DLTensor *t, const int64_t *idx) {
  int64_t off = 0, stride = 1;
  const int64_t *strides = FC_FAULT == LAYOUT_CACHE ? cached_strides(t) : t->strides;
  for (int a = t->ndim - 1; a >= 0; --a) {
    const int64_t s = (strides && FC_FAULT != STRIDES) ? strides[a] : stride;
    off += idx[a] * s;
    stride *= t->shape[a];
  }
  return off;
}

/* 2^k for a normal exponent k, from its bits. */
static double pow2(int k) {
  const uint64_t bits = (uint64_t)(k + 1023) << 52;
  double d;
  memcpy(&d, &bits, 8);
  return d;
}

static double half_to_double(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double mag = e == 0 ? m * 0x1p-24 : e == 31 ? (m ? NAN : INFINITY) : (1024 + m) * pow2(e - 25);
  return (h & 0x8000) ? -mag : mag;
}

/* x rounded once to a binary format with p significand bits, normal exponents emin..emax. */
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

static uint16_t half_bits(double q) { /* q already a binary16 value */
  const uint16_t sign = signbit(q) ? 0x8000 : 0;
  const double a = fabs(q);
  if (isnan(q)) return 0x7E00;
  if (isinf(a)) return sign | 0x7C00;
  if (a < 0x1p-14) return sign | (uint16_t)(a * 0x1p24);
  int e;
  const double m = frexp(a, &e);
  return sign | (uint16_t)((e + 14) << 10) | (uint16_t)((m * 2 - 1) * 1024);
}

static double load(const DLTensor *t, const int64_t *idx) {
  const char *p = (const char *)t->data + t->byte_offset;
  const int64_t at = offset_of(t, idx);
  if (t->dtype.bits == 64) return ((const double *)p)[at];
  if (t->dtype.bits == 32) return ((const float *)p)[at];
  const uint16_t h = ((const uint16_t *)p)[at];
  if (t->dtype.code == kDLFloat) return half_to_double(h);
  const uint32_t w = (uint32_t)h << 16; /* bfloat16: the top half of a float */
  float f;
  memcpy(&f, &w, 4);
  return f;
}

static void store(const DLTensor *t, const int64_t *idx, double x) {
  char *p = (char *)t->data + t->byte_offset;
  const int64_t at = offset_of(t, idx);
  if (t->dtype.bits == 64) {
    ((double *)p)[at] = x;
  } else if (t->dtype.bits == 32) {
    ((float *)p)[at] = (float)x; /* one rounding, to nearest even */
  } else if (t->dtype.code == kDLFloat) {
    ((uint16_t *)p)[at] = half_bits(round_format(x, 11, -14, 15));
  } else {
    const float f = (float)round_format(x, 8, -126, 127); /* exact in float */
    uint32_t w;
    memcpy(&w, &f, 4);
    ((uint16_t *)p)[at] = isnan(x) ? 0x7FC0 : (uint16_t)(w >> 16);
  }
}

/* Whether t's strides are a compact tensor's (NULL, or row-major where an axis is longer than 1). */
static int compact(const DLTensor *t) {
  int64_t want = 1;
  for (int a = t->ndim - 1; t->strides && a >= 0; --a) {
    if (t->shape[a] > 1 && t->strides[a] != want) return 0;
    want *= t->shape[a];
  }
  return 1;
}
static int compact_all(const DLTensor *const *ts, int n) { /* FC_COMPACT's rule over q, k, v, ... */
  if (FC_COMPACT == 0 || (FC_COMPACT == 2 && ts[0]->ndim != 3)) return 1;
  for (int i = 0; i < n; ++i)
    if (!compact(ts[i])) return 0;
  return 1;
}

#ifndef FC_ABI /* 2, 4: built as a version-2 or -4 plugin (flashcheck's test that older versions still load) */
#define FC_ABI FC_ABI_VERSION
#endif

/* Sequence b: its problem (n_q, n_k its lengths) and its first query and key rows (varlen: from
 * cu_seqlens; padded varlen, version 5: from cu_seqlens_q_padded / cu_seqlens_k_padded; dense: 0). */
typedef struct {
  fc_problem p;
  int64_t q0, k0;
} seq;
static seq sequence(const fc_problem *p, const fc_forward_args *a, int64_t b) {
  seq s = {*p, 0, 0};
  if (a->q.ndim == 3) {
    const int32_t *cq = (const int32_t *)a->cu_seqlens_q.data, *ck = (const int32_t *)a->cu_seqlens_k.data;
    s.q0 = cq[b], s.k0 = ck[b], s.p.n_q = cq[b + 1] - cq[b], s.p.n_k = ck[b + 1] - ck[b];
#if FC_ABI >= 5
    /* the planted PADDED bug: the tokens located by cu_seqlens whatever the padded offsets say */
    if (p->cu_seqlens_q_padded.ndim == 1 && FC_FAULT != PADDED) {
      s.q0 = ((const int32_t *)p->cu_seqlens_q_padded.data)[b];
      s.k0 = ((const int32_t *)p->cu_seqlens_k_padded.data)[b];
    }
#endif
  }
  return s;
}
/* Element x of row i, head h of sequence b: dense (batch, heads, n, x), varlen (total, heads, x) with
 * the sequence's rows from r0; lse dense (batch, heads, n), varlen (heads, total). */
static void index_of(const DLTensor *t, int64_t b, int64_t h, int64_t r0, int64_t i, int64_t x, int64_t *idx) {
  if (t->ndim == 4) idx[0] = b, idx[1] = h, idx[2] = i, idx[3] = x;
  else idx[0] = r0 + i, idx[1] = h, idx[2] = x;
}
static void lse_index(const DLTensor *t, int64_t b, int64_t h, int64_t r0, int64_t i, int64_t *idx) {
  if (t->ndim == 3) idx[0] = b, idx[1] = h, idx[2] = i;
  else idx[0] = h, idx[1] = r0 + i;
}

static int visible(const fc_problem *p, int64_t i, int64_t j) {
  const int64_t shift = p->n_k - p->n_q;
  if (FC_FAULT == CAUSAL && p->n_k > 3) /* the planted bug: causal masks off by one */
    return p->mask == FC_MASK_NONE || (p->mask == FC_CAUSAL_TOP_LEFT ? j < i : j < i + shift);
  if (p->mask == FC_CAUSAL_TOP_LEFT) return j <= i;
  if (p->mask == FC_CAUSAL_BOTTOM_RIGHT) return j <= i + shift;
  return 1;
}

/* Rows 0..n of head h of sequence b (from row r0), as n x width doubles, and back (rounded into its dtype). */
static void gather(const DLTensor *t, int64_t b, int64_t h, int64_t r0, int64_t n, int64_t width, double *out) {
  int64_t idx[4];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t x = 0; x < width; ++x) index_of(t, b, h, r0, i, x, idx), out[i * width + x] = load(t, idx);
}
static void scatter(const DLTensor *t, int64_t b, int64_t h, int64_t r0, int64_t n, int64_t width,
                    const double *in) {
  int64_t idx[4];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t x = 0; x < width; ++x) index_of(t, b, h, r0, i, x, idx), store(t, idx, in[i * width + x]);
}

/* One head's rows and what the kernel computes from them, in double. */
typedef struct {
  double *q, *k, *v, *o, *d_o, *d_q, *d_k, *d_v, *w; /* (n_q, d) (n_k, d) (n_k, d_v) ... w: (n_k) */
  double *lse;                                       /* (n_q) */
} head;

static double *alloc_head(const fc_problem *p, head *t) {
  const int64_t nq = p->n_q, nk = p->n_k, d = p->d, dv = p->d_v;
  double *all = calloc((size_t)(2 * nq * d + nk * d + nk * dv + 2 * nq * dv + nk * d + nk * dv + nk + nq), 8);
  if (!all) return NULL;
  t->q = all, t->d_q = t->q + nq * d, t->k = t->d_q + nq * d, t->v = t->k + nk * d, t->o = t->v + nk * dv;
  t->d_o = t->o + nq * dv, t->d_k = t->d_o + nq * dv, t->d_v = t->d_k + nk * d, t->w = t->d_v + nk * dv;
  t->lse = t->w + nk;
  return all;
}


/* The sink logit of query head h (-inf: none). Version 4: fc_problem.sinks, fp32 (heads_q). */
static double sink_of(const fc_problem *p, int64_t h) {
#if FC_ABI >= 4
  if (p->sinks.ndim == 1) {
    const int64_t at = h * (p->sinks.strides ? p->sinks.strides[0] : 1);
    return ((const float *)p->sinks.data)[at];
  }
#endif
  (void)p, (void)h;
  return -INFINITY;
}

/* Version 5: the mask tensor's and block mask's effect on key j of row i in (batch b, head h) of the
 * call's problem mp (dense only): -INFINITY (hidden), else the additive value (0 without one). The
 * batch element and head of the rows row() is called on: cur_b, cur_h. */
static int64_t cur_b, cur_h;
static const fc_problem *mask_problem;
static double mask_bias(int64_t i, int64_t j) {
#if FC_ABI >= 5
  const fc_problem *mp = mask_problem;
  if (!mp) return 0;
  if (mp->block_mask.ndim == 4) {
    const int64_t *s = mp->block_mask.shape;
    const int64_t at = (((s[0] > 1 ? cur_b : 0) * s[1] + (s[1] > 1 ? cur_h : 0)) * s[2] + i / mp->block_q) * s[3] +
                       j / mp->block_k;
    if (!((const unsigned char *)mp->block_mask.data)[at]) return -INFINITY;
  }
  if (mp->mask_tensor.ndim == 4) {
    const DLTensor *m = &mp->mask_tensor;
    const int64_t *s = m->shape;
    const int64_t at = (((s[0] > 1 ? cur_b : 0) * s[1] + (s[1] > 1 ? cur_h : 0)) * s[2] + i) * s[3] + j;
    if (mp->mask_kind == 1) return ((const unsigned char *)m->data)[at] ? 0.0 : -INFINITY;
    if (FC_FAULT == MASK_F16 && m->dtype.bits == 32 && mp->n_k > 3) /* the planted bug */
      return half_to_double(((const uint16_t *)m->data)[at]);
    const int64_t idx[4] = {at / (s[1] * s[2] * s[3]), at / (s[2] * s[3]) % s[1], i, j};
    return load(m, idx);
  }
#endif
  (void)i, (void)j;
  return 0;
}
/* Does row i see key j (the built-in mask, then the mask tensor and block mask)? */
static int live(const fc_problem *p, int64_t i, int64_t j) { return visible(p, i, j) && mask_bias(i, j) > -INFINITY; }

/* o_i and lse_i of row i; leaves P_ij = exp(s_ij - lse_i) in t->w for visible j. sink: the head's sink
 * logit (-inf: none), one more term of the denominator with no value. */
static void row(const fc_problem *p, head *t, int64_t i, double sink) {
  double m = -INFINITY, l = 0, *o = t->o + i * p->d_v;
  for (int64_t j = 0; j < p->n_k; ++j) {
    if (!live(p, i, j)) continue;
    double dot = 0;
    for (int64_t x = 0; x < p->d; ++x) dot += t->q[i * p->d + x] * t->k[j * p->d + x];
    t->w[j] = p->scale * dot + mask_bias(i, j); /* an additive mask's value (0 without one) */
    if (t->w[j] > m) m = t->w[j]; /* NaN never becomes the max: it poisons through its own weight */
  }
  if (sink > m) m = sink;
  for (int64_t x = 0; x < p->d_v; ++x) o[x] = 0;
  t->lse[i] = -INFINITY;
  if (m == -INFINITY) return; /* no visible key and no sink: o = 0, lse = -inf */
  if (sink > -INFINITY) l = exp(sink - m);
  double l_keys = 0; /* the planted SINK bug normalises o by the keys' sum alone */
  for (int64_t j = 0; j < p->n_k; ++j)
    if (live(p, i, j)) l_keys += exp(t->w[j] - m);
  l += l_keys;
  t->lse[i] = m + log(l);
  const double l_o = FC_FAULT == SINK && p->n_k > 3 ? l_keys : l;
  for (int64_t j = 0; j < p->n_k; ++j) {
    if (!live(p, i, j)) continue;
    t->w[j] = exp(t->w[j] - m) / l_o;
    for (int64_t x = 0; x < p->d_v; ++x) o[x] += t->w[j] * t->v[j * p->d_v + x];
  }
}

static int supports(const fc_problem *p, const fc_forward_args *a) {
  const DLDataType t = a->q.dtype;
  const int float_ok = (t.code == kDLFloat && (t.bits == 16 || t.bits == 32 || t.bits == 64)) ||
                       (t.code == kDLBfloat && t.bits == 16);
  /* a variant tensor is present by its shape: its data is NULL while flashcheck probes */
  const int varlen = a->cu_seqlens_q.ndim == 1 && a->cu_seqlens_k.ndim == 1;
  const DLTensor *const ts[5] = {&a->q, &a->k, &a->v, &a->o, &a->lse};
  return float_ok && t.lanes == 1 && a->q.ndim == (varlen ? 3 : 4) && a->q.device.device_type == kDLCPU &&
         p->mask >= 0 && p->mask <= 2 && p->softcap == 0 && p->window_left == -1 && p->window_right == -1 &&
         (varlen || (a->cu_seqlens_q.ndim == 0 && a->cu_seqlens_k.ndim == 0)) && a->page_table.ndim == 0 &&
         a->alibi_slopes.ndim == 0 && (FC_MAX_N == 0 || (p->n_q <= FC_MAX_N && p->n_k <= FC_MAX_N)) &&
         compact_all(ts, 5);
}

static int fault(const fc_problem *p) {
  if (p->n_k <= 3) return 0;
  switch (FC_FAULT) {
    case SEGV: return *(volatile int *)(uintptr_t)8;
    case ABORT: abort();
    case HANG: for (;;) sleep(1);
    case EXIT: exit(0);
    case ERROR: snprintf(error_text, sizeof error_text, "refusing n_k = %d", p->n_k); return 1;
    default: return 0;
  }
}

static int forward(const fc_problem *p, const fc_forward_args *a, void *stream) {
  (void)stream;
  current_problem = *p;
  const DLTensor *const ts[5] = {&a->q, &a->k, &a->v, &a->o, &a->lse};
  if (!compact_all(ts, 5)) return snprintf(error_text, sizeof error_text, "a non-compact tensor reached forward"), 1;
  if (fault(p)) return 1;
  head t;
  double *all = alloc_head(p, &t);
  if (!all) return snprintf(error_text, sizeof error_text, "out of memory"), 1;
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads_q; ++h) {
      const int64_t hk = h / (p->heads_q / p->heads_kv);
      const seq s = sequence(p, a, b);
      gather(&a->q, b, h, s.q0, s.p.n_q, p->d, t.q);
      gather(&a->k, b, hk, s.k0, s.p.n_k, p->d, t.k);
      gather(&a->v, b, hk, s.k0, s.p.n_k, p->d_v, t.v);
      mask_problem = p, cur_b = b, cur_h = h;
      for (int64_t i = 0; i < s.p.n_q; ++i) {
        int64_t il[3];
        row(&s.p, &t, i, sink_of(p, h));
        lse_index(&a->lse, b, h, s.q0, i, il);
        store(&a->lse, il, t.lse[i]);
      }
      scatter(&a->o, b, h, s.q0, s.p.n_q, p->d_v, t.o);
    }
  if (FC_FAULT == OOB && p->n_k > 3 && a->o.ndim == 4) { /* one element past o's last */
    const int64_t last[4] = {p->batch - 1, p->heads_q - 1, p->n_q - 1, p->d_v};
    store(&a->o, last, 1.0);
  }
  free(all);
  return 0;
}

/* d_q_i = scale sum_j dS_ij k_j, in fp32 (fp64 for fp64 storage) over the visible keys (FC_DQ): in key
 * order, or in an order drawn afresh for every row of every call (atomics), or reversed in one call of
 * 30 (DQ_MODE_RARE's mode). */
static uint64_t dq_state = 0x9E3779B97F4A7C15u;
static uint64_t dq_next(void) {
  dq_state ^= dq_state << 13, dq_state ^= dq_state >> 7, dq_state ^= dq_state << 17;
  return dq_state;
}
static void dq_sum(const fc_problem *p, const head *t, int64_t i, const double *ds, int64_t *order, int shuffled,
                   int reversed, int wide, double *d_q) {
  int64_t n = 0;
  for (int64_t j = 0; j < p->n_k; ++j)
    if (live(p, i, j)) order[n++] = j;
  for (int64_t r = n - 1; shuffled && r > 0; --r) {
    const int64_t o = (int64_t)(dq_next() % (uint64_t)(r + 1)), x = order[r];
    order[r] = order[o], order[o] = x;
  }
  for (int64_t x = 0; x < p->d; ++x) {
    float acc = 0;
    double acc64 = 0;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t j = order[reversed ? n - 1 - r : r];
      const double term = p->scale * ds[j] * t->k[j * p->d + x];
      if (wide) acc64 += term;
      else acc += (float)term;
    }
    d_q[x] = wide ? acc64 : acc;
  }
}

/* D_i = d_o_i . o_i, dS_ij = P_ij (d_o_i . v_j - D_i), d_q = scale dS K, d_k = scale dS^T Q, d_v = P^T d_o,
 * with o and P recomputed in double; d_k and d_v sum over the query heads of their kv head. */
static int backward(const fc_problem *p, const fc_backward_args *g, void *stream) {
  (void)stream;
  current_problem = *p;
  const fc_forward_args *a = &g->fwd;
  const DLTensor *const ts[9] = {&a->q, &a->k, &a->v, &a->o, &a->lse, &g->d_o, &g->d_q, &g->d_k, &g->d_v};
  if (!compact_all(ts, 9)) return snprintf(error_text, sizeof error_text, "a non-compact tensor reached backward"), 1;
  if (fault(p)) return 1;
  head t;
  double *all = alloc_head(p, &t);
  if (!all) return snprintf(error_text, sizeof error_text, "out of memory"), 1;
  const int64_t group = p->heads_q / p->heads_kv, d = p->d, dv = p->d_v;
  /* FC_DQ: the atomic configuration (config 0) shuffles; the deterministic mode (config 1) does not,
   * except DQ_MODE_RARE's in one call of 30, which reverses. */
  static int64_t mode_calls = 0;
  const int mode = (FC_DQ == DQ_MODE || FC_DQ == DQ_MODE_RARE) && p->config == 1;
  const int shuffled = FC_DQ != DQ_NONE && !mode, reversed = FC_DQ == DQ_MODE_RARE && mode && ++mode_calls % 30 == 0;
  double *ds_buf = DQ_ON ? malloc(sizeof(double) * (size_t)(p->n_k + 1)) : NULL;
  int64_t *order = DQ_ON ? malloc(sizeof(int64_t) * (size_t)(p->n_k + 1)) : NULL;
  if (DQ_ON && (!ds_buf || !order)) {
    free(ds_buf), free(order), free(all);
    return snprintf(error_text, sizeof error_text, "out of memory"), 1;
  }
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t hk = 0; hk < p->heads_kv; ++hk) {
      const seq s = sequence(p, a, b);
      const fc_problem *sp = &s.p;
      gather(&a->k, b, hk, s.k0, sp->n_k, d, t.k);
      gather(&a->v, b, hk, s.k0, sp->n_k, dv, t.v);
      for (int64_t x = 0; x < sp->n_k * d; ++x) t.d_k[x] = 0;
      for (int64_t x = 0; x < sp->n_k * dv; ++x) t.d_v[x] = 0;
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        gather(&a->q, b, h, s.q0, sp->n_q, d, t.q);
        gather(&g->d_o, b, h, s.q0, sp->n_q, dv, t.d_o);
        mask_problem = p, cur_b = b, cur_h = h;
        for (int64_t i = 0; i < sp->n_q; ++i) {
          const double *d_o = t.d_o + i * dv;
          double D = 0, *d_q = t.d_q + i * d, *ds_of = ds_buf;
          row(sp, &t, i, sink_of(p, h));
          for (int64_t x = 0; x < dv; ++x) D += d_o[x] * t.o[i * dv + x];
          for (int64_t x = 0; x < d; ++x) d_q[x] = 0;
          for (int64_t j = 0; t.lse[i] != -INFINITY && j < sp->n_k; ++j) {
            if (!live(sp, i, j)) continue;
            double dp = 0;
            for (int64_t x = 0; x < dv; ++x) {
              dp += d_o[x] * t.v[j * dv + x];
              t.d_v[j * dv + x] += t.w[j] * d_o[x];
            }
            const double ds = t.w[j] * (dp - D);
            if (DQ_ON) ds_of[j] = ds;
            for (int64_t x = 0; x < d; ++x) {
              d_q[x] += p->scale * ds * t.k[j * d + x];
              t.d_k[j * d + x] += p->scale * ds * t.q[i * d + x];
            }
          }
          if (DQ_ON && t.lse[i] != -INFINITY)
            dq_sum(sp, &t, i, ds_of, order, shuffled, reversed, g->d_q.dtype.bits == 64, d_q);
        }
        scatter(&g->d_q, b, h, s.q0, sp->n_q, d, t.d_q);
      }
      scatter(&g->d_k, b, hk, s.k0, sp->n_k, d, t.d_k);
      scatter(&g->d_v, b, hk, s.k0, sp->n_k, dv, t.d_v);
    }
  free(all), free(ds_buf), free(order);
  return 0;
}

static const fc_config dq_configs[] = {{0, 0, 0, 0}, {0, 0, 0, 1}}; /* atomic, then the deterministic mode */
static const fc_declarations declarations = {
    /* FC_DQ: the backward's reduction and (FC_DQ >= DQ_MODE) a deterministic mode; otherwise not declared */
    .backward_reduction = !DQ_ON                      ? FC_BACKWARD_UNKNOWN
                          : FC_DQ == DQ_ATOMIC_HIDDEN ? FC_BACKWARD_DETERMINISTIC
                                                      : FC_BACKWARD_ATOMIC,
    .configs = FC_DQ >= DQ_MODE ? dq_configs : NULL,
    .num_configs = FC_DQ >= DQ_MODE ? 2 : 0,
    .sinks = FC_ABI >= 4,         /* read by flashcheck only from a version-4 kernel */
    .padded_varlen = FC_ABI >= 5, /* read by flashcheck only from a version-5 kernel */
#if FC_ABI >= 5
    /* read only from a version-5 kernel: boolean and additive masks, additive in F32, F16, BF16 */
    .mask_tensors = 3,
    .mask_dtypes = (1 << FC_DTYPE_F32) | (1 << FC_DTYPE_F16) | (1 << FC_DTYPE_BF16),
    .block_masks = 1,
#elif FC_ABI == 4
    /* nonsense in fields a version-4 struct does not have (flashcheck's test that it never reads them) */
    .mask_tensors = 3,
    .mask_dtypes = -1,
    .block_masks = 7,
#endif
};
static const fc_kernel kernel = {FC_ABI,   FC_NAME,  kDLCPU,     1, supports,
                                 forward,  backward, last_error, DQ_ON || FC_ABI >= 4 ? &declarations : NULL};

const fc_kernel *flashcheck_kernel(void) { return &kernel; }
