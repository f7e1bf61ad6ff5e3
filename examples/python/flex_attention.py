"""FlexAttention (torch.compile'd) as flashcheck kernels: plain (the masks as a block mask, both causal
alignments), with a softcap score_mod, with a sliding-window block mask (windows aligned as the
contract says: i' = i under causal_top_left, i + n_k - n_q otherwise), and with the contract's mask
tensors and block masks (`flex_masked`: a boolean mask and a block mask read by the mask_mod, an
additive mask added by a score_mod, its -inf entries hidden by the mask_mod as well). FlexAttention
returns lse, which flashcheck holds to the natural-log contract; d_v != d is offered to all four.

    python -m flashcheck check flex_attention:flex

One compiled function serves every call. torch.compile specialises on what it cannot keep symbolic (the
BlockMask's sequence lengths are Python ints; sizes 1 are always specialised), so every call is padded to
a few shapes (shape_buckets.padded_shape): queries and keys to one square power-of-two length, at least
FC_FLEX_MIN_BUCKET (default 1024), batch and heads_kv to at least 2. The mask_mod hides the padding (a
padded key is masked for every row, a padded query row sees no key) and reads the real lengths, the
window and the alignment from 0-d tensors filled before each call, so a new problem means new values,
not a new graph. Padded outputs are sliced off; a real row's o and lse are what the kernel computes for
it (docs/external-audit.md: why the padding is sound, and what it changes). What still compiles
separately is each dtype, head dim pair and bucket; FC_FLEX_DTYPES and FC_FLEX_HEAD_DIMS
(comma-separated) narrow them to bound that cost.

`flex_masked` keeps one graph per bucket the same way: the mask tensor, the block mask and the causal
part become one boolean tensor `_KEEP` and the additive values one fp32 tensor `_BIAS`, both expanded
to the padded call's full (batch', heads_q', n', n') shape (a broadcast axis of size 1 would be a
specialised size), which the mods index. An additive mask of any declared dtype is widened to fp32
(exact: F16 and BF16 values are fp32 values), and the score_mod adds it to the scaled score, the
contract's order. A key whose additive value is -inf is hidden through `_KEEP`, not by adding -inf,
so a row with every key hidden is FlexAttention's empty row (o = 0, lse = -inf), not -inf - -inf.
Those dense tensors, and the (n', n') mask create_block_mask materialises for every kernel here, grow
with n'^2: a problem past FC_FLEX_MASK_ELEMENTS elements (default 2^28: padded n' up to 16384, 8192
with a mask tensor at batch' = heads_q' = 2) is declined, not run out of memory.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import flex_attention as _flex

import flashcheck

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # shape_buckets.py lies beside this file, also when it is loaded as FILE.py:NAME
    sys.path.append(_HERE)
from shape_buckets import dense_mask_elements, floor_from_env, padded_shape  # noqa: E402

for _limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
    if hasattr(torch._dynamo.config, _limit):  # never fall back to eager after many shapes
        setattr(torch._dynamo.config, _limit, max(getattr(torch._dynamo.config, _limit), 1024))
_compiled = torch.compile(_flex.flex_attention, dynamic=True)
_FLOOR = floor_from_env()
# FlexAttention's kernel_options (a JSON object, e.g. '{"num_stages": 1}'), passed to every call: the
# Triton templates' tiling, for configurations that would not fit in shared memory.
_KERNEL_OPTIONS = json.loads(os.environ.get("FC_FLEX_KERNEL_OPTIONS") or "{}")

_BIG = 1 << 30  # an unbounded window side (q_idx + _BIG stays within int32)
# The visible keys of query q_idx < _NQ: kv_idx < _NK and row - _LEFT <= kv_idx <= row + _RIGHT, row =
# q_idx + _SHIFT (the aligned row i'); the causal mask is _RIGHT <= 0. Filled per call by _set().
_NQ = torch.zeros((), dtype=torch.int32, device="cuda")
_NK = torch.zeros((), dtype=torch.int32, device="cuda")
_SHIFT = torch.zeros((), dtype=torch.int32, device="cuda")
_LEFT = torch.zeros((), dtype=torch.int32, device="cuda")
_RIGHT = torch.zeros((), dtype=torch.int32, device="cuda")
_CAP = torch.ones((), dtype=torch.float32, device="cuda")


def _mask_mod(b, h, q_idx, kv_idx):
    row = q_idx + _SHIFT
    real = (q_idx < _NQ) & (kv_idx < _NK)  # the padding: no padded key is seen, no padded row sees a key
    return real & (kv_idx >= row - _LEFT) & (kv_idx <= row + _RIGHT)


# flex_masked's tensors, rebound by _set_masks() before each call: (batch', heads_q', n', n').
_KEEP = torch.ones((2, 2, 2, 2), dtype=torch.bool, device="cuda")
_BIAS = torch.zeros((2, 2, 2, 2), dtype=torch.float32, device="cuda")


def _tensor_mask_mod(b, h, q_idx, kv_idx):
    return _mask_mod(b, h, q_idx, kv_idx) & _KEEP[b, h, q_idx, kv_idx]


def _bias_mod(score, b, h, q_idx, kv_idx):
    return score + _BIAS[b, h, q_idx, kv_idx]


def _set_masks(p, batch, heads_q, n):
    """_KEEP: the block mask's and the mask tensor's visible keys, and the finite entries of an additive
    mask; _BIAS: the additive values (0 elsewhere). Padding is hidden by _mask_mod's real lengths."""
    global _KEEP, _BIAS
    keep = torch.ones((p.batch, p.heads_q, p.n_q, p.n_k), dtype=torch.bool, device="cuda")
    if p.block_q:  # each block bit covers block_q x block_k scores (the last ones partial)
        blocks = p.block_mask.bool().repeat_interleave(p.block_q, dim=2)[:, :, :p.n_q]
        keep = keep & blocks.repeat_interleave(p.block_k, dim=3)[:, :, :, :p.n_k]
    bias = None
    if p.mask_kind == "bool":
        keep = keep & p.mask_tensor.bool()
    elif p.mask_kind == "additive":
        bias = p.mask_tensor.float().expand(p.batch, p.heads_q, p.n_q, p.n_k)
        keep = keep & (bias != float("-inf"))
        bias = bias.masked_fill(~keep, 0.0)
    pad = (0, n - p.n_k, 0, n - p.n_q, 0, heads_q - p.heads_q, 0, batch - p.batch)
    _KEEP = F.pad(keep, pad, value=False).contiguous()
    _BIAS = F.pad(bias, pad).contiguous() if bias is not None else None


