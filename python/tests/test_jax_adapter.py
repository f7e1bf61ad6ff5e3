"""The JAX adapter's mapping (examples/python/jax_attention.py) without JAX: jax.numpy is NumPy and
jax.nn.dot_product_attention a NumPy transcription of jax.nn's XLA path (top-left causal and window masks,
padding masks from sequence lengths, masked logits set to -0.7 * max, softmax in fp32, P cast to the
storage type). The adapter's forward runs on host tensors through the bridge under the variant laws: its
layout swaps, window mapping, varlen padding and unpadding and its supports() are held to the contract.
What jax.nn itself does differently from the contract (a row that sees no key) is the external audit's
to find on the GPU."""
import contextlib
import dataclasses
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


def _problem(n_q=64, n_k=64, d=8, dtype="F16", varlen=False, row=None, batch=1):
    """A dense (batch, heads, n, d) problem, or a packed varlen one (batch sequences, n_q and n_k their
    longest lengths, totals n_q + n_q // 2 and n_k + n_k // 2 over two) whose rows are `row` elements
    apart, as supports() sees it (no data)."""
    def tensor(n, total):
        if varlen:
            return (total, 1, d), ((row or d), (row or d), 1)
        return (batch, 1, n, d), (n * d, n * d, d, 1)
    total_q, total_k = (n_q + n_q // 2, n_k + n_k // 2) if varlen else (n_q, n_k)
    shapes, strides = zip(*(tensor(n, t) for n, t in ((n_q, total_q), (n_k, total_k), (n_k, total_k),
                                                        (n_q, total_q))))
    return flashcheck.Problem(batch=2 if varlen else batch, heads_q=1, heads_kv=1, n_q=n_q, n_k=n_k, d=d, d_v=d,
                              mask="none", window_left=-1, window_right=-1, scale=0.5, softcap=0.0, dtype=dtype,
                              shapes=dict(zip("qkvo", shapes)), strides=dict(zip("qkvo", strides)), varlen=varlen)


def test_the_jax_adapter_declines_what_jax_raises_on(adapter):
    # Each rule is one the H200 audit met (results/h200/external/FINDINGS.md); a contract-valid
    # neighbour of each is still taken, so the rule cannot decline everything.
    xla, cudnn = adapter.xla.user_supports, adapter.cudnn.user_supports
    assert xla(_problem()) and cudnn(_problem())
    assert not xla(_problem(varlen=True, row=11)) and xla(_problem(varlen=True))  # DLPack: compact only
    assert adapter.compact(_problem(varlen=True, row=8)) and not adapter.compact(_problem(varlen=True, row=9))


def test_the_adapter_names_sequence_offsets_it_cannot_use(adapter):
    # A varlen problem's offsets as the device gives them back: consistent ones index the batch; one
    # past the packed tokens (what jax_cudnn's zero_length met on the H200) is named, not indexed.
    p = _problem(varlen=True)  # two sequences of at most 64 tokens, 96 in all
    good = dataclasses.replace(p, cu_seqlens_q=np.array([0, 64, 96]), cu_seqlens_k=np.array([0, 32, 96]))
    gather_q, gather_k, scatter, lengths = adapter._indices(good)
    assert gather_q.shape == (2, 64) and list(lengths[1]) == [32, 64]
    bad = dataclasses.replace(good, cu_seqlens_k=np.array([0, 32, 8880224]))
    with pytest.raises(ValueError, match=r"cu_seqlens_k read back as \[0, 32, 8880224\]"):
        adapter._indices(bad)


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
        for law in ("reference", "varlen_split", "zero_length"):
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
    # On the H200, XLA raised "Unsupported dot precision algorithm: 4" on fp16 problems with d = 1, 2 at
    # n = 16 and d = 9 at n = 1 (results/h200/external/FINDINGS.md). supports() runs the forward and the
    # backward once on zeros of each shape it is asked about (whatever its d, dtype or lengths) and
    # declines only on that refusal; any other error is left for the real call to report.
    jax = sys.modules["jax"]
    inner, calls = jax.nn.dot_product_attention, []

    def refusing(q, k, v, *a, **kw):
        calls.append(q.shape)
        d, n_q = q.shape[-1], q.shape[1]
        if d == 2 or (d == 9 and n_q == 1) or (d == 5 and q.dtype == np.float32) or (d == 24 and n_q == 6):
            raise RuntimeError("INVALID_ARGUMENT: Unsupported dot precision algorithm: 4")
        if d == 3:
            raise RuntimeError("some other failure")
        return inner(q, k, v, *a, **kw)

    def vjp(f, *args):  # the backward's own dots: refused at d = 12
        if args[0].shape[-1] == 12:
            raise RuntimeError("Unsupported dot precision algorithm: 4")
        return f(*args), lambda d_o: tuple(np.zeros_like(a) for a in args)
    jax.nn.dot_product_attention, jax.vjp = refusing, vjp
    adapter._compiles.clear()
    try:
        xla = adapter.xla.user_supports
        assert not xla(_problem(d=2))
        assert not xla(_problem(d=9, n_q=1, n_k=1)) and xla(_problem(d=9, n_q=2, n_k=1))  # per shape, not per d
        assert not xla(_problem(d=5, dtype="F32")) and xla(_problem(d=5))  # fp32 programs are probed too
        assert not xla(_problem(d=12)) and xla(_problem(d=13))  # a refusal in the backward declines
        assert not xla(_problem(d=24, n_q=6, varlen=True))  # varlen: the padded program of its shapes
        assert xla(_problem(d=24, n_q=5, varlen=True))
        assert xla(_problem(d=3))  # another error: the real call reports it
        assert xla(_problem(d=200)) and xla(_problem(d=8, batch=3))
        before = len(calls)
        assert not xla(_problem(d=2)) and xla(_problem(d=200))  # each program is compiled once
        assert xla(dataclasses.replace(_problem(d=2, n_q=7), probing=True))  # the start-up probe: no compile
        assert len(calls) == before
    finally:
        jax.nn.dot_product_attention, jax.vjp = inner, None
        adapter._compiles.clear()


def test_the_cudnn_adapter_declines_windows_with_more_queries_than_keys(adapter):
    # jax.nn's cuDNN path raises "Sliding window attention is only supported with max_s_q <= max_s_kv".
    def windowed(n_q, n_k):
        return dataclasses.replace(_problem(n_q=n_q, n_k=n_k), mask="causal_top_left", window_left=9)
    assert adapter.cudnn.user_supports(windowed(16, 32)) and adapter.cudnn.user_supports(windowed(32, 32))
    assert not adapter.cudnn.user_supports(windowed(32, 16))
