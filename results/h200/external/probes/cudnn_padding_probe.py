"""jax_cudnn affine_v: does cuDNN under jax.nn honour key_value_seq_lengths (the adapter's odd-length padding)?"""
import numpy as np, jax, jax.numpy as jnp

def cudnn(q, k, v, scale):  # (B, T, N, H), (B, S, K, H); odd lengths padded by one zero row, as the adapter does
    B, T, S = q.shape[0], q.shape[1], k.shape[1]
    kw = {}
    if T % 2 or S % 2:
        kw = {"query_seq_lengths": jnp.full((B,), T, jnp.int32), "key_value_seq_lengths": jnp.full((B,), S, jnp.int32)}
        q = jnp.pad(q, ((0, 0), (0, T % 2), (0, 0), (0, 0)))
        k, v = (jnp.pad(x, ((0, 0), (0, S % 2), (0, 0), (0, 0))) for x in (k, v))
    return jax.nn.dot_product_attention(q, k, v, scale=scale, implementation="cudnn", **kw)[:, :T]

def run(T, S, N, K, H, dt, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(rng.standard_normal(s).astype(np.float32), dtype=dt) for s in ((1, T, N, H), (1, S, K, H), (1, S, K, H)))
    o_c = np.asarray(cudnn(q, k, v, H ** -0.5), np.float64)
    f = lambda x: np.asarray(x.astype(jnp.float32), np.float64)
    qr, kr, vr = f(q), np.repeat(f(k), N // K, axis=2), np.repeat(f(v), N // K, axis=2)
    s = np.einsum("btnd,bsnd->bnts", qr, kr) * H ** -0.5
    p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
    o_r = np.einsum("bnts,bsnd->btnd", p, vr)
    s2 = np.concatenate([s, np.zeros(s.shape[:-1] + (1,))], -1)  # the padded zero key visible
    p2 = np.exp(s2 - s2.max(-1, keepdims=True)); p2 /= p2.sum(-1, keepdims=True)
    o_pad = np.einsum("bnts,bsnd->btnd", p2[..., :-1], vr)
    print("T=%d S=%d N=%d K=%d H=%d %s: max|cudnn - ref| %.3g  max|cudnn - ref with the padded key visible| %.3g" % (
        T, S, N, K, H, jnp.dtype(dt).name, np.abs(o_c - o_r).max(), np.abs(o_c - o_pad).max()), flush=True)

for args in [(14, 33, 4, 2, 128), (14, 34, 4, 2, 128), (14, 33, 2, 2, 128), (14, 33, 4, 4, 128), (14, 33, 4, 2, 64),
             (1, 255, 2, 1, 8), (16, 33, 4, 2, 128), (14, 65, 4, 2, 128), (13, 33, 4, 2, 128)]:
    for dt in (jnp.bfloat16, jnp.float16):
        try:
            run(*args, dt)
        except Exception as ex:
            print(args, jnp.dtype(dt).name, "error", str(ex).splitlines()[0][:200], flush=True)