def _softcap_mod(score, b, h, q_idx, kv_idx):
    return _CAP * torch.tanh(score / _CAP)  # score is fp32 inside the kernel


def _set(p):
    _NQ.fill_(p.n_q)
    _NK.fill_(p.n_k)
    _SHIFT.fill_(0 if p.mask == "causal_top_left" else p.n_k - p.n_q)
    _LEFT.fill_(p.window_left if p.window_left >= 0 else _BIG)
    right = p.window_right if p.window_right >= 0 else _BIG
    _RIGHT.fill_(min(right, 0) if p.mask != "none" else right)
    if p.softcap > 0:
        _CAP.fill_(p.softcap)


def _pad(x, batch, heads, n):
    """x (b, h, m, d) -> (batch, heads, n, d), zeros appended, contiguous (differentiable: its gradient is
    the slice of the padded one)."""
    b, h, m, _ = x.shape
    return F.pad(x, (0, 0, 0, n - m, 0, heads - h, 0, batch - b)).contiguous()


def forward(q, k, v, p):
    _set(p)
    batch, heads_q, heads_kv, n = padded_shape(p.batch, p.heads_q, p.heads_kv, p.n_q, p.n_k, _FLOOR)
    q2 = _pad(q, batch, heads_q, n)  # (batch', heads_q', n', d)
    k2, v2 = (_pad(x, batch, heads_kv, n) for x in (k, v))  # (batch', heads_kv', n', d or d_v)
    mask_mod, score_mod = _mask_mod, _softcap_mod if p.softcap > 0 else None
    if p.mask_kind != "none" or p.block_q:
        _set_masks(p, batch, heads_q, n)
        mask_mod, score_mod = _tensor_mask_mod, _bias_mod if _BIAS is not None else None
    # The block mask per batch and head only where a mask tensor can differ between them.
    per_head = mask_mod is _tensor_mask_mod
    block_mask = _flex.create_block_mask(mask_mod, batch if per_head else None, heads_q if per_head else None, n,
                                         n, device="cuda")
    kwargs = dict(score_mod=score_mod, block_mask=block_mask, scale=p.scale,
                  enable_gqa=True)  # enable_gqa=True also serves heads_q == heads_kv: one graph for both
    if _KERNEL_OPTIONS:
        kwargs["kernel_options"] = _KERNEL_OPTIONS
    if hasattr(_flex, "AuxRequest"):  # torch >= 2.9: return_aux replaces return_lse
        o, aux = _compiled(q2, k2, v2, return_aux=_flex.AuxRequest(lse=True), **kwargs)
        lse = aux.lse
    else:
        o, lse = _compiled(q2, k2, v2, return_lse=True, **kwargs)
    real = (slice(0, p.batch), slice(0, p.heads_q), slice(0, p.n_q))
    return o[real], lse[real]  # (batch, heads_q, n_q, d_v), (batch, heads_q, n_q)


def _scope(name, default):
    value = os.environ.get(name)
    return tuple(x.strip() for x in value.split(",") if x.strip()) if value else default


_DTYPES = _scope("FC_FLEX_DTYPES", ("F16", "BF16", "F32"))
# FlexAttention's Triton templates take power-of-two head dims (_supported_head_dim in older releases;
# newer ones pad the others); q and k share theirs, v may differ.
_HEAD_DIMS = tuple(int(x) for x in _scope("FC_FLEX_HEAD_DIMS", ("16", "32", "64", "128", "256")))


# create_block_mask materialises the padded (n', n') mask (per batch and head where a mask tensor can
# differ between them), and flex_masked builds its mask tensors dense at the padded shape (_set_masks:
# a bool and an fp32 tensor and their temporaries): a problem whose dense mask passes
# FC_FLEX_MASK_ELEMENTS elements (default 2^28: n' up to 16384 unmasked, 8192 masked at batch' =
# heads_q' = 2) is declined rather than run out of device memory (a 65537-key row pads to 131072²).
_MASK_ELEMENTS = int(os.environ.get("FC_FLEX_MASK_ELEMENTS") or 1 << 28)


def _fits(p):
    per_head = p.mask_kind != "none" or bool(p.block_q)
    return dense_mask_elements(p.batch, p.heads_q, p.heads_kv, p.n_q, p.n_k, _FLOOR, per_head) <= _MASK_ELEMENTS


def _kernel(name, variants):
    return flashcheck.Kernel(forward, name=name, device="cuda", dtypes=_DTYPES, head_dims=_HEAD_DIMS,
                             variants=variants + ("d_v",), supports=_fits)


flex = _kernel("flex_attention", ())
flex_softcap = _kernel("flex_attention_softcap", ("softcap",))
flex_window = _kernel("flex_attention_window", ("window",))
flex_masked = _kernel("flex_attention_masked", ("mask_bool", "mask_additive", "block_mask"))
