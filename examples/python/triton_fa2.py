"""A FlashAttention-2 kernel in Triton that takes only multiples of 64 and declares it, with its tiles
and arithmetic, through flashcheck.Kernel (docs/python.md, "Declarations").

Forward: one program per (query tile of BLOCK_M rows, batch x query head); the online softmax over key
tiles of BLOCK_N, scores scaled by scale * log2(e) and exponentiated with exp2, P rounded to the storage
type before P.V (tensor-core dots, fp32 accumulators), lse = ln 2 * (m + log2 l). Backward (deterministic,
no atomics): one program per key tile writes d_k, d_v (summing the GQA group's query heads in order),
one per query tile writes d_q; D = rowsum(d_o * o) first. Every length is a multiple of 64, so a 64-row or
64-key tile needs no boundary mask (a 128-row forward tile masks its rows past n_q): the declaration n_q = n_k = {"multiple_of": 64} is what makes that sound.

    python examples/python/triton_fa2.py [--cases 100] [--law ID] [--max-n 1024]

needs torch and triton on a CUDA device (the H200 run: docs/python.md, "Examples")."""
import argparse
import math
import sys

import torch
import triton
import triton.language as tl

import flashcheck

LOG2E = 1.4426950408889634  # host side (the scale handed to the kernels)
# Inside @triton.jit a global must be a tl.constexpr.
LOG2E_C = tl.constexpr(1.4426950408889634)
LN2_C = tl.constexpr(0.6931471805599453)
CONFIGS = [{"block_m": 64, "block_n": 64}, {"block_m": 128, "block_n": 64}]
MASKS = {"none": 0, "causal_top_left": 1, "causal_bottom_right": 2}
# Triton fuses s * scale - m into one fma by default: the max's own exponent is then its product's rounding
# residual (up to half an ulp of a huge score, e.g. +-32 at 1e9), not 0, and P at the max lands in fp16's
# subnormals or past 1. Every launch turns the fusion off so P = exp2(s - max s) is exactly 1 at the max.
FP_FUSION = False


@triton.jit
def _finite_part(x):
    """x with its non-finite entries (NaN, +-inf) zeroed, and the mask of the finite ones."""
    finite = tl.abs(x.to(tl.float32)) < float("inf")  # false for NaN too
    return tl.where(finite, x, 0.0).to(x.dtype), finite


# NaN blast radius (flashcheck's nan_blast law; docs/SEMANTICS.md): in a tile that straddles the causal
# mask, a pair (query i, key j) that is masked still meets inside the dot, its weight exactly 0, and
# 0 * NaN = NaN would poison a row (or a key's gradient) that never reads the NaN. The two helpers below
# dot the finite part of the operand and mark NaN exactly the outputs that do read a non-finite entry. A
# causal row sees a prefix of keys (j <= i + shift), so "reads one" is one comparison with the first
# non-finite key (or the last non-finite query) of each column: a reduction, no second dot.
@triton.jit
def _dot_keys(a, x, keys, rows, shift):
    """a @ x with x's rows the keys `keys` and the output's rows the queries `rows` (o = P V, d_q = dS K)."""
    xf, finite = _finite_part(x)
    out = tl.dot(a, xf)
    first = tl.min(tl.where(finite, 1 << 30, keys[:, None]), 0)  # (D): first non-finite key per column
    return tl.where(first[None, :] <= rows[:, None] + shift, float("nan"), out)


@triton.jit
def _dot_queries(a, x, rows, keys, shift):
    """a @ x with x's rows the queries `rows` and the output's rows the keys `keys` (d_k = dS^T Q)."""
    xf, finite = _finite_part(x)
    out = tl.dot(a, xf)
    last = tl.max(tl.where(finite, -(1 << 30), rows[:, None]), 0)  # (D): last non-finite query per column
    return tl.where(last[None, :] >= keys[:, None] - shift, float("nan"), out)


