"""Attention with the variants of contract v2 in plain Python, for the bridge's variant tests: windows
(aligned per the contract), softcap, d_v != d and varlen batches, forward only; and a planted bug (the
window's left edge one key too wide). Tensors are flashcheck.HostViews; outputs are nested lists."""
import math

import flashcheck


def _keys(p, i, n_q, n_k, wider=0):
    """[begin, end) of the keys query i sees: the causal mask of its alignment and the window."""
    a = i if p.mask == "causal_top_left" else i + n_k - n_q  # the aligned row i'
    begin, end = 0, n_k
    if p.mask != "none":
        end = min(end, a + 1)
    if p.window_right >= 0:
        end = min(end, a + p.window_right + 1)
    if p.window_left >= 0:
        begin = max(begin, a - p.window_left - wider)
    return begin, max(end, begin)


def _bias(p, b, h, i, j, heads_wrong=False):
    """The mask tensor's and block mask's effect on key j of row i (dense): -inf hidden, else the
    additive value (0 without one). heads_wrong: a per-head mask read at head 0 (the planted bug)."""
    def at(t, shape, r, c):
        bm, hm = shape[0], shape[1]
        return t[b if bm > 1 else 0, 0 if heads_wrong or hm == 1 else h, r, c]
    if p.block_mask is not None and not at(p.block_mask, p.block_mask_shape, i // p.block_q, j // p.block_k):
        return -math.inf
    if p.mask_tensor is None:
        return 0.0
    x = at(p.mask_tensor, p.mask_shape, i, j)
    if p.mask_kind == "bool":
        return 0.0 if x else -math.inf
    return x


def _row(p, qi, keys, values, begin, end, bias=None):
    """o_i and lse_i over keys[begin:end] (those bias(j) does not hide), in double."""
    s, live = [], []
    for j in range(begin, end):
        add = bias(j) if bias else 0.0
        if add == -math.inf:
            continue  # hidden: no weight, its k and v not read
        x = p.scale * sum(a * b for a, b in zip(qi, keys[j]))
        s.append((p.softcap * math.tanh(x / p.softcap) if p.softcap > 0 else x) + add)
        live.append(j)
    if not s:
        return [0.0] * p.d_v, -math.inf
    m = max(s)
    w = [math.exp(x - m) for x in s]
    total = sum(w)
    o = [sum(w[t] * values[live[t]][c] for t in range(len(w))) / total for c in range(p.d_v)]
    return o, m + math.log(total)


def _attention(q, k, v, p, wider=0, heads_wrong=False):
    Q, K, V = q.tolist(), k.tolist(), v.tolist()
    group = p.heads_q // p.heads_kv
    if p.varlen:  # q (total_q, heads_q, d), k, v (total_k, heads_kv, d); lse (heads_q, total_q)
        cu_q, cu_k = p.cu_seqlens_q.tolist(), p.cu_seqlens_k.tolist()
        o = [[None] * p.heads_q for _ in range(len(Q))]
        lse = [[None] * len(Q) for _ in range(p.heads_q)]
        for b in range(p.batch):
            n_q, n_k = cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]
            for h in range(p.heads_q):
                keys = [K[cu_k[b] + j][h // group] for j in range(n_k)]
                values = [V[cu_k[b] + j][h // group] for j in range(n_k)]
                for i in range(n_q):
                    begin, end = _keys(p, i, n_q, n_k, wider)
                    o[cu_q[b] + i][h], lse[h][cu_q[b] + i] = _row(p, Q[cu_q[b] + i][h], keys, values, begin, end)
        return o, lse
    o = [[[None] * p.n_q for _ in range(p.heads_q)] for _ in range(p.batch)]
    lse = [[[None] * p.n_q for _ in range(p.heads_q)] for _ in range(p.batch)]
    for b in range(p.batch):
        for h in range(p.heads_q):
            for i in range(p.n_q):
                begin, end = _keys(p, i, p.n_q, p.n_k, wider)
                bias = None
                if p.mask_kind != "none" or p.block_q > 0:
                    bias = lambda j, b=b, h=h, i=i: _bias(p, b, h, i, j, heads_wrong)
                o[b][h][i], lse[b][h][i] = _row(p, Q[b][h][i], K[b][h // group], V[b][h // group], begin, end,
                                                bias)
    return o, lse


def attention(q, k, v, p):
    return _attention(q, k, v, p)


def window_too_wide(q, k, v, p):
    return _attention(q, k, v, p, wider=1)


def _kernel(forward, name, variants=("window", "softcap", "d_v", "varlen")):
    return flashcheck.Kernel(forward, backward=None, name=name, device="cpu", framework="python",
                             dtypes=("F16", "F32"), head_dims=range(1, 9), variants=variants)


correct = _kernel(attention, "py_variants")
planted_window = _kernel(window_too_wide, "py_window_too_wide", variants=("window",))


def _causal_window_only(p):
    return p.window_left < 0 and p.window_right < 0 or p.mask != "none"


# A window only under a causal mask (as JAX's cuDNN path): the probe finds the variant under that mask.
causal_windows = flashcheck.Kernel(attention, backward=None, name="py_causal_windows", device="cpu",
                                   framework="python", dtypes=("F16", "F32"), head_dims=range(1, 9),
                                   variants=("window",), supports=_causal_window_only)


def _compact(shape, strides):
    """Row-major strides, axes of length 1 aside (what DLPack importers such as JAX's take)."""
    want = 1
    for n, stride in reversed(list(zip(shape, strides))):
        if n > 1 and stride != want:
            return False
        want *= n
    return True


def compact_only_attention(q, k, v, p):
    for t in "qkvo":
        if not _compact(p.shapes[t], p.strides[t]):
            raise ValueError("Only DLPack tensors with trivial (compact) striding are supported: %s %s %s"
                             % (t, p.shapes[t], p.strides[t]))
    return _attention(q, k, v, p)


# Compact tensors only, as the JAX adapters declare (contiguous=True): no law may send it another.
compact_varlen = flashcheck.Kernel(compact_only_attention, backward=None, name="py_compact_varlen", device="cpu",
                                   framework="python", dtypes=("F16", "F32"), head_dims=range(1, 9),
                                   variants=("varlen",), contiguous=True)


def _small_d_only(p):
    """The start-up probe is told yes (as a supports() too costly to answer there would); a case is
    asked again, with probing False, and declined above d = 4."""
    return p.probing or p.d <= 4


def small_d_attention(q, k, v, p):
    if p.d > 4 or p.probing:
        raise ValueError("a case supports() declines reached forward (d = %d)" % p.d)
    return _attention(q, k, v, p)


probed_optimistically = flashcheck.Kernel(small_d_attention, backward=None, name="py_probed_optimistically",
                                          device="cpu", framework="python", dtypes=("F32",), head_dims=range(1, 9),
                                          supports=_small_d_only)


def mask_heads_wrong(q, k, v, p):
    return _attention(q, k, v, p, heads_wrong=True)


MASKS = ("mask_bool", "mask_additive", "block_mask")
masked = _kernel(attention, "py_masks", variants=MASKS)
planted_mask_heads = _kernel(mask_heads_wrong, "py_mask_heads_wrong", variants=MASKS)
