"""FlexAttention (torch.compile'd) as flashcheck kernels: plain (the masks as a block mask, both causal
alignments), with a softcap score_mod, and with a sliding-window block mask (windows aligned as the
contract says: i' = i under causal_top_left, i + n_k - n_q otherwise). FlexAttention returns lse,
which flashcheck holds to the natural-log contract; d_v != d is offered to all three.

    python -m flashcheck check flex_attention:flex

One compiled function serves every call: the mask_mod and score_mod are module-level functions reading
their parameters from tensors filled before each call, so a new problem means new values, not a new
function for dynamo to recompile (shapes are dynamic). What still compiles separately is each dtype and
head dim; FC_FLEX_DTYPES and FC_FLEX_HEAD_DIMS (comma-separated) narrow them to bound that cost.
"""
import os

import torch
from torch.nn.attention import flex_attention as _flex

import flashcheck

for _limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
    if hasattr(torch._dynamo.config, _limit):  # never fall back to eager after many shapes
        setattr(torch._dynamo.config, _limit, max(getattr(torch._dynamo.config, _limit), 1024))
_compiled = torch.compile(_flex.flex_attention, dynamic=True)

_BIG = 1 << 30  # an unbounded window side (q_idx + _BIG stays within int32)
# The visible keys of query q_idx: row - _LEFT <= kv_idx <= row + _RIGHT, row = q_idx + _SHIFT (the
# aligned row i'); the causal mask is _RIGHT <= 0. Filled per call by _set().
_SHIFT = torch.zeros((), dtype=torch.int32, device="cuda")
_LEFT = torch.zeros((), dtype=torch.int32, device="cuda")
_RIGHT = torch.zeros((), dtype=torch.int32, device="cuda")
_CAP = torch.ones((), dtype=torch.float32, device="cuda")


def _mask_mod(b, h, q_idx, kv_idx):
    row = q_idx + _SHIFT
    return (kv_idx >= row - _LEFT) & (kv_idx <= row + _RIGHT)


def _softcap_mod(score, b, h, q_idx, kv_idx):
    return _CAP * torch.tanh(score / _CAP)  # score is fp32 inside the kernel


def _set(p):
    _SHIFT.fill_(0 if p.mask == "causal_top_left" else p.n_k - p.n_q)
    _LEFT.fill_(p.window_left if p.window_left >= 0 else _BIG)
    right = p.window_right if p.window_right >= 0 else _BIG
    _RIGHT.fill_(min(right, 0) if p.mask != "none" else right)
    if p.softcap > 0:
        _CAP.fill_(p.softcap)


def forward(q, k, v, p):
    _set(p)
    block_mask = _flex.create_block_mask(_mask_mod, None, None, p.n_q, p.n_k, device="cuda")
    kwargs = dict(score_mod=_softcap_mod if p.softcap > 0 else None, block_mask=block_mask, scale=p.scale,
                  enable_gqa=True)  # enable_gqa=True also serves heads_q == heads_kv: one graph for both
    if hasattr(_flex, "AuxRequest"):  # torch >= 2.9: return_aux replaces return_lse
        o, aux = _compiled(q, k, v, return_aux=_flex.AuxRequest(lse=True), **kwargs)
        return o, aux.lse
    return _compiled(q, k, v, return_lse=True, **kwargs)


def _scope(name, default):
    value = os.environ.get(name)
    return tuple(x.strip() for x in value.split(",") if x.strip()) if value else default


_DTYPES = _scope("FC_FLEX_DTYPES", ("F16", "BF16", "F32"))
# FlexAttention's Triton templates take power-of-two head dims (_supported_head_dim in older releases;
# newer ones pad the others); q and k share theirs, v may differ.
_HEAD_DIMS = tuple(int(x) for x in _scope("FC_FLEX_HEAD_DIMS", ("16", "32", "64", "128", "256")))


def _kernel(name, variants):
    return flashcheck.Kernel(forward, name=name, device="cuda", dtypes=_DTYPES, head_dims=_HEAD_DIMS,
                             variants=variants + ("d_v",))


flex = _kernel("flex_attention", ())
flex_softcap = _kernel("flex_attention_softcap", ("softcap",))
flex_window = _kernel("flex_attention_window", ("window",))
