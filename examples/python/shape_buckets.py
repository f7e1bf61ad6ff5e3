"""The padded shapes a compiled kernel sees (pure Python, no torch: unit-tested without a GPU).

torch.compile specialises a graph on what it cannot keep symbolic: FlexAttention's BlockMask carries its
sequence lengths as Python ints, and sizes 0 and 1 are always specialised. An adapter that pads every call
up to a few buckets compiles once per bucket instead of once per shape (flex_attention.py says why the
padding changes no real row's result)."""
import os


def bucket(n, floor):
    """The smallest power of two >= max(n, floor); floor a power of two."""
    if floor < 1 or floor & (floor - 1):
        raise ValueError("floor must be a power of two, got %r" % floor)
    size = floor
    while size < n:
        size *= 2
    return size


def padded_shape(batch, heads_q, heads_kv, n_q, n_k, floor):
    """(batch', heads_q', heads_kv', n') of the padded call: one square sequence bucket for queries and
    keys (n' >= n_q, n_k), batch and heads_kv at least 2 (never the specialised size 1), heads_q' =
    group * heads_kv' so that query head h still reads key head h // group."""
    if heads_kv < 1 or heads_q % heads_kv:
        raise ValueError("heads_q (%d) must be a multiple of heads_kv (%d)" % (heads_q, heads_kv))
    group = heads_q // heads_kv
    heads_kv2 = max(heads_kv, 2)
    return max(batch, 2), group * heads_kv2, heads_kv2, bucket(max(n_q, n_k, 1), floor)


def dense_mask_elements(batch, heads_q, heads_kv, n_q, n_k, floor, per_head=True):
    """Elements of the dense (n', n') mask of the padded call, times batch' x heads_q' when per_head: what
    FlexAttention's create_block_mask materialises (once, or per batch and head when a mask tensor can
    differ between them), and the size of the masked adapter's dense tensors (flex_attention.py)."""
    b, h, _, n = padded_shape(batch, heads_q, heads_kv, n_q, n_k, floor)
    return (b * h if per_head else 1) * n * n


def floor_from_env(name="FC_FLEX_MIN_BUCKET", default=1024):
    value = int(os.environ.get(name, default))
    bucket(1, value)  # a power of two, or ValueError
    return value
