/* flashcheck plugin C ABI, version 2: the one interface through which flashcheck runs a kernel it did
 * not build (`flashcheck check --plugin lib.so`, the Python bridge).
 *
 * A plugin is a shared library that exports `flashcheck_kernel`, returning a pointer to a static
 * fc_kernel. Tensors are DLPack DLTensors: data, device, dtype (kDLFloat 16/32/64, kDLBfloat 16, kDLInt
 * 32), shape and strides (in elements; NULL = compact row-major) travel together, so any layout can be
 * offered, and a kernel that ignores strides is caught.
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
 * NULL for host kernels. */
#ifndef FLASHCHECK_PLUGIN_H_
#define FLASHCHECK_PLUGIN_H_

#include <dlpack/dlpack.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FC_ABI_VERSION 2

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

typedef struct {
  int32_t abi_version; /* FC_ABI_VERSION */
  const char *name;
  int32_t device_type; /* kDLCPU or kDLCUDA: where the suite places the tensors */
  int32_t writes_lse;  /* 0: lse is ignored; the suite supplies it to backward */
  int (*supports)(const fc_problem *, const fc_forward_args *);               /* nonzero: run this case */
  int (*forward)(const fc_problem *, const fc_forward_args *, void *stream);   /* 0 on success */
  int (*backward)(const fc_problem *, const fc_backward_args *, void *stream); /* NULL: none */
  const char *(*last_error)(void); /* text for a nonzero return; may be NULL */
} fc_kernel;

/* The one exported symbol. supports() sees the shapes, strides, dtypes and devices the call will
 * have; every data pointer is NULL there (the values do not exist yet), so a variant's tensor is told
 * present by its ndim, never by its data. */
FC_PLUGIN_EXPORT const fc_kernel *flashcheck_kernel(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHCHECK_PLUGIN_H_ */
