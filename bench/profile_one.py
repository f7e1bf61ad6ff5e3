#!/usr/bin/env python3
"""One forward + backward of a CUDA kernel (default cuda_wgmma; also cuda_tiled's backward) on a
benchmark shape, for a profiler run: ncu --kernel-name regex:... python3 bench/profile_one.py --lib LIB"""
import argparse

import torch

from bench_sdpa import Ours

ap = argparse.ArgumentParser()
ap.add_argument("--lib", required=True)
ap.add_argument("--kernel", default="cuda_wgmma")
ap.add_argument("--n", type=int, default=4096)
ap.add_argument("--d", type=int, default=128)
ap.add_argument("--mask", default="none")
a = ap.parse_args()
ours = Ours(a.lib)
h, b = 2048 // a.d, max(1, 16384 // a.n)
mk = lambda: torch.randn(b, h, a.n, a.d, device="cuda", dtype=torch.bfloat16)
q, k, v, d_o = mk(), mk(), mk(), mk()
o, lse = ours.forward(q, k, v, a.mask, a.kernel)
ours.backward(q, k, v, o, lse, d_o, a.mask, a.kernel)
ours.backward(q, k, v, o, lse, d_o, a.mask, "cuda_tiled")
torch.cuda.synchronize()
