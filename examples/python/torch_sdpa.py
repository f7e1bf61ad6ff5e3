"""PyTorch's scaled_dot_product_attention as flashcheck kernels, one per backend (flash, efficient,
cuDNN, math). SDPA's is_causal is the top-left alignment; its backward comes through autograd.

    python -m flashcheck check torch_sdpa:flash       # from this folder, every law, isolated
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcheck

_CAN_USE = {
    SDPBackend.FLASH_ATTENTION: "can_use_flash_attention",
    SDPBackend.EFFICIENT_ATTENTION: "can_use_efficient_attention",
    SDPBackend.CUDNN_ATTENTION: "can_use_cudnn_attention",
}


def _tensors(p):
    """Empty tensors with the call's shapes, strides and dtype (for SDPA's own support checks)."""
    dtype = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32}[p.dtype]
    shapes = {"q": (p.batch, p.heads_q, p.n_q, p.d), "k": (p.batch, p.heads_kv, p.n_k, p.d),
              "v": (p.batch, p.heads_kv, p.n_k, p.d_v)}
    return [torch.empty_strided(shapes[t], p.strides[t], dtype=dtype, device="cuda") for t in ("q", "k", "v")]


def sdpa(backend):
    def forward(q, k, v, p):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=p.is_causal, scale=p.scale,
                                                  enable_gqa=p.heads_q != p.heads_kv)

    def supports(p):  # what SDPA itself says it runs (so an unsupported shape is declined, not failed)
        name = _CAN_USE.get(backend)
        if name is None:
            return True
        params = torch.backends.cuda.SDPAParams(*_tensors(p), None, 0.0, p.is_causal, p.heads_q != p.heads_kv)
        return bool(getattr(torch.backends.cuda, name)(params, False))

    return flashcheck.Kernel(forward, name="sdpa_" + backend.name.lower(), device="cuda",
                             dtypes=("F16", "BF16") if backend != SDPBackend.MATH else ("F16", "BF16", "F32"),
                             masks=("none", "causal_top_left"), writes_lse=False, supports=supports)


flash = sdpa(SDPBackend.FLASH_ATTENTION)
efficient = sdpa(SDPBackend.EFFICIENT_ATTENTION)
cudnn = sdpa(SDPBackend.CUDNN_ATTENTION)
math = sdpa(SDPBackend.MATH)
