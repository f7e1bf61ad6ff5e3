"""jax.nn.dot_product_attention as flashcheck kernels, implementation="cudnn" and "xla", with
local_window_size and query/key sequence lengths. JAX's layout is (batch, seq, heads, dim), so q, k, v
are swapped into it and o back; is_causal and the window are top-left aligned (jax.nn's
_get_causal_mask and _get_window_mask count query and key positions from 0 alike). The contract's varlen
batches go in padded, with query_seq_lengths and key_value_seq_lengths. Forward and backward (jax.vjp)
are jitted, once per shape, and compiled programs persist on disk across the worker's restarts. fp32
traces jax.nn's matmuls under jax.default_matmul_precision("highest") (no TF32: _precision says why). JAX
imports the suite's tensors through DLPack only compact (contiguous=True: strided cases are declined).
The XLA kernel's supports() compiles each program a case asks about once, on zeros, and declines those
XLA refuses to compile (_xla_compiles).

    python -m flashcheck check jax_attention:cudnn
"""
import contextlib
import dataclasses
import functools
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with the suite

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import flashcheck  # noqa: E402

for _key, _value in (("jax_compilation_cache_dir", os.environ.get("FC_JAX_CACHE", "/tmp/flashcheck_jax_cache")),
                     ("jax_persistent_cache_min_compile_time_secs", 0.0)):
    try:
        jax.config.update(_key, _value)
    except Exception:  # noqa: B902 - an older JAX without the persistent cache: compile per process
        pass


def _attend(q, k, v, lengths, impl, scale, causal, window, precision=None):
    """q (B, T, N, H), k, v (B, S, K, H) -> (B, T, N, H). `precision` ("highest" for fp32: _precision says
    why) is set while jax.nn's matmuls are traced, inside the jitted program, so it reaches those dots
    and no other call's."""
    kw = {} if lengths is None else {"query_seq_lengths": lengths[0], "key_value_seq_lengths": lengths[1]}
    with jax.default_matmul_precision(precision) if precision else contextlib.nullcontext():
        return jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=causal, local_window_size=window,
                                            implementation=impl, **kw)


def _dense(q, k, v, impl, scale, causal, window, precision=None):  # (B, N, T, H) in and out, the suite's layout
    q, k, v = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))  # (B, T, N, H), (B, S, K, H)
    (B, T), S = q.shape[:2], k.shape[1]
    lengths = None
    if impl == "cudnn" and (T % 2 or S % 2):
        # jax.nn's cuDNN backward takes even lengths only ("Unsupported sequence length Q 1, KV 1"):
        # one zero row appended where a length is odd, hidden by the sequence lengths (the padding
        # mask), and the padded query row sliced off. Causal and window masks count from 0 alike, so
        # the real rows see the keys they saw.
        lengths = (jnp.full((B,), T, jnp.int32), jnp.full((B,), S, jnp.int32))
        q = jnp.pad(q, ((0, 0), (0, T % 2), (0, 0), (0, 0)))
        k, v = (jnp.pad(x, ((0, 0), (0, S % 2), (0, 0), (0, 0))) for x in (k, v))
    o = _attend(q, k, v, lengths, impl, scale, causal, window, precision)[:, :T]
    return jnp.swapaxes(o, 1, 2)


def _varlen(q, k, v, gather_q, gather_k, scatter_q, lengths, impl, scale, causal, window, precision=None):
    """Packed (total, heads, H) in and out: padded to (B, n, heads, H) by index arrays (the padding
    reads an appended zero row), attended with the sequence lengths, and packed again."""
    def pad(x, index):
        return jnp.concatenate([x, jnp.zeros((1,) + x.shape[1:], x.dtype)])[index]
    o = _attend(pad(q, gather_q), pad(k, gather_k), pad(v, gather_k), lengths, impl, scale, causal, window,
                precision)
    return o[scatter_q[0], scatter_q[1]]


_STATIC = ("impl", "scale", "causal", "window", "precision")
_dense_fwd = jax.jit(_dense, static_argnames=_STATIC)
_varlen_fwd = jax.jit(_varlen, static_argnames=_STATIC)


@functools.partial(jax.jit, static_argnames=_STATIC)
def _dense_bwd(q, k, v, d_o, impl, scale, causal, window, precision=None):
    _, vjp = jax.vjp(lambda a, b, c: _dense(a, b, c, impl, scale, causal, window, precision), q, k, v)
    return vjp(d_o)


