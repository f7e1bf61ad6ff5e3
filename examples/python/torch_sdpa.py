"""PyTorch's scaled_dot_product_attention as flashcheck kernels, one per backend (flash, efficient,
cuDNN, math) on CUDA, and SDPA on the CPU (`cpu_flash`, the CPU's fused flash kernel; `cpu_math`, the
unfused composite; no GPU needed). SDPA's is_causal is the top-left alignment; its backward comes through autograd; d_v != d
is offered to every backend and declined where SDPA's own support check says no. Mask tensors and block
masks (contract v3) go to SDPA as its attn_mask: a boolean mask as it is (true = the key takes part), an
additive one in q's dtype (SDPA takes a float mask only in the query's dtype: other mask dtypes are
declined), a block mask expanded to its dense boolean mask, the built-in causal mask intersected. The
math backend on CUDA and both CPU backends declare them (their mask laws pass on the H200's torch 2.11:
python/tests/test_torch.py); the fused CUDA backends do not yet: on the H200 their mask laws ran past the
test's time budget without a verdict, which is not yet diagnosed.

    python -m flashcheck check torch_sdpa:flash       # from this folder, every law, isolated
    python -m flashcheck check torch_sdpa:cpu_flash   # the same on the CPU

What a backend cannot run is declined in supports(), never failed: first SDPA's own check
(torch.backends.cuda.can_use_*_attention on tensors of this call's shapes and strides), then the limits
the kernels themselves enforce but that check does not look at (each with its rule below).
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
_DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32}


def _tensors(p):
    """Empty tensors with the call's shapes, strides and dtype (for SDPA's own support checks)."""
    return [torch.empty_strided(p.shapes[t], p.strides[t], dtype=_DTYPES[p.dtype], device="cuda")
            for t in ("q", "k", "v")]


def rows_aligned(p, elems, every_axis=False, tensors=("q", "k", "v")):
    """Whether every stride of `tensors` but the last (over axes longer than 1, or over every axis with
    `every_axis`) is a multiple of `elems` elements: the 16-byte rows the vectorised loads of the fused
    kernels need. A kernel that checks the strides themselves, not the loads it makes, checks a length-1
    axis's stride too. "o" stands for d_o too: the suite lays d_o out as o, and autograd hands d_o to
    the backward kernel as it is."""
    return all(stride % elems == 0 for t in tensors
               for n, stride in zip(p.shapes[t][:-1], p.strides[t][:-1]) if n > 1 or every_axis)


def attn_mask(p, device):
    """The problem's mask tensor, block mask and causal mask as one SDPA attn_mask (None when it has
    neither tensor: is_causal then says the causal mask): boolean (true = the key takes part), or the
    additive mask with -inf where a boolean part hides the key. Broadcast axes stay of size 1."""
    if p.mask_kind == "none" and p.block_q == 0:
        return None
    keep = None
    if p.block_q:  # each block bit covers block_q x block_k scores (the last ones partial)
        keep = p.block_mask.bool().repeat_interleave(p.block_q, dim=2)[:, :, :p.n_q]
        keep = keep.repeat_interleave(p.block_k, dim=3)[:, :, :, :p.n_k]
    if p.is_causal:  # top-left: key j for query i iff j <= i
        tril = torch.ones(p.n_q, p.n_k, dtype=torch.bool, device=device).tril()
        keep = tril if keep is None else keep & tril
    if p.mask_kind == "bool":
        keep = p.mask_tensor.bool() if keep is None else keep & p.mask_tensor.bool()
    if p.mask_kind != "additive":
        return keep
    bias = p.mask_tensor
    return bias if keep is None else bias.masked_fill(~keep, float("-inf"))


def _mask_supported(p):
    """An additive mask in q's dtype only (SDPA's float attn_mask)."""
    return p.mask_kind != "additive" or p.mask_dtype == p.dtype


def _mask_like(p):
    """An empty attn_mask of the call's shape and dtype, for SDPA's own support checks."""
    if p.mask_kind == "none" and p.block_q == 0:
        return None
    shape = p.mask_shape or (p.block_mask_shape[0], p.block_mask_shape[1], p.n_q, p.n_k)
    dtype = _DTYPES[p.dtype] if p.mask_kind == "additive" else torch.bool
    return torch.empty(shape, dtype=dtype, device="cuda")


def _sdpa(q, k, v, p):
    mask = attn_mask(p, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=p.is_causal and mask is None,
                                          scale=p.scale, enable_gqa=p.heads_q != p.heads_kv)


_MASKS = ("mask_bool", "mask_additive", "block_mask")


def sdpa(backend, check_alignment=True, masks=None):
    """masks: whether the kernel declares mask tensors and block masks (default: the math backend only)."""
    if masks is None:
        masks = backend == SDPBackend.MATH

    def forward(q, k, v, p):
        with sdpa_kernel(backend):
            return _sdpa(q, k, v, p)

    def supports(p):
        if not _mask_supported(p):
            return False
        name = _CAN_USE.get(backend)
        if name is None:  # math runs everything
            return True
        mask = _mask_like(p)
        params = torch.backends.cuda.SDPAParams(*_tensors(p), mask, 0.0, p.is_causal and mask is None,
                                                p.heads_q != p.heads_kv)
        if not getattr(torch.backends.cuda, name)(params, False):
            return False
        elems = 16 // _DTYPES[p.dtype].itemsize
        if backend == SDPBackend.EFFICIENT_ATTENTION and check_alignment:
            # The memory-efficient (cutlass) kernels are built for sm80+ only in their aligned variants:
            # kernel_forward.h's check_supported requires q/k/v strides along the sequence, head and batch
            # axes to be multiples of 128 bits ("query is not correctly aligned (strideM)"), and with no
            # aligned kernel applicable the dispatcher raises "cutlassF: no kernel found to launch!".
            # check_supported tests strideM whatever the axis's length (the H200 audit's n_q = 1
            # counterexample), so every axis counts.
            return rows_aligned(p, elems, every_axis=True, tensors=("q", "k", "v", "o"))
        if backend == SDPBackend.CUDNN_ATTENTION and check_alignment:
            # SDPA's check accepts strides that are not 16-byte multiples and cuDNN's kernel faults on
            # them ("misaligned address", the CUDA context lost: the H200 audit, on shapes whose compact
            # strides are aligned); Hopper's TMA descriptors need 16-byte strides on every axis. Declined here; `cudnn_any_stride` runs
            # them. (Whether the audit's NaN convex_hull case has the same cause is not established.) Its
            # backward faulted too ("mha_graph.execute" after a misaligned address), so d_o counts.
            return rows_aligned(p, elems, every_axis=True, tensors=("q", "k", "v", "o"))
        if backend == SDPBackend.FLASH_ATTENTION and check_alignment:
            # FlashAttention-2 reads q/k/v rows with 16-byte vector loads; flash_api.cpp checks only
            # stride(-1) == 1 (and flash_attn's Python interface makes inputs contiguous), so SDPA's check
            # accepts rows that are not 16-byte aligned and the kernel faults with "misaligned address",
            # which breaks the CUDA context. Declined here; `flash_any_stride` runs them (the audit's
            # counterexample for that fault).
            return rows_aligned(p, elems)
        return True

    name = "sdpa_" + backend.name.lower() + ("" if check_alignment else "_any_stride")
    # FlashAttention-2 and cuDNN take fp16 and bf16 only: fp32 is not declared for them, so no law draws
    # a case that supports() can only decline.
    half_only = backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION)
    return flashcheck.Kernel(forward, name=name, device="cuda",
                             dtypes=("F16", "BF16") if half_only else ("F16", "BF16", "F32"),
                             masks=("none", "causal_top_left"), writes_lse=False,
                             variants=("d_v",) + (_MASKS if masks else ()), supports=supports)


flash = sdpa(SDPBackend.FLASH_ATTENTION)
efficient = sdpa(SDPBackend.EFFICIENT_ATTENTION)
cudnn = sdpa(SDPBackend.CUDNN_ATTENTION)
math = sdpa(SDPBackend.MATH)
flash_any_stride = sdpa(SDPBackend.FLASH_ATTENTION, check_alignment=False)
cudnn_any_stride = sdpa(SDPBackend.CUDNN_ATTENTION, check_alignment=False)


def sdpa_cpu(backend):
    """SDPA on CPU tensors with one backend forced: FLASH_ATTENTION is the CPU's fused flash kernel
    (fp32, bf16 and fp16 inputs), MATH the unfused composite. Both take every shape the suite draws."""
    def forward(q, k, v, p):
        with sdpa_kernel(backend):
            return _sdpa(q, k, v, p)

    return flashcheck.Kernel(forward, name="sdpa_cpu_" + backend.name.lower(), device="cpu",
                             dtypes=("F16", "BF16", "F32"), masks=("none", "causal_top_left"), writes_lse=False,
                             variants=(("d_v",) if backend == SDPBackend.MATH else ()) + _MASKS,
                             supports=_mask_supported)


cpu_flash = sdpa_cpu(SDPBackend.FLASH_ATTENTION)
cpu_math = sdpa_cpu(SDPBackend.MATH)