@triton.jit
def _fwd(Q, K, V, O, LSE, qk_scale, n_q, n_k, group, heads_q, heads_kv,
         s_qb, s_qh, s_qn, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn, s_ob, s_oh, s_on,
         MASK: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // heads_q
    h = bh % heads_q
    g = h // group
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < n_q  # a 128-row tile over 64k rows: its last half is past the end
    q = tl.load(Q + b * s_qb + h * s_qh + offs_m[:, None] * s_qn + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    shift = 0
    if MASK == 2:
        shift = n_k - n_q
    end = n_k
    if MASK != 0:  # the last key any row of this tile sees, + 1 (rounded up to a tile)
        end = tl.minimum(n_k, tl.maximum(0, (start_m + 1) * BLOCK_M + shift))
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + b * s_kb + g * s_kh + cols[:, None] * s_kn + offs_d[None, :])
        s = tl.dot(q, tl.trans(k)) * qk_scale  # log2-scaled scores
        if MASK != 0:
            s = tl.where(cols[None, :] <= offs_m[:, None] + shift, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet
        p = tl.math.exp2(s - m_safe[:, None])  # exact 0 at the max: no fma fusion (FP_FUSION below)
        alpha = tl.where(m_i == float("-inf"), 0.0, tl.math.exp2(m_i - m_safe))
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + b * s_vb + g * s_vh + cols[:, None] * s_vn + offs_d[None, :])
        if MASK != 0:
            pv = _dot_keys(p.to(v.dtype), v, cols, offs_m, shift)
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    inv = tl.where(l_i == 0.0, 0.0, 1.0 / l_i)
    o = acc * inv[:, None]
    tl.store(O + b * s_ob + h * s_oh + offs_m[:, None] * s_on + offs_d[None, :], o.to(O.dtype.element_ty),
             mask=row_ok[:, None])
    lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.math.log2(l_i)) * LN2_C)
    tl.store(LSE + bh * n_q + offs_m, lse, mask=row_ok)


@triton.jit
def _recompute_p(s, lse2):
    """P = exp2(s - lse2) from the saved lse. lse went through fp32 twice (ln 2 on the way out, log2 e on the
    way back): at huge scores s - lse2 is off by many units either way, so the exponent is clamped at 0
    (P <= 1, as every softmax weight is; a NaN stays NaN). A row that saw no key (lse = -inf) has P = 0."""
    x = s - lse2[:, None]
    return tl.where(lse2[:, None] == float("-inf"), 0.0, tl.math.exp2(tl.where(x > 0.0, 0.0, x)))


