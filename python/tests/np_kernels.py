"""Attention in NumPy for the bridge's tests: the suite's host tensors arrive as read-only NumPy arrays
(DLPack, no copy); o and lse go back through DLPack. A correct kernel with a backward given as a
second callable, and one whose lse is in base 2 (a planted bug). Computed in float64, rounded once to
the storage dtype."""
import numpy as np

import flashcheck


def _mask(p):
    """(n_q, n_k) visibility: True where row i sees key j."""
    i = np.arange(p.n_q)[:, None]
    j = np.arange(p.n_k)[None, :]
    if p.mask == "causal_top_left":
        return j <= i
    if p.mask == "causal_bottom_right":
        return j <= i + (p.n_k - p.n_q)
    return np.ones((p.n_q, p.n_k), dtype=bool)


def _probs(q, k, p):
    """P (batch, heads_q, n_q, n_k) and lse (batch, heads_q, n_q) in float64; fully masked rows: P = 0,
    lse = -inf."""
    group = p.heads_q // p.heads_kv
    kk = np.repeat(np.asarray(k, dtype=np.float64), group, axis=1)  # (batch, heads_q, n_k, d)
    s = p.scale * np.einsum("bhid,bhjd->bhij", np.asarray(q, dtype=np.float64), kk)
    s = np.where(_mask(p), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)  # a fully masked row has max -inf: no shift, all weights 0
    w = np.exp(s - m_safe)
    l = w.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        P = np.where(l > 0, w / np.where(l > 0, l, 1.0), 0.0)
        lse = np.where(l[..., 0] > 0, m_safe[..., 0] + np.log(np.where(l > 0, l, 1.0)[..., 0]), -np.inf)
    return P, lse


def _v(v, p):
    return np.repeat(np.asarray(v, dtype=np.float64), p.heads_q // p.heads_kv, axis=1)


# Sums over visible pairs only: a NaN in a key or row the other side cannot see must not reach it
# (a matrix product would give 0 * NaN = NaN).
def _rows_times(w, x, mask):
    """sum_j w_ij x_j over the keys row i sees: (batch, heads, n_q, c)."""
    return np.where(mask[:, :, None], w[..., :, :, None] * x[..., None, :, :], 0.0).sum(axis=-2)


def _cols_times(w, y, mask):
    """sum_i w_ij y_i over the rows that see key j: (batch, heads, n_k, c)."""
    return np.where(mask[:, :, None], w[..., :, :, None] * y[..., :, None, :], 0.0).sum(axis=-3)


def attention(q, k, v, p):
    P, lse = _probs(q, k, p)
    with np.errstate(invalid="ignore"):
        o = _rows_times(P, _v(v, p), _mask(p))
    return o.astype(q.dtype), lse.astype(np.float32)


def _backward(q, k, v, o, d_o, p, rounded):
    """D_i = d_o_i . o_i, dS = P (d_o V^T - D), d_q = scale dS K, d_k = scale dS^T Q, d_v = P^T d_o
    (summed over each kv head's group). rounded: a tensor-core backward's roundings, P and dS rounded
    to the storage type (subnormals kept) before the GEMMs that read them and D from the stored o;
    otherwise float64 throughout, o recomputed."""
    group = p.heads_q // p.heads_kv
    mask = _mask(p)
    P, _ = _probs(q, k, p)
    V, dO = _v(v, p), np.asarray(d_o, dtype=np.float64)
    K = np.repeat(np.asarray(k, dtype=np.float64), group, axis=1)
    with np.errstate(invalid="ignore"):
        O = np.asarray(o, dtype=np.float64) if rounded else _rows_times(P, V, mask)
        D = (dO * O).sum(axis=-1, keepdims=True)
        dS = np.where(mask, P * (np.einsum("bhic,bhjc->bhij", dO, V) - D), 0.0)
        if rounded:
            dS, P = dS.astype(q.dtype).astype(np.float64), P.astype(q.dtype).astype(np.float64)
        d_q = p.scale * _rows_times(dS, K, mask)
        d_k = p.scale * _cols_times(dS, np.asarray(q, dtype=np.float64), mask)
        d_v = _cols_times(P, dO, mask)

    def fold(x):  # (batch, heads_q, n, w) -> (batch, heads_kv, n, w): a kv head's gradient sums its group
        b, _, n, w = x.shape
        return x.reshape(b, p.heads_kv, group, n, w).sum(axis=2)

    return d_q.astype(q.dtype), fold(d_k).astype(k.dtype), fold(d_v).astype(v.dtype)


def attention_backward(q, k, v, o, lse, d_o, p):
    return _backward(q, k, v, o, d_o, p, rounded=False)


def backward_rounded_operands(q, k, v, o, lse, d_o, p):
    return _backward(q, k, v, o, d_o, p, rounded=True)


def lse_base2(q, k, v, p):
    o, lse = attention(q, k, v, p)
    return o, (lse / np.log(2.0)).astype(np.float32)  # the planted bug: log2 where the contract is ln


correct = flashcheck.Kernel(attention, attention_backward, name="np_attention", framework="numpy")
planted_bug = flashcheck.Kernel(lse_base2, None, name="np_lse_base2", framework="numpy")
rounded_operands = flashcheck.Kernel(attention, backward_rounded_operands, name="np_rounded_operands",
                                     framework="numpy", dtypes=("F16",))
