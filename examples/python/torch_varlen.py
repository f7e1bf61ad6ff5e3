"""torch.nn.attention.varlen as a flashcheck kernel: FlashAttention's varlen kernels behind PyTorch's
varlen_attn. The contract's varlen problems (packed (total, heads, d) tensors, cu_seqlens) pass straight
through; a dense batch is packed into one token axis (equal lengths) and unpacked again. Causal is
FlashAttention's bottom-right alignment (window_size=(-1, 0)); windows (left, right) are FlashAttention's,
aligned the same way, so the contract's windows map one to one. lse comes back when varlen_attn offers it.

    python -m flashcheck check torch_varlen:varlen
"""
import inspect
import os
import sys

import torch
from torch.nn.attention import varlen as _varlen

import flashcheck

_PARAMS = inspect.signature(_varlen.varlen_attn).parameters
_HAS_WINDOW = "window_size" in _PARAMS
_HAS_LSE = "return_aux" in _PARAMS and hasattr(_varlen, "AuxRequest")


def _pack(x):  # (batch, heads, n, d) -> (batch * n, heads, d)
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b * n, h, d)


def _window(p):
    """FlashAttention's (left, right): -1 unbounded; the causal mask is right = 0."""
    left, right = p.window_left, p.window_right
    if p.is_causal:
        right = 0 if right < 0 else min(right, 0)
    return left, right


# FC_TRACE_CALLS=1: one stderr line before and after each varlen_attn call (the sequence lengths, the
# strides, what it raised; under autograd the backward runs after "returned"), so a law run that stalls
# or faults shows the call it stalled or faulted in.
_TRACE = bool(os.environ.get("FC_TRACE_CALLS"))


def _trace(what, p, cu_q, cu_k):
    try:
        lens = [torch.diff(x.to("cpu", torch.int64)).tolist() for x in (cu_q, cu_k)]
    except Exception:  # noqa: B902 - a broken CUDA context: the line goes out without the lengths
        lens = ["?", "?"]
    print("torch_varlen %s: %s d=%d %s lens_q=%s lens_k=%s window=%s strides=%s" % (
        what, p.dtype, p.d, p.mask, lens[0], lens[1], (p.window_left, p.window_right),
        [tuple(p.strides[t]) for t in ("q", "k", "v")]), file=sys.stderr, flush=True)


def forward(q, k, v, p):
    if p.varlen:
        cu_q, cu_k, max_q, max_k, packed = p.cu_seqlens_q, p.cu_seqlens_k, p.n_q, p.n_k, (q, k, v)
    else:
        cu_q = torch.arange(0, (p.batch + 1) * p.n_q, p.n_q, dtype=torch.int32, device="cuda")
        cu_k = torch.arange(0, (p.batch + 1) * p.n_k, p.n_k, dtype=torch.int32, device="cuda")
        # Packed as a user of varlen_attn packs: into new contiguous (total, heads, d) tensors.
        max_q, max_k, packed = p.n_q, p.n_k, tuple(_pack(x).contiguous() for x in (q, k, v))
    kwargs = {"scale": p.scale} if "scale" in _PARAMS else {}
    if _HAS_WINDOW:
        kwargs["window_size"] = _window(p)  # a tuple: varlen_attn reads (-1, 0) as is_causal
    else:
        kwargs["is_causal"] = p.is_causal
    if _HAS_LSE:
        kwargs["return_aux"] = _varlen.AuxRequest(lse=True)
    if _TRACE:
        _trace("call", p, cu_q, cu_k)
    try:
        out = _varlen.varlen_attn(*packed, cu_q, cu_k, max_q, max_k, **kwargs)
    except Exception as exc:
        if _TRACE:
            _trace("raised %s" % str(exc).splitlines()[0][:200], p, cu_q, cu_k)
        raise
    if _TRACE:
        _trace("returned", p, cu_q, cu_k)
    o, lse = out if isinstance(out, tuple) else (out, None)
    if lse is not None:
        # FlashAttention writes +inf as the lse of a row that sees no key (softmax.h: sum == 0), so that
        # its backward's exp(s - lse) is 0; the contract's lse of an empty row is -inf. A NaN row also
        # gets +inf there, but its o stays NaN, so the laws still see it.
        lse = torch.where(lse == float("inf"), float("-inf"), lse)
    # lse: (heads_q, total_q), as FlashAttention's varlen forward returns it (varlen_attn's fake kernel
    # for CUDA says the same; its docstring's (T_q, H) is not what comes back).
    if p.varlen:
        return o, lse  # (total_q, heads_q, d_v), (heads_q, total_q)
    o = o.reshape(p.batch, p.n_q, p.heads_q, p.d_v).transpose(1, 2)
    if lse is not None:
        lse = lse.reshape(p.heads_q, p.batch, p.n_q).transpose(0, 1)
    return o, lse


def supports(p):
    if p.d != p.d_v:  # FlashAttention-2: one head dim for q, k and v
        return False
    if "scale" not in _PARAMS and abs(p.scale - p.d ** -0.5) > 1e-12 * p.scale:
        return False  # a varlen_attn without `scale` computes 1/sqrt(d) only
    if not p.varlen:
        return True  # packed into contiguous tensors by forward()
    # The contract's packed tensors go in as they are. FlashAttention reads rows with 16-byte vector
    # loads and its C++ entry checks only stride(-1) == 1: rows that are not 16-byte aligned fault
    # ("misaligned address", and the CUDA context is lost), so such strides are declined. An axis of
    # length 1 counts too: a tile's rows past the sequence's end still get addresses from its stride.
    return all(stride % 8 == 0 for t in ("q", "k", "v") for stride in p.strides[t][:-1])


varlen = flashcheck.Kernel(
    forward, name="torch_varlen", device="cuda", dtypes=("F16", "BF16"), masks=("none", "causal_bottom_right"),
    head_dims=range(8, 257, 8),  # FlashAttention-2: head dims multiple of 8, up to 256
    writes_lse=_HAS_LSE, supports=supports, variants=("varlen",) + (("window",) if _HAS_WINDOW else ()))