@triton.jit
def _bwd_pre(O, DO, DELTA, n_q, heads_q, s_ob, s_oh, s_on, D: tl.constexpr, BLOCK_M: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // heads_q
    h = bh % heads_q
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    at = b * s_ob + h * s_oh + offs_m[:, None] * s_on + offs_d[None, :]
    o = tl.load(O + at).to(tl.float32)
    do = tl.load(DO + at).to(tl.float32)
    tl.store(DELTA + bh * n_q + offs_m, tl.sum(o * do, 1))


@triton.jit
def _bwd_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV, sm_scale, qk_scale, n_q, n_k, group, heads_q, heads_kv,
              s_qb, s_qh, s_qn, s_kb, s_kh, s_kn, MASK: tl.constexpr, D: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_n = tl.program_id(0)
    bg = tl.program_id(1)
    b = bg // heads_kv
    g = bg % heads_kv
    cols = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    kv_at = b * s_kb + g * s_kh + cols[:, None] * s_kn + offs_d[None, :]
    k = tl.load(K + kv_at)
    v = tl.load(V + kv_at)
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    shift = 0
    if MASK == 2:
        shift = n_k - n_q
    for hh in range(0, group):
        h = g * group + hh
        bh = b * heads_q + h
        for start_m in range(0, n_q, BLOCK_M):
            rows = start_m + tl.arange(0, BLOCK_M)
            q_at = b * s_qb + h * s_qh + rows[:, None] * s_qn + offs_d[None, :]
            q = tl.load(Q + q_at)
            do = tl.load(DO + q_at)
            lse2 = tl.load(LSE + bh * n_q + rows) * LOG2E_C
            delta = tl.load(DELTA + bh * n_q + rows)
            s = tl.dot(q, tl.trans(k)) * qk_scale
            p = _recompute_p(s, lse2)
            if MASK != 0:
                p = tl.where(cols[None, :] <= rows[:, None] + shift, p, 0.0)
            dv += tl.dot(tl.trans(p.to(do.dtype)), do)
            dp = tl.dot(do, tl.trans(v))
            # 0 where P is 0: a masked pair's dS must not carry a poisoned row's NaN delta (0 * NaN) into d_k
            ds = tl.where(p == 0.0, 0.0, p * (dp - delta[:, None]))
            if MASK != 0:  # nor dS = 0 times a poisoned q row that cannot see this key
                dk += _dot_queries(tl.trans(ds.to(q.dtype)), q, rows, cols, shift)
            else:
                dk += tl.dot(tl.trans(ds.to(q.dtype)), q)
    tl.store(DK + kv_at, (dk * sm_scale).to(DK.dtype.element_ty))
    tl.store(DV + kv_at, dv.to(DV.dtype.element_ty))


@triton.jit
def _bwd_dq(Q, K, V, DO, LSE, DELTA, DQ, sm_scale, qk_scale, n_q, n_k, group, heads_q, heads_kv,
            s_qb, s_qh, s_qn, s_kb, s_kh, s_kn, MASK: tl.constexpr, D: tl.constexpr,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // heads_q
    h = bh % heads_q
    g = h // group
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q_at = b * s_qb + h * s_qh + rows[:, None] * s_qn + offs_d[None, :]
    q = tl.load(Q + q_at)
    do = tl.load(DO + q_at)
    lse2 = tl.load(LSE + bh * n_q + rows) * LOG2E_C
    delta = tl.load(DELTA + bh * n_q + rows)
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    shift = 0
    if MASK == 2:
        shift = n_k - n_q
    for start_n in range(0, n_k, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        kv_at = b * s_kb + g * s_kh + cols[:, None] * s_kn + offs_d[None, :]
        k = tl.load(K + kv_at)
        v = tl.load(V + kv_at)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        p = _recompute_p(s, lse2)
        if MASK != 0:
            p = tl.where(cols[None, :] <= rows[:, None] + shift, p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = tl.where(p == 0.0, 0.0, p * (dp - delta[:, None]))
        if MASK != 0:  # dS = 0 times a poisoned key a row cannot see must not reach its d_q
            dq += _dot_keys(ds.to(k.dtype), k, cols, rows, shift)
        else:
            dq += tl.dot(ds.to(k.dtype), k)
    tl.store(DQ + q_at, (dq * sm_scale).to(DQ.dtype.element_ty))


def _strides(t):
    return t.stride(0), t.stride(1), t.stride(2)


def forward(q, k, v, p):
    cfg = CONFIGS[p.config]
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty_like(q)
    lse = torch.empty((p.batch, p.heads_q, p.n_q), device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(p.n_q, cfg["block_m"]), p.batch * p.heads_q)
    _fwd[grid](q, k, v, o, lse, p.scale * LOG2E, p.n_q, p.n_k, p.gqa_group, p.heads_q, p.heads_kv,
               *_strides(q), *_strides(k), *_strides(v), *_strides(o),
               MASK=MASKS[p.mask], D=p.d, BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], num_warps=4,
               enable_fp_fusion=FP_FUSION)
    return o, lse


def backward(q, k, v, o, lse, d_o, p):
    q, k, v, o, d_o = (t.contiguous() for t in (q, k, v, o, d_o))
    lse = lse.contiguous()
    delta = torch.empty_like(lse)
    bm = bn = 64
    _bwd_pre[(p.n_q // bm, p.batch * p.heads_q)](o, d_o, delta, p.n_q, p.heads_q, *_strides(o), D=p.d, BLOCK_M=bm,
                                                  enable_fp_fusion=FP_FUSION)
    d_q, d_k, d_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    args = (p.scale, p.scale * LOG2E, p.n_q, p.n_k, p.gqa_group, p.heads_q, p.heads_kv, *_strides(q), *_strides(k))
    _bwd_dkdv[(p.n_k // bn, p.batch * p.heads_kv)](q, k, v, d_o, lse, delta, d_k, d_v, *args,
                                                   MASK=MASKS[p.mask], D=p.d, BLOCK_M=bm, BLOCK_N=bn, num_warps=4,
                                                   enable_fp_fusion=FP_FUSION)
    _bwd_dq[(p.n_q // bm, p.batch * p.heads_q)](q, k, v, d_o, lse, delta, d_q, *args,
                                                MASK=MASKS[p.mask], D=p.d, BLOCK_M=bm, BLOCK_N=bn, num_warps=4,
                                                enable_fp_fusion=FP_FUSION)
    return d_q, d_k, d_v


KERNEL = flashcheck.Kernel(
    forward, backward, name="triton_fa2", device="cuda", dtypes=["F16", "BF16"], head_dims=[32, 64, 128],
    masks=list(MASKS), contiguous=True,
    n_q={"multiple_of": 64}, n_k={"multiple_of": 64},
    arithmetic={"summation": "tensor_core", "block_m": 64, "block_n": 64},
    backward_reduction="deterministic", configs=CONFIGS)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--law")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--max-n", type=int, default=1024)
    ap.add_argument("--shape-buckets", action="store_true", help="unused here: every shape is a multiple of 64")
    a = ap.parse_args(argv)
    result = flashcheck.check(KERNEL, cases=a.cases, law=a.law, seed=a.seed, max_n=a.max_n)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
