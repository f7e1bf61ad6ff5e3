"""Attention in plain Python (no numpy, no torch) for the bridge's tests: a correct kernel, and kernels
that are wrong in the ways a Python callable can be (a planted bug, an exception, a wrong shape or
dtype, NaN, a crash, a hang). Tensors are flashcheck.HostViews; outputs are nested lists."""
import ctypes
import math
import operator
import time

import flashcheck


def _visible(p, i):
    """How many keys row i sees (a prefix)."""
    last = p.n_k - 1
    if p.mask == "causal_top_left":
        last = i
    elif p.mask == "causal_bottom_right":
        last = i + p.n_k - p.n_q
    return max(0, min(last, p.n_k - 1) + 1)


def _rows(p, Q, K, V, b, h, i, off_by_one=False):
    """P_ij over the visible keys, o_i and lse_i of one row, in double."""
    hk = h // (p.heads_q // p.heads_kv)
    n = _visible(p, i) - (1 if off_by_one and p.mask != "none" else 0)
    s = [p.scale * sum(map(operator.mul, Q[b][h][i], K[b][hk][j])) for j in range(max(n, 0))]
    m = -math.inf
    for x in s:  # NaN never becomes the max: it poisons through its own weight
        if x > m:
            m = x
    if m == -math.inf:
        return [], [0.0] * p.d_v, -math.inf
    w = [math.exp(x - m) for x in s]
    l = sum(w)
    w = [x / l for x in w]
    o = [sum(w[j] * V[b][hk][j][c] for j in range(len(w))) for c in range(p.d_v)]
    return w, o, m + math.log(l)


def _forward(q, k, v, p, off_by_one=False):
    Q, K, V = q.tolist(), k.tolist(), v.tolist()
    o = [[[None] * p.n_q for _ in range(p.heads_q)] for _ in range(p.batch)]
    lse = [[[None] * p.n_q for _ in range(p.heads_q)] for _ in range(p.batch)]
    for b in range(p.batch):
        for h in range(p.heads_q):
            for i in range(p.n_q):
                _, o[b][h][i], lse[b][h][i] = _rows(p, Q, K, V, b, h, i, off_by_one)
    return o, lse


def attention(q, k, v, p):
    return _forward(q, k, v, p)


def attention_backward(q, k, v, o, lse, d_o, p):
    """D_i = d_o_i.o_i, dS = P(d_o v^T - D), d_q = scale dS K, d_k = scale dS^T Q, d_v = P^T d_o."""
    Q, K, V, dO = q.tolist(), k.tolist(), v.tolist(), d_o.tolist()
    zeros = lambda heads, n, w: [[[[0.0] * w for _ in range(n)] for _ in range(heads)] for _ in range(p.batch)]
    dq, dk, dv = zeros(p.heads_q, p.n_q, p.d), zeros(p.heads_kv, p.n_k, p.d), zeros(p.heads_kv, p.n_k, p.d_v)
    for b in range(p.batch):
        for h in range(p.heads_q):
            hk = h // (p.heads_q // p.heads_kv)
            for i in range(p.n_q):
                w, oi, _ = _rows(p, Q, K, V, b, h, i)
                g = dO[b][h][i]
                D = sum(map(operator.mul, g, oi))
                for j, pj in enumerate(w):
                    ds = pj * (sum(map(operator.mul, g, V[b][hk][j])) - D)
                    for c in range(p.d_v):
                        dv[b][hk][j][c] += pj * g[c]
                    for c in range(p.d):
                        dq[b][h][i][c] += p.scale * ds * K[b][hk][j][c]
                        dk[b][hk][j][c] += p.scale * ds * Q[b][h][i][c]
    return dq, dk, dv


def _kernel(forward, **kw):
    kw.setdefault("backward", None)
    kw.setdefault("head_dims", range(1, 9))  # small heads: every law's cases stay quick in pure Python
    return flashcheck.Kernel(forward, device="cpu", framework="python", dtypes=("F16", "BF16", "F32", "F64"), **kw)


def causal_off_by_one(q, k, v, p):
    return _forward(q, k, v, p, off_by_one=True)


def raises(q, k, v, p):
    if p.n_k > 3:
        raise ValueError("n_k = %d is too long for me" % p.n_k)
    return attention(q, k, v, p)


def wrong_shape(q, k, v, p):
    o, lse = attention(q, k, v, p)
    return [row[:-1] for row in o] if p.n_k > 3 else o, lse  # drops a head


def nan_output(q, k, v, p):
    o, lse = attention(q, k, v, p)
    if p.n_k > 3:
        o[0][0][0][0] = math.nan
    return o, lse


def segfault(q, k, v, p):
    if p.n_k > 3:
        ctypes.string_at(8)  # reads address 8: SIGSEGV
    return attention(q, k, v, p)


def hangs(q, k, v, p):
    if p.n_k > 3:
        time.sleep(3600)
    return attention(q, k, v, p)


correct = _kernel(attention, backward=attention_backward, name="py_attention")
any_head_dim = _kernel(attention, backward=attention_backward, name="py_attention", head_dims=None)  # the audit's
forward_only = _kernel(attention, name="py_attention_fwd")
planted_bug = _kernel(causal_off_by_one, name="py_causal_off_by_one")
raising = _kernel(raises, name="py_raises")
misshapen = _kernel(wrong_shape, name="py_wrong_shape")
nan_kernel = _kernel(nan_output, name="py_nan")
crashing = _kernel(segfault, name="py_segfault")
hanging = _kernel(hangs, name="py_hangs")


def attention_o_only(q, k, v, p):
    return attention(q, k, v, p)[0]


no_lse = _kernel(attention_o_only, name="py_no_lse", writes_lse=False)  # lse left as the suite's NaN fill