@functools.partial(jax.jit, static_argnames=_STATIC)
def _varlen_bwd(q, k, v, d_o, gather_q, gather_k, scatter_q, lengths, impl, scale, causal, window, precision=None):
    _, vjp = jax.vjp(lambda a, b, c: _varlen(a, b, c, gather_q, gather_k, scatter_q, lengths, impl, scale, causal,
                                             window, precision), q, k, v)
    return vjp(d_o)


def _window(p, impl):
    """JAX's local_window_size for the contract's window (None: no window)."""
    if p.window_left < 0 and p.window_right < 0:
        return None
    big = max(p.n_q, p.n_k) + 1  # an unbounded side
    if impl == "cudnn":  # only the left side, with the causal mask (supports() sees to it)
        return None if p.window_left < 0 else (p.window_left, 0)
    return (p.window_left if p.window_left >= 0 else big, p.window_right if p.window_right >= 0 else big)


def _indices(p, even=False):
    """Index arrays between the packed tokens and the padded (batch, n) grid, and the lengths. `even`
    rounds the grid's lengths up to even ones (cuDNN's backward takes no other)."""
    cu_q, cu_k = (np.asarray(x).astype(np.int64) for x in (p.cu_seqlens_q, p.cu_seqlens_k))
    for name, cu, n in (("q", cu_q, p.n_q), ("k", cu_k, p.n_k)):
        # What the device gave back, checked against the problem before any index is built from it: a
        # bad read is named as such (the audit met one: results/h200/external/FINDINGS.md, jax_cudnn).
        lens, total = np.diff(cu), p.shapes[name][0]
        if len(cu) != p.batch + 1 or cu[0] != 0 or cu[-1] != total or (lens < 0).any() or (lens > n).any():
            raise ValueError("cu_seqlens_%s read back as %s: not the offsets of %d sequences of at most %d "
                             "tokens over %d" % (name, cu.tolist()[:12], p.batch, n, total))
    len_q, len_k = np.diff(cu_q), np.diff(cu_k)
    n_q, n_k = max(p.n_q, 1), max(p.n_k, 1)
    if even:
        n_q, n_k = n_q + n_q % 2, n_k + n_k % 2
    gather_q = np.full((p.batch, n_q), cu_q[-1], np.int32)  # the appended zero row
    gather_k = np.full((p.batch, n_k), cu_k[-1], np.int32)
    scatter = np.zeros((2, int(cu_q[-1])), np.int32)
    for b in range(p.batch):
        gather_q[b, :len_q[b]] = np.arange(cu_q[b], cu_q[b + 1])
        gather_k[b, :len_k[b]] = np.arange(cu_k[b], cu_k[b + 1])
        scatter[0, cu_q[b]:cu_q[b + 1]], scatter[1, cu_q[b]:cu_q[b + 1]] = b, np.arange(len_q[b])
    lengths = (jnp.asarray(len_q, jnp.int32), jnp.asarray(len_k, jnp.int32))
    return jnp.asarray(gather_q), jnp.asarray(gather_k), jnp.asarray(scatter), lengths


def _precision(p):
    """fp32 matmuls at full fp32 precision. XLA's default on Ampere and later runs F32 dots in TF32 (a
    10-bit mantissa), which flashcheck's fp32 bound does not model: the audit's F32 "failures" of
    jax_xla were those roundings. The kernel is run as a user who asks for fp32 gets it
    (jax.default_matmul_precision("highest") while jax.nn's dots are traced: a static argument of the
    jitted programs, so F32 problems compile their own); F16 and BF16 run with JAX's default."""
    return "highest" if p.dtype == "F32" else None


_REFUSED = "Unsupported dot precision algorithm"
_compiles = {}


def _probe_lengths(p):
    """Sequence lengths for a varlen problem as supports() sees it (its cu_seqlens have no data yet): any
    lengths within (n_q, n_k) with the problem's totals. The jitted programs take the index arrays as
    traced arguments, so their shapes (batch, n_q, n_k, the totals), not the lengths, make the program."""
    def split(total, n):
        lens = [0] * p.batch
        for b in range(p.batch):
            lens[b] = min(n, total - sum(lens))
        return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return split(p.shapes["q"][0], p.n_q), split(p.shapes["k"][0], p.n_k)


