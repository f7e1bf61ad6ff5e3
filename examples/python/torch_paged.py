"""A paged-KV attention written in plain torch ops, as a flashcheck kernel: what a decode kernel over a
KV cache reads (a page table mapping each sequence's logical pages to physical pages of page_size
keys in one pool), computed in fp32 on the GPU. It takes the contract's dense, varlen and paged
problems without a mask (GQA, d_v != d); the backward is torch autograd through the page gather, so a
physical page two sequences read gets the sum of both gradients, as the contract defines the paged
backward (docs/SEMANTICS.md).

Why no mask: a dense product masked afterwards multiplies a hidden key's k and v by a weight of 0, and
0 * NaN is NaN, so a NaN in a key a row must not see would reach the row (and a NaN query would reach
the d_k of keys it does not see). The contract forbids both; `window_invisible` and `nan_blast` fail
such a kernel at once. Without a mask every row sees every key of its sequence and the product is
exactly what the contract asks.

    python -m flashcheck check torch_paged:paged --cases 40

The laws reach it where a paged kernel breaks: the `paged` law runs each case paged and contiguous and
compares the bits, and a quarter of its cases are long (17 to 512 pages, page indices past 2^15,
tables past 2^16 entries); `reference` judges paged problems against the certified oracle, on the GPU
where a device is present (docs/error-model.md, "The certified oracle on the GPU").

`paged_int16` is the same kernel with a planted bug, a negative control: its page indices pass through
int16 (as a kernel that packs its table narrowly does), so a page at index 2^15 or above wraps to a
negative index, which torch reads from the pool's end. Only problems with that many pages reach it.

    python -m flashcheck check torch_paged:paged_int16 --law paged --cases 40
"""
import torch
import torch.nn.functional as F

import flashcheck

torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products: the kernel claims fp32 arithmetic


def _keys(x, p, b, cu_k, narrow=False):
    """Sequence b's rows of k or v as (n_k, heads_kv, width): read through the page table (paged), cut
    from the packed token axis (varlen) or taken from the batch (dense)."""
    if p.page_size:
        n = cu_k[b + 1] - cu_k[b]
        pages = -(-n // p.page_size)
        # (pages, page_size, heads_kv, width): the table's first `pages` entries; the rest are never read.
        table = p.page_table[b, :pages]
        rows = x[(table.to(torch.int16) if narrow else table).long()]
        return rows.reshape(pages * p.page_size, *x.shape[2:])[:n]
    if p.varlen:
        return x[cu_k[b]:cu_k[b + 1]]
    return x[b].transpose(0, 1)


def _attend(q, k, v, p):
    """One sequence: q (n_q, heads_q, d), k (n_k, heads_kv, d), v (n_k, heads_kv, d_v) -> o (n_q, heads_q,
    d_v) and lse (heads_q, n_q), in fp32. A sequence without keys gets o = 0 and lse = -inf."""
    n_q, n_k, group = q.shape[0], k.shape[0], p.heads_q // p.heads_kv
    qf = q.float().transpose(0, 1)  # (heads_q, n_q, d)
    kf = k.float().transpose(0, 1).repeat_interleave(group, 0)  # (heads_q, n_k, d)
    vf = v.float().transpose(0, 1).repeat_interleave(group, 0)  # (heads_q, n_k, d_v)
    s = torch.matmul(qf, kf.transpose(1, 2)) * p.scale  # (heads_q, n_q, n_k)
    # The row maximum, with a -inf column so that n_k = 0 has one; that row's is taken as 0, so the
    # weights are empty there, never exp(-inf + inf).
    m = F.pad(s, (0, 1), value=float("-inf")).amax(-1, keepdim=True).detach()
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    den = e.sum(-1, keepdim=True)
    o = torch.matmul(e, vf) / torch.where(den == 0, torch.ones_like(den), den)
    lse = (m + torch.log(den)).squeeze(-1)  # log(0) = -inf for a sequence without keys
    return o.transpose(0, 1), lse


def forward(q, k, v, p, narrow=False):
    if not p.varlen:
        parts = [_attend(q[b].transpose(0, 1), _keys(k, p, b, None), _keys(v, p, b, None), p) for b in range(p.batch)]
        o = torch.stack([o_b.transpose(0, 1) for o_b, _ in parts])  # (batch, heads_q, n_q, d_v)
        return o.to(q.dtype), torch.stack([lse_b for _, lse_b in parts])  # (batch, heads_q, n_q)
    cu_q, cu_k = p.cu_seqlens_q.tolist(), p.cu_seqlens_k.tolist()
    parts = [_attend(q[cu_q[b]:cu_q[b + 1]], _keys(k, p, b, cu_k, narrow), _keys(v, p, b, cu_k, narrow), p)
             for b in range(p.batch)]
    o = torch.cat([o_b for o_b, _ in parts])  # (total_q, heads_q, d_v)
    return o.to(q.dtype), torch.cat([lse_b for _, lse_b in parts], dim=1)  # (heads_q, total_q)


_DECLARED = dict(device="cuda", dtypes=("F16", "BF16", "F32"), masks=("none",), variants=("varlen", "paged", "d_v"))
paged = flashcheck.Kernel(forward, name="torch_paged", **_DECLARED)
paged_int16 = flashcheck.Kernel(lambda q, k, v, p: forward(q, k, v, p, narrow=True), name="torch_paged_int16",
                                **_DECLARED)
