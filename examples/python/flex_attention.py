"""FlexAttention (torch.compile'd) as flashcheck kernels: plain (masks from a block mask, both causal
alignments), with a softcap score_mod, and with a sliding-window block mask. The two variant kernels
accept plain problems too, and the contract's softcap and window cases as soon as the generators make
them. FlexAttention returns lse, which flashcheck holds to the natural-log contract.

    python -m flashcheck check flex_attention:flex
"""
import torch
from torch.nn.attention import flex_attention as _flex

import flashcheck

torch._dynamo.config.cache_size_limit = 256  # every shape compiles once; never fall back to eager
_compiled = torch.compile(_flex.flex_attention, dynamic=True)


def _mask_mod(p):
    """Visibility as a mask_mod; offsets as tensors so a new shape does not mean a new kernel."""
    shift = torch.tensor(p.n_k - p.n_q if p.mask != "causal_top_left" else 0, device="cuda")
    left, right = (torch.tensor(w if w >= 0 else 1 << 30, device="cuda") for w in (p.window_left, p.window_right))
    causal, window = p.mask != "none", (p.window_left, p.window_right) != (-1, -1)

    def mask_mod(b, h, q_idx, kv_idx):
        row = q_idx + shift  # the aligned row i'
        seen = kv_idx <= row if causal else kv_idx >= 0
        if window:
            seen = seen & (kv_idx >= row - left) & (kv_idx <= row + right)
        return seen

    if not causal and not window:
        return None
    return _flex.create_block_mask(mask_mod, None, None, p.n_q, p.n_k, device="cuda")


def _score_mod(p):
    if p.softcap == 0:
        return None
    cap = torch.tensor(p.softcap, device="cuda", dtype=torch.float32)
    return lambda score, b, h, q_idx, kv_idx: cap * torch.tanh(score / cap)


def forward(q, k, v, p):
    kwargs = dict(score_mod=_score_mod(p), block_mask=_mask_mod(p), scale=p.scale, enable_gqa=p.heads_q != p.heads_kv)
    if hasattr(_flex, "AuxRequest"):  # torch >= 2.9: return_aux replaces return_lse
        o, aux = _compiled(q, k, v, return_aux=_flex.AuxRequest(lse=True), **kwargs)
        return o, aux.lse
    return _compiled(q, k, v, return_lse=True, **kwargs)


def _kernel(name, variants):
    return flashcheck.Kernel(forward, name=name, device="cuda", dtypes=("F16", "BF16", "F32"),
                             head_dims=(16, 32, 64, 128), variants=variants)


flex = _kernel("flex_attention", ())
flex_softcap = _kernel("flex_attention_softcap", ("softcap",))
flex_window = _kernel("flex_attention_window", ("window",))
