# torch's float64 attention (math backend) on the shapes of the GPU audit's long cases (docs/audit.md):
# b 1, h 1, n_q = n_k = N, forward + backward. The whole S of N = 131072 in float64 (137 GB) does not
# fit the GPU, so each problem runs in blocks of query rows (at most 2^28 scores a block), every block
# against all the keys it sees: o and d_q of a block are its own, d_k and d_v sum over the blocks
# (autograd accumulates them). Causal: bottom-right aligned and square, row i sees keys j <= i, so a
# block needs keys [0, its last row] and a boolean mask. Prints each shape's best of two timed runs and
# the sum over the audit's 16 long cases (each shape once per dtype, F16 and BF16).
import sys
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [  # (regime, N, d, causal)
    ("normal", 16384, 64, False), ("normal", 32768, 64, False), ("normal", 65536, 64, False),
    ("normal", 131072, 64, False), ("outliers", 16384, 128, False), ("outliers", 131072, 128, False),
    ("causal_bottom_right", 16384, 64, True), ("causal_bottom_right", 131072, 64, True),
]
dev = "cuda"


def run(n, d, causal):
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(1, 1, n, d, dtype=torch.float64, device=dev) for _ in range(4))
    kg, vg = k.clone().requires_grad_(True), v.clone().requires_grad_(True)
    rows = max(1, (1 << 28) // n)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        qb = q[:, :, r0:r1].clone().requires_grad_(True)
        keys = r1 if causal else n
        mask = None
        if causal:
            i = torch.arange(r0, r1, device=dev).view(-1, 1)
            mask = torch.arange(keys, device=dev).view(1, -1) <= i
        o = torch.nn.functional.scaled_dot_product_attention(qb, kg[:, :, :keys], vg[:, :, :keys], attn_mask=mask,
                                                             scale=d ** -0.5)
        o.backward(do[:, :, r0:r1])
        del o, qb, mask
    torch.cuda.synchronize()


total = 0.0
with sdpa_kernel(SDPBackend.MATH):
    run(1024, 64, True)  # CUDA's start, untimed
    for regime, n, d, causal in SHAPES:
        best = float("inf")
        for rep in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            run(n, d, causal)
            best = min(best, time.perf_counter() - t0)
        total += 2 * best
        print(f"torch float64 math SDPA {regime} N {n} d {d} fwd+bwd: {best:.3f} s", flush=True)
print(f"the 16 long cases (each shape for F16 and BF16): {total:.3f} s", flush=True)
sys.exit(0)
