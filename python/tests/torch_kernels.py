"""Attention in torch for the bridge's GPU tests: a correct kernel (fp32 arithmetic, autograd backward;
on the GPU and on the host), the same with its backward as a second callable, SDPA's math backend,
and two planted bugs a kernel author makes (SDPA's top-left is_causal claimed as FlashAttention's
bottom-right alignment; lse in base 2)."""
import math

import torch
import torch.nn.functional as F

import flashcheck


def _mask(p, device):
    """(n_q, n_k) visibility, or None."""
    if p.mask == "none":
        return None
    shift = p.n_k - p.n_q if p.mask == "causal_bottom_right" else 0
    i = torch.arange(p.n_q, device=device)[:, None]
    j = torch.arange(p.n_k, device=device)[None, :]
    return j <= i + shift


def attention(q, k, v, p):
    """Attention in fp32: scores, masked softmax (fully masked rows: o = 0, lse = -inf)."""
    group = p.heads_q // p.heads_kv
    kk, vv = (x.float().repeat_interleave(group, dim=1) for x in (k, v))
    s = p.scale * q.float() @ kk.transpose(-1, -2)
    mask = _mask(p, q.device)
    if mask is None:
        lse = torch.logsumexp(s, dim=-1)
        return (torch.exp(s - lse[..., None]) @ vv).to(q.dtype), lse
    s = s.masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    P = torch.exp(s - torch.where(torch.isfinite(lse), lse, 0.0)[..., None])
    # sum_j P_ij v_j over the keys row i sees: a NaN in a key it cannot see stays out (0 * NaN)
    o = torch.where(mask[:, :, None], P[..., :, :, None] * vv[..., None, :, :], 0.0).sum(dim=-2)
    return o.to(q.dtype), lse


def attention_backward(q, k, v, o, lse, d_o, p):
    """The backward as a second callable: autograd through `attention`, by hand."""
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    with torch.enable_grad():
        out, _ = attention(*leaves, p)
        grads = torch.autograd.grad(out, leaves, d_o)
    return tuple(grads)


def sdpa_math(q, k, v, p):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, is_causal=p.is_causal, scale=p.scale,
                                              enable_gqa=p.heads_q != p.heads_kv)


def causal_misaligned(q, k, v, p):
    return F.scaled_dot_product_attention(q, k, v, is_causal=p.is_causal, scale=p.scale,
                                          enable_gqa=p.heads_q != p.heads_kv)


def lse_base2(q, k, v, p):
    o, lse = attention(q, k, v, p)
    return o, lse / math.log(2.0)


correct_cuda = flashcheck.Kernel(attention, name="torch_attention", device="cuda", framework="torch")
correct_cpu = flashcheck.Kernel(attention, name="torch_attention_cpu", device="cpu", framework="torch")
second_callable = flashcheck.Kernel(attention, attention_backward, name="torch_attention_bwd", device="cuda",
                                    framework="torch")
math_backend = flashcheck.Kernel(sdpa_math, name="sdpa_math", device="cuda", framework="torch", writes_lse=False,
                                 masks=("none", "causal_top_left"))
misaligned = flashcheck.Kernel(causal_misaligned, name="sdpa_claims_bottom_right", device="cuda", framework="torch",
                               writes_lse=False, masks=("causal_bottom_right",))
planted_lse = flashcheck.Kernel(lse_base2, None, name="torch_lse_base2", device="cuda", framework="torch")
