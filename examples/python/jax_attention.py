"""jax.nn.dot_product_attention as flashcheck kernels, implementation="cudnn" and "xla". JAX's layout is
(batch, seq, heads, dim), so q, k, v are swapped into it and o back; is_causal is the top-left
alignment; the backward is jax.vjp. JAX imports the suite's tensors through DLPack, which it accepts
compact only (contiguous=True: strided cases are declined).

    python -m flashcheck check jax_attention:cudnn
"""
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with the suite

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import flashcheck  # noqa: E402


def _dpa(implementation):
    def forward(q, k, v, p):
        qt, kt, vt = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))
        o = jax.nn.dot_product_attention(qt, kt, vt, scale=p.scale, is_causal=p.is_causal,
                                         implementation=implementation)
        return jnp.swapaxes(o, 1, 2)

    cudnn = implementation == "cudnn"
    return flashcheck.Kernel(forward, name="jax_" + implementation, device="cuda", framework="jax",
                             dtypes=("F16", "BF16") if cudnn else ("F16", "BF16", "F32"),
                             masks=("none", "causal_top_left"), writes_lse=False, contiguous=True,
                             head_dims=range(8, 129, 8) if cudnn else None)


cudnn = _dpa("cudnn")
xla = _dpa("xla")
