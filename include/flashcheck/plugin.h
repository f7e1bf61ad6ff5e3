/* flashcheck plugin C ABI, version 5: the one interface through which flashcheck runs a kernel it did
 * not build (`flashcheck check --plugin lib.so`, the Python bridge).
 *
 * A plugin is a shared library that exports `flashcheck_kernel`, returning a pointer to a static
 * fc_kernel. Tensors are DLPack DLTensors: data, device, dtype (kDLFloat 16/32/64, kDLBfloat 16, kDLInt
 * 32), shape and strides (in elements; NULL = compact row-major) travel together, so any layout can be
 * offered, and a kernel that ignores strides is caught. q, k/v and o share one dtype unless the kernel
 * declares per-tensor combinations (fc_declarations.dtypes): then each tensor has its own.
 *
 * Semantics (flashcheck's contract): q (batch, heads_q, n_q, d), k (batch, heads_kv, n_k, d), v and o
 * with last dim d_v; s_ij = scale * q_i . k_j (softcap c > 0: s <- c * tanh(s / c)); masks: none,
 * causal top-left (j <= i, PyTorch SDPA) and causal bottom-right (j <= i + n_k - n_q, FlashAttention);
 * o_i = sum_j softmax(s_i)_j v_j over visible j; lse_i = log sum_j exp(s_ij) (natural log, fp32); a row
 * with no visible key has o = 0, lse = -inf, d_q = 0. Query head h reads kv head h / (heads_q / heads_kv).
 * Backward: D_i = d_o_i . o_i, dS = P o (d_o v^T - D), d_q = scale dS K, d_k = scale dS^T Q, d_v = P^T d_o.
 *
 * A kernel is called only on cases its supports() accepts (a declined case is not a failure). forward
 * and backward return 0 on success; a nonzero return is a failing case, with last_error()'s text. The
 * suite may run the kernel in a child process, so a crash or hang is a failing case too.
 * `stream` is a cudaStream_t for kDLCUDA kernels (the suite synchronises the device after each call),
 * NULL for host kernels. The inputs may still be in flight on that stream when the call starts (the
 * suite's producer mode writes them there without a host synchronisation): run on it, or wait for it.
 * With two GPUs, the tensors and the stream may be on device 1. */
#ifndef FLASHCHECK_PLUGIN_H_
#define FLASHCHECK_PLUGIN_H_

#include <dlpack/dlpack.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FC_ABI_VERSION 5

/* DLPack's boolean type code (kDLBool in DLPack >= 0.8): a BOOL tensor is {FC_DL_BOOL, 8, 1}, one
 * byte per element, 0 or 1. */
#define FC_DL_BOOL 6

/* Marks the exported symbol visible even when the plugin builds with -fvisibility=hidden. */
#if defined(__GNUC__) || defined(__clang__)
#define FC_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define FC_PLUGIN_EXPORT
#endif

enum fc_mask { FC_MASK_NONE = 0, FC_CAUSAL_TOP_LEFT = 1, FC_CAUSAL_BOTTOM_RIGHT = 2 };