def _xla_compiles(p, forward, backward):
    """Whether XLA compiles this problem's forward and backward: one call of each on zeros of the
    problem's shapes, dtype and variants, remembered per program (what jit compiles one program for:
    the shapes, dtype and static arguments), so the real calls reuse what the probe compiled. Only XLA's
    refusal of a dot's algorithm counts as a no; any other error is the real call's to report."""
    window = (p.window_left, p.window_right) if p.window_left >= 0 or p.window_right >= 0 else None
    key = (p.dtype, p.varlen, p.batch, p.n_q, p.n_k, p.mask, window, float(p.scale),
           tuple(tuple(p.shapes[t]) for t in "qkvo"))
    if key not in _compiles:
        if p.varlen:
            cu_q, cu_k = _probe_lengths(p)
            p = dataclasses.replace(p, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        dtype = getattr(jnp, {"F16": "float16", "BF16": "bfloat16", "F32": "float32"}[p.dtype])
        q, k, v, d_o = (jnp.zeros(tuple(p.shapes[t]), dtype) for t in "qkvo")
        try:
            forward(q, k, v, p)
            backward(q, k, v, None, None, d_o, p)
            _compiles[key] = True
        except Exception as e:  # noqa: B902 - XLA's error types differ across versions; matched by text
            _compiles[key] = _REFUSED not in str(e)
    return _compiles[key]


def compact(p):
    """Whether q, k and v have row-major strides (axes of length 1 aside): what JAX's DLPack import takes."""
    for t in ("q", "k", "v"):
        want = 1
        for n, stride in reversed(list(zip(p.shapes[t], p.strides[t]))):
            if n > 1 and stride != want:
                return False
            want *= n
    return True


def _kernel(impl):
    cudnn = impl == "cudnn"

    def static(p):
        return dict(impl=impl, scale=float(p.scale), causal=p.is_causal, window=_window(p, impl),
                    precision=_precision(p))

    def forward(q, k, v, p):
        if p.varlen:
            return _varlen_fwd(q, k, v, *_indices(p, cudnn), **static(p))
        return _dense_fwd(q, k, v, **static(p))

    def backward(q, k, v, o, lse, d_o, p):
        if p.varlen:
            return _varlen_bwd(q, k, v, d_o, *_indices(p, cudnn), **static(p))
        return _dense_bwd(q, k, v, d_o, **static(p))

    def window_ok(p):
        if p.window_left < 0 and p.window_right < 0:
            return True
        if impl == "cudnn":
            # jax.nn: cuDNN takes only a left window, and a right one only under the causal mask
            # ("cuDNN doesn't support right window ... when causal mask is not used").
            # cuDNN: "Sliding window attention is only supported with max_s_q <= max_s_kv".
            return p.mask == "causal_top_left" and p.n_q <= p.n_k
        # Windows are top-left aligned in JAX; the contract's are too under causal_top_left, and
        # without a mask only where n_q == n_k (per sequence: not known here for varlen).
        return p.mask == "causal_top_left" or (not p.varlen and p.n_q == p.n_k)

    def supports(p):
        if p.varlen and not compact(p):
            return False  # JAX's DLPack import takes compact tensors only (contiguous=True covers dense ones)
        if not window_ok(p):
            return False
        # XLA refuses some programs ("Unsupported dot precision algorithm: 4", ALG_DOT_F16_F16_F32, met on
        # fp16 with d = 1, 2 at n = 16 and with d = 9 at n = 1: results/h200/external/FINDINGS.md). Every
        # shape a case asks about is compiled once on zeros, and one XLA refuses is declined so the laws
        # judge the rest. flashcheck's start-up probe (p.probing: each d in 1..256 on made-up shapes, which
        # no case reuses) is answered without compiling: its cases are asked again.
        return cudnn or p.probing or _xla_compiles(p, forward, backward)

    return flashcheck.Kernel(forward, backward, name="jax_" + impl, device="cuda", framework="jax",
                             dtypes=("F16", "BF16") if cudnn else ("F16", "BF16", "F32"),
                             masks=("none", "causal_top_left"), writes_lse=False, contiguous=True,
                             # cuDNN's fused attention: head dims multiple of 8 up to 128 (jax's
                             # check_is_flash_attention)
                             head_dims=range(8, 129, 8) if cudnn else None,
                             variants=("window", "varlen"), supports=supports)


cudnn = _kernel("cudnn")
xla = _kernel("xla")
