"""The JAX adapter's mapping (examples/python/jax_attention.py) without JAX: jax.numpy is NumPy and
jax.nn.dot_product_attention a NumPy transcription of jax.nn's XLA path (top-left causal and window masks,
padding masks from sequence lengths, masked logits set to -0.7 * max, softmax in fp32, P cast to the
storage type). The adapter's forward runs on host tensors through the bridge under the variant laws: its
layout swaps, window mapping, varlen padding and unpadding and its supports() are held to the contract.
What jax.nn itself does differently from the contract (a row that sees no key) is the external audit's
to find on the GPU."""
import contextlib
import functools
import importlib
import os
import sys
import types

import pytest

np = pytest.importorskip("numpy")

import flashcheck  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples",
                        "python")


def _sum(x, axis):
    """A sequential sum (cumsum's last): the same bits whatever the batch, and with trailing zeros."""
    return np.take(np.cumsum(x, axis=axis, dtype=np.float32), -1, axis=axis)


def _dot_product_attention(q, k, v, bias=None, mask=None, *, scale=None, is_causal=False, query_seq_lengths=None,
                           key_value_seq_lengths=None, local_window_size=None, implementation=None):
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    kk = np.repeat(k.astype(np.float32), N // K, axis=2)  # (B, S, N, H)
    vv = np.repeat(v.astype(np.float32), N // K, axis=2)
    logits = _sum(q.astype(np.float32)[:, :, None] * kk[:, None], axis=4)  # (B, T, S, N)
    logits = np.transpose(logits, (0, 3, 1, 2)) * np.float32(scale)  # (B, N, T, S)
    allowed = np.ones((B, 1, T, S), bool)
    q_pos, k_pos = np.arange(T)[:, None], np.arange(S)[None, :]
    if is_causal:
        allowed = allowed & (k_pos <= q_pos)[None, None]
    if local_window_size is not None:
        left, right = local_window_size
        allowed = allowed & ((q_pos <= k_pos + left) & (q_pos >= k_pos - right))[None, None]
    if query_seq_lengths is not None:
        allowed = allowed & (np.arange(T)[None, :, None] < query_seq_lengths[:, None, None])[:, None]
        allowed = allowed & (np.arange(S)[None, None, :] < key_value_seq_lengths[:, None, None])[:, None]
    logits = np.where(allowed, logits, np.float32(-0.7 * np.finfo(np.float32).max))
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    probs = (weights / _sum(weights, axis=3)[..., None]).astype(k.dtype).astype(np.float32)  # (B, N, T, S)
    out = _sum(np.transpose(probs, (0, 2, 1, 3))[..., None] * np.transpose(vv, (0, 2, 1, 3))[:, None], axis=3)
    out = out.astype(q.dtype)  # (B, T, N, H)
    if query_seq_lengths is not None:
        out = out * (np.arange(T)[None, :] < query_seq_lengths[:, None])[:, :, None, None].astype(out.dtype)
    return out


@pytest.fixture(scope="module")
def adapter():
    fake = types.ModuleType("jax")
    fake.numpy = np
    fake.nn = types.SimpleNamespace(dot_product_attention=_dot_product_attention)
    fake.config = types.SimpleNamespace(update=lambda *a: None)
    fake.jit = lambda f=None, static_argnames=(): f if f is not None else functools.partial(fake.jit)
    fake.vjp = None  # the backward is not exercised here
    fake.precisions = []  # what default_matmul_precision was asked for, call by call
    fake.default_matmul_precision = lambda value: (fake.precisions.append(value), contextlib.nullcontext())[1]
    saved = {m: sys.modules.get(m) for m in ("jax", "jax.numpy", "jax_attention")}
    sys.modules.update({"jax": fake, "jax.numpy": np})
    sys.path.insert(0, EXAMPLES)
    try:
        yield importlib.import_module("jax_attention")
    finally:
        sys.path.remove(EXAMPLES)
        for m, mod in saved.items():
            if mod is None:
                sys.modules.pop(m, None)
            else:
                sys.modules[m] = mod


def _row_without_key(p):
    """Whether a row of p may see no key: a window's left side with more queries than keys past it (per
    sequence for varlen, whose lengths supports() does not see). jax.nn gives such a row the mean of every
    v where the contract says 0: the audit's finding, out of this mapping test's reach."""
    return p.window_left >= 0 and (p.varlen or p.n_q > p.n_k + p.window_left)


def host_kernel(k):
    """The adapter's forward and supports() on host NumPy tensors, with its masks and variants (and no
    problem where a row may see no key)."""
    def supports(p):
        return not _row_without_key(p) and k.user_supports(p)
    return flashcheck.Kernel(k.forward, backward=None, name=k.name + "_on_numpy", device="cpu", framework="numpy",
                             dtypes=("F16", "F32"), masks=k.masks, head_dims=range(8, 33, 8), writes_lse=False,
                             contiguous=True, variants=tuple(sorted(k.variants)), supports=supports)


@pytest.mark.parametrize("law", ["reference", "window_mask", "varlen_split", "zero_length", "invisible_keys"])
def test_the_jax_adapter_maps_the_contract(adapter, law, tmp_path):
    result = flashcheck.check(host_kernel(adapter.xla), law=law, cases=8, seed=2, regressions=str(tmp_path),
                              quiet=True)
    assert result.ok and result.laws[0]["status"] == "pass" and result.laws[0]["cases"] > 0, result.report


def test_the_cudnn_adapter_takes_windows_only_under_the_causal_mask(adapter, tmp_path):
    result = flashcheck.check(host_kernel(adapter.cudnn), law="window_mask", cases=8, seed=2,
                              regressions=str(tmp_path), quiet=True)
    assert "variants: varlen, window" in result.report, result.report
    assert result.ok and result.laws[0]["cases"] > 0, result.report


def _problem(n_q=64, n_k=64, d=8, dtype="F16", varlen=False, row=None):
    """A dense (batch, heads, n, d) problem, or a packed varlen one whose rows are `row` elements apart."""
    def tensor(n):
        if varlen:
            return (n, 1, d), ((row or d), (row or d), 1)
        return (1, 1, n, d), (n * d, n * d, d, 1)
    shapes, strides = zip(*(tensor(n) for n in (n_q, n_k, n_k)))
    return types.SimpleNamespace(n_q=n_q, n_k=n_k, d=d, dtype=dtype, varlen=varlen, mask="none", scale=0.5,
                                 window_left=-1,
                                 window_right=-1, is_causal=False, shapes=dict(zip("qkv", shapes)),
                                 strides=dict(zip("qkv", strides)))


def test_the_jax_adapter_declines_what_jax_raises_on(adapter):
    # Each rule is one the H200 audit met (reports/h200/external/FINDINGS.md); a contract-valid
    # neighbour of each is still taken, so the rule cannot decline everything.
    xla, cudnn = adapter.xla.user_supports, adapter.cudnn.user_supports
    assert xla(_problem()) and cudnn(_problem())
    assert not xla(_problem(varlen=True, row=11)) and xla(_problem(varlen=True))  # DLPack: compact only
    assert not xla(_problem(d=1)) and not xla(_problem(d=1, dtype="BF16")) and xla(_problem(d=1, dtype="F32"))
    assert adapter.compact(_problem(varlen=True, row=8)) and not adapter.compact(_problem(varlen=True, row=9))


def test_the_cudnn_adapter_pads_odd_lengths_to_even_ones(adapter, tmp_path):
    # cuDNN's backward raises on odd lengths; the adapter pads one zero row, hidden by the sequence
    # lengths. The padded call reaches jax.nn with even lengths and the contract's answer comes back.
    seen = []
    nn = sys.modules["jax"].nn
    inner = nn.dot_product_attention

    def spy(q, k, v, *a, **kw):
        seen.append((q.shape[1], k.shape[1]))
        return inner(q, k, v, *a, **kw)
    nn.dot_product_attention = spy
    try:
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal((1, 2, n, 8)).astype(np.float32) for n in (3, 5, 5))  # (B, N, T, H)
        padded = adapter._dense(q, k, v, "cudnn", 0.35, True, None)
        assert seen == [(4, 6)]
        assert np.array_equal(padded, adapter._dense(q, k, v, "xla", 0.35, True, None))  # a masked zero term
        seen.clear()
        # Without windows: a row that sees no key is jax.nn's own difference from the contract (the mean of
        # every v), which the fake reproduces and the padding does not change.
        k = adapter.cudnn
        kernel = flashcheck.Kernel(k.forward, backward=None, name="jax_cudnn_padded_on_numpy", device="cpu",
                                   framework="numpy", dtypes=("F16", "F32"), masks=k.masks, head_dims=range(8, 33, 8),
                                   writes_lse=False, contiguous=True, variants=("varlen",), supports=k.user_supports)
        for law in ("reference", "varlen_split"):
            result = flashcheck.check(kernel, law=law, cases=8, seed=3, regressions=str(tmp_path), quiet=True)
            assert result.ok and result.laws[0]["status"] == "pass" and result.laws[0]["cases"] > 0, result.report
    finally:
        nn.dot_product_attention = inner
    assert seen and all(t % 2 == 0 and s % 2 == 0 for t, s in seen), seen


def test_fp32_runs_at_full_fp32_matmul_precision_and_half_types_at_the_default(adapter):
    import jax

    base = dict(batch=1, heads_q=1, heads_kv=1, n_q=2, n_k=2, d=8, d_v=8, mask="none", window_left=-1,
                window_right=-1, scale=0.5, softcap=0.0)
    q = np.ones((1, 1, 2, 8), np.float32)
    jax.precisions.clear()
    adapter.xla.forward(q, q, q, flashcheck.Problem(dtype="F32", **base))
    assert jax.precisions == ["highest"]  # no TF32: flashcheck's fp32 bound models fp32 products
    adapter.xla.forward(q.astype(np.float16), q.astype(np.float16), q.astype(np.float16),
                        flashcheck.Problem(dtype="F16", **base))
    assert jax.precisions == ["highest"]


def test_the_xla_adapter_declines_exactly_the_shapes_xla_refuses_to_compile(adapter):
    # On the H200, XLA raised "Unsupported dot precision algorithm: 4" on fp16/bf16 problems with small d
    # (reports/h200/external/FINDINGS.md). supports() calls the forward once on zeros of the shape and
    # declines only on that refusal; any other error is left for the real call to report.
    nn = sys.modules["jax"].nn
    inner = nn.dot_product_attention

    def refusing(q, k, v, *a, **kw):
        if q.shape[-1] in (2, 16):
            raise RuntimeError("INVALID_ARGUMENT: Unsupported dot precision algorithm: 4")
        if q.shape[-1] == 3:
            raise RuntimeError("some other failure")
        return inner(q, k, v, *a, **kw)
    nn.dot_product_attention = refusing
    adapter._compiles.clear()
    try:
        xla = adapter.xla.user_supports
        assert not xla(_problem(d=2))  # (NumPy, the fake's jax.numpy, has no bfloat16 to probe BF16 with)
        assert xla(_problem(d=2, dtype="F32"))  # fp32 is not probed: its dots take another algorithm
        assert xla(_problem(d=3))  # another error: the real call reports it
        assert xla(_problem(d=8))
        assert xla(_problem(d=16))  # above the probed head dims: a refusal there is the real call's failure
    finally:
        nn.dot_product_attention = inner
        adapter._compiles.clear()


def test_the_cudnn_adapter_declines_windows_with_more_queries_than_keys(adapter):
    # jax.nn's cuDNN path raises "Sliding window attention is only supported with max_s_q <= max_s_kv".
    def windowed(n_q, n_k):
        p = _problem(n_q=n_q, n_k=n_k)
        p.mask, p.window_left, p.is_causal = "causal_top_left", 9, True
        return p
    assert adapter.cudnn.user_supports(windowed(16, 32)) and adapter.cudnn.user_supports(windowed(32, 32))
    assert not adapter.cudnn.user_supports(windowed(32, 16))