typedef struct {
  int32_t batch, heads_q, heads_kv;
  int32_t n_q, n_k;                  /* dense: every sequence's length; varlen: the longest */
  int32_t d, d_v;                    /* head dims of q/k and of v/o */
  int32_t mask;                      /* enum fc_mask; also aligns the window */
  int32_t window_left, window_right; /* -1: unbounded */
  double scale;                      /* s = scale * q.k */
  double softcap;                    /* 0: none */
  /* Read these two only when the kernel says abi_version 3 or 4 (a version-2 kernel sees the prefix above). */
  int32_t probing; /* supports() asked by flashcheck's start-up probe, not for a case to run */
  int32_t config;  /* index into fc_declarations.configs the call runs under (0 when none is declared) */
  /* Version 4 (contract v3). Offered only to a kernel of abi_version 4 whose declarations say sinks = 1
   * (a kernel of version 2 or 3, or one that does not declare them, never sees a problem with sinks).
   * Attention sinks: fp32 (heads_q), one logit per query head that joins every row's softmax
   * denominator with no value (lse includes it; a row with no visible key has o = 0, lse = sink); each
   * finite or -inf. ndim == 0 (data NULL): no sinks. Placed in the
   * kernel's device memory like the other tensors; data NULL in supports(). */
  DLTensor sinks;
  /* Version 5 (contract v3), dense problems only (never with varlen or paged K/V). Offered only to a
   * kernel of abi_version 5 whose declarations name them (mask_tensors, mask_dtypes, block_masks).
   * mask_tensor (named so beside the built-in `mask` above): (B_m, H_m, n_q, n_k), B_m 1 or batch, H_m 1 or heads_q (a 1 broadcasts, as PyTorch SDPA's
   * attn_mask), compact; mask_kind 1: BOOL ({FC_DL_BOOL, 8, 1}), true = the key takes part; 2:
   * additive, F32, F16 or BF16, added to the score after softcap and ALiBi, each element finite or
   * -inf (-inf hides the key). mask_kind 0 (ndim 0): none. A row every key of which is hidden has
   * o = 0, lse = -inf (the sink with sinks), d_q = 0. */
  DLTensor mask_tensor;
  int32_t mask_kind;
  /* block_mask: BOOL (B_m, H_m, ceil(n_q / block_q), ceil(n_k / block_k)), compact: key j is visible
   * to query i only if bit (i / block_q, j / block_k) is set (intersected with everything else).
   * block_q = block_k = 0 (ndim 0): none. */
  DLTensor block_mask;
  int32_t block_q, block_k;
  /* Version 5 (contract v3). Offered only to a kernel of abi_version 5 whose declarations say
   * padded_varlen = 1. Padded THD varlen (TransformerEngine's and cuDNN's cu_seqlens_*_padded): int32
   * (batch + 1) each; sequence b's queries start at token cu_seqlens_q_padded[b] of q, o, d_o, d_q and of
   * lse's token axis, its keys at cu_seqlens_k_padded[b] of k, v, d_k, d_v, while cu_seqlens_q/k give its
   * lengths; the packed tensors hold cu_seqlens_*_padded[batch] tokens. The tokens between a sequence's
   * end and the next one's start (and before the first) are padding: never read (they hold NaN), never
   * written (every output element there must keep the bytes it had). ndim == 0: not padded (the
   * sequences packed end to end). Never with paged K/V. */
  DLTensor cu_seqlens_q_padded, cu_seqlens_k_padded;
} fc_problem;

typedef struct {
  DLTensor q, k, v; /* dense (batch, heads, n, d) any strides; varlen (total, heads, d); paged k, v (pages, page_size,
                       heads_kv, d) */
  DLTensor o;       /* like q, last dim d_v */
  DLTensor lse;     /* fp32, natural log: (batch, heads_q, n_q); varlen (heads_q, total_q) */
  /* The variants' tensors are present by their shape: ndim == 0 (and data == NULL) when absent. */
  DLTensor cu_seqlens_q, cu_seqlens_k; /* int32 (batch + 1); ndim == 0: dense */
  DLTensor page_table;                 /* int32 (batch, pages per sequence); ndim == 0: not paged */
  DLTensor alibi_slopes;               /* fp32 (heads_q); ndim == 0: none */
} fc_forward_args;

typedef struct {
  fc_forward_args fwd; /* inputs, and o, lse as the forward wrote them */
  DLTensor d_o, d_q, d_k, d_v;
} fc_backward_args;

/* Version 3: what a kernel declares about itself (every field 0 = "not declared"). flashcheck draws
 * its cases inside the declarations, judges the kernel's arithmetic by the declared chain, and runs
 * the laws a declaration opens (docs/plugins.md, "Declarations"). A declaration is a claim: a kernel
 * that breaks one fails the law that relies on it. */
enum fc_dtype_code { FC_DTYPE_UNKNOWN = 0, FC_DTYPE_F16 = 1, FC_DTYPE_BF16 = 2, FC_DTYPE_F32 = 3, FC_DTYPE_F64 = 4 };

/* A sequence length n the kernel takes: n % multiple_of == residue (multiple_of 0 or 1: any), and
 * min <= n <= max (0: no bound). A length of 0 (an empty sequence of a varlen batch, a problem with no
 * queries or keys: the contract has them) is offered unless min >= 1. */
typedef struct {
  int32_t multiple_of, residue, min, max;
} fc_lengths;

