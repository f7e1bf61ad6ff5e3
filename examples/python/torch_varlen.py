"""torch.nn.attention.varlen as a flashcheck kernel: a dense batch packed into one token axis
(cu_seqlens from the batch's lengths), attention through varlen_attn, unpacked again. Its causal mask is
taken to be FlashAttention's bottom-right alignment (the varlen kernels are FlashAttention's); the
contract's own varlen problems are passed through once the generators make them.

    python -m flashcheck check torch_varlen:varlen
"""
import inspect

import torch
from torch.nn.attention import varlen as _varlen

import flashcheck

_PARAMS = inspect.signature(_varlen.varlen_attn).parameters


def _pack(x):  # (batch, heads, n, d) -> (batch * n, heads, d)
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b * n, h, d)


def forward(q, k, v, p):
    cu_q = torch.arange(0, (p.batch + 1) * p.n_q, p.n_q, dtype=torch.int32, device="cuda")
    cu_k = torch.arange(0, (p.batch + 1) * p.n_k, p.n_k, dtype=torch.int32, device="cuda")
    kwargs = {}
    if "scale" in _PARAMS:
        kwargs["scale"] = p.scale
    if "is_causal" in _PARAMS:
        kwargs["is_causal"] = p.is_causal
    elif p.is_causal:
        kwargs["window_size"] = (-1, 0)
    o = _varlen.varlen_attn(_pack(q), _pack(k), _pack(v), cu_q, cu_k, p.n_q, p.n_k, **kwargs)
    o = o[0] if isinstance(o, tuple) else o
    return o.reshape(p.batch, p.n_q, p.heads_q, p.d_v).transpose(1, 2)


varlen = flashcheck.Kernel(
    forward, name="torch_varlen", device="cuda", dtypes=("F16", "BF16"), masks=("none", "causal_bottom_right"),
    head_dims=range(8, 257, 8), writes_lse=False,
    supports=lambda p: "scale" in _PARAMS or abs(p.scale - p.d ** -0.5) < 1e-12 * p.scale)