/* How every long sum is computed (contract/arithmetic.h is the model the bounds charge). */
enum fc_summation {
  FC_SUM_UNKNOWN = 0,     /* charged as any order with directed rounding (the default) */
  FC_SUM_SERIAL = 1,      /* scalar loops, round to nearest: each sum one running accumulator, terms in index
                             order (keys ascending for o, l, d_q; query rows head-major for d_k, d_v); o and l
                             rescaled once per key tile of block_n (FlashAttention-2's online softmax) */
  FC_SUM_TENSOR_CORE = 2, /* mma.sync m16n8k16 / wgmma on fp16 or bf16 operands into fp32, FA2's tiling
                             (FlashAttention-2 on tensor cores; every field below but block_m, block_n ignored) */
};

typedef struct {
  int32_t summation;          /* enum fc_summation */
  int32_t accumulator;        /* FC_SUM_SERIAL: enum fc_dtype_code of the accumulator of o (P.V) and of d_q, d_k,
                             d_v (F32 if 0; F16: fp16 accumulation); the dot products over d (q.k, d_o.v,
                             d_o.o) and l accumulate in fp32 (fp64 for fp64 storage) */
  int32_t fused_products;     /* FC_SUM_SERIAL: each product exact before its add (an FMA, or a 16-bit product
                             widened); 0: every product rounds once more */
  int32_t p_unrounded;        /* 1: P enters P.V as computed (not rounded to storage first); 0: rounded to storage */
  int32_t p_type;             /* enum fc_dtype_code: P rounded to this type before P.V where coarser than storage */
  int32_t block_m, block_n;   /* query rows and keys per tile of the forward (0: unknown) */
  double exp_ulps, log_ulps;  /* |exp - exact|, |log - exact| in ulp of fp32 (0: 4 ulp assumed) */
  int32_t exp_exact_at_zero;  /* exp(0) == 1 exactly (glibc's expf) */
  int32_t flushes_subnormals; /* FTZ: results below the smallest normal flush to zero */
} fc_arithmetic;

/* Bit-exactness claims the metamorphic laws ask for (contract/exactness.hpp), each 0 or 1. */
typedef struct {
  int32_t rows;          /* a row's o, lse depend only on q_i, k, v and the key tiling (block_size, q_permutation) */
  int32_t d_q_rows;      /* ... d_q too: no atomics or split sums across key blocks */
  int32_t shared_scores; /* s_ij depends only on q_i, k_j, scale (block_size, kv_permutation) */
  int32_t tile_weights;  /* a key's rounded weight depends only on s_ij and its tile's running max */
  int32_t exact_scores;  /* exact dot products give exact s and s - m (the shift laws) */
} fc_exactness;

/* The backward's reduction of d_q (and d_k, d_v) across tiles. */
enum fc_backward_reduction {
  FC_BACKWARD_UNKNOWN = 0,       /* judged bitwise (as deterministic) */
  FC_BACKWARD_DETERMINISTIC = 1, /* the same bits on every run */
  FC_BACKWARD_ATOMIC = 2,        /* atomics or split sums in an unfixed order: runs agree within the reordering
                                    tolerance (docs/error-model.md), not bitwise */
};

/* One configuration the kernel offers; the suite selects it per call by fc_problem.config. */
typedef struct {
  int32_t block_m, block_n; /* tile of this configuration (0: as fc_arithmetic says) */
  int32_t splits;           /* split-KV count (0 or 1: no split) */
  int32_t deterministic;    /* the backward is bitwise repeatable in this configuration (a deterministic mode) */
} fc_config;

/* One combination of per-tensor storage dtypes the kernel takes, each an enum fc_dtype_code: q (and d_q),
 * k and v (and d_k, d_v), o (and d_o). lse stays fp32 (fp64 when q is F64). {F32, F16, F32} is a CPU
 * inference library's call (fp16 K/V cache, fp32 queries and output). */
typedef struct {
  int32_t q, kv, o;
} fc_dtypes;

typedef struct {
  fc_lengths n_q, n_k;          /* sequence lengths taken (dense: every sequence; varlen: the longest) */
  int32_t max_batch, max_heads; /* 0: no bound */
  const int32_t* head_dims;     /* head dims d taken (NULL: probed, any of 1..256 the kernel accepts) */
  int32_t num_head_dims;
  double scale; /* 0: any; else the one softmax scale the kernel takes */
  fc_arithmetic arithmetic;
  fc_exactness exact;
  int32_t backward_reduction; /* enum fc_backward_reduction */
  const fc_config* configs;   /* NULL: one default configuration */
  int32_t num_configs;
  int32_t large_offsets; /* 64-bit offsets: tensors of more than 2^31 elements (the large_offsets law) */
  /* Version 4 only (read when abi_version is 4; a version-3 kernel's declarations end above). */
  const fc_dtypes* dtypes; /* NULL: probed, one dtype for every tensor (F16, BF16, F32, F64); else exactly
                                   these combinations are drawn (supports() sees each tensor's DLTensor dtype) */
  int32_t num_dtypes;
  int32_t sinks;                /* contract v3: 1: attention sinks (fc_problem.sinks); 0: never offered them */
  /* Version 5 only (read when abi_version is 5). */
  int32_t mask_tensors;         /* bit 1: boolean mask tensors; bit 2: additive ones (fc_problem.mask_tensor) */
  int32_t mask_dtypes;          /* additive masks' dtypes: bits 1 << enum fc_dtype_code (F32, F16, BF16) */
  int32_t block_masks;          /* 1: block-sparse masks (fc_problem.block_mask) */
  int32_t padded_varlen;        /* contract v3: 1: padded varlen (fc_problem.cu_seqlens_*_padded); 0: never offered */
} fc_declarations;

/* Version 5: merge states (docs/SEMANTICS.md, "Merge states"), FlashInfer's merge_state(s) and the
 * split-KV combine: P partial results (o_p, lse_p) of the same rows, each the attention of those rows
 * over a disjoint subset of the keys, merged into the attention over their union:
 *   lse = log sum_p exp(lse_p),   o = sum_p exp(lse_p - lse) o_p.
 * An empty partial is (o_p = 0, lse_p = -inf) and weighs exactly 0 (it changes no bit of the result);
 * a row whose partials are all empty gives o = 0, lse = -inf, never NaN. lse values are finite or -inf. */
typedef struct {
  int32_t partials, rows, heads, d_v;
  int32_t dtype;   /* enum fc_dtype_code of o_p and o: F16, BF16 or F32 (lse is fp32) */
  int32_t probing; /* 1: a probe with every data pointer NULL: return 0 if the kernel takes this problem */
} fc_merge_problem;

typedef struct {
  DLTensor o_partial;   /* (partials, rows, heads, d_v), dtype; any strides */
  DLTensor lse_partial; /* fp32 (partials, heads, rows); any strides */
  DLTensor o;           /* (rows, heads, d_v), dtype, compact: written */
  DLTensor lse;         /* fp32 (heads, rows), compact: written */
} fc_merge_args;

typedef struct {
  int32_t abi_version; /* FC_ABI_VERSION (2, 3 and 4 still load: 2 without declarations and fc_problem's tail,
                          3 without fc_problem.sinks and fc_declarations past large_offsets, 4 without
                          fc_problem's and fc_declarations' version-5 tails and merge) */
  const char *name;
  int32_t device_type; /* kDLCPU or kDLCUDA: where the suite places the tensors */
  int32_t writes_lse;  /* 0: lse is ignored; the suite supplies it to backward */
  int (*supports)(const fc_problem*, const fc_forward_args*);                /* nonzero: run this case */
  int (*forward)(const fc_problem*, const fc_forward_args*, void* stream);   /* 0 on success */
  int (*backward)(const fc_problem*, const fc_backward_args*, void* stream); /* NULL: none */
  const char* (*last_error)(void);     /* text for a nonzero return; may be NULL */
  const fc_declarations* declarations; /* version 3 and later; NULL: nothing declared */
  /* Version 5 only (read when abi_version is 5). Non-NULL: a merge-state kernel (its supports, forward
   * and backward are never called and may be NULL); 0 on success. Host kernels (kDLCPU) only; the
   * suite calls it in its own process. */
  int (*merge)(const fc_merge_problem*, const fc_merge_args*, void* stream);
} fc_kernel;

/* The one exported symbol. supports() sees the shapes, strides, dtypes and devices the call will
 * have; every data pointer is NULL there (the values do not exist yet), so a variant's tensor is told
 * present by its ndim, never by its data. */
FC_PLUGIN_EXPORT const fc_kernel* flashcheck_kernel(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHCHECK_PLUGIN_H_ */
