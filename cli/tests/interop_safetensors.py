#!/usr/bin/env python3
"""Interop check (a tool run, not a ctest: needs torch + safetensors, as on the GPU image).

Files written by the Python safetensors library are read by `flashcheck reference`, and the F64 file
it writes is read back by the Python library; o and lse are compared with PyTorch's own float64
attention (SDPA, top-left causal; logsumexp of the scores). Prints one line per case; exits 1 when
a file does not load or the float64 results disagree beyond fp64 rounding (1e-12, versus the
|o| <= max|v| <= 2 scale of these inputs).

usage: interop_safetensors.py path/to/flashcheck OUTDIR
"""
import math
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file

flashcheck, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
failed = False
for dtype, name in [(torch.float16, "F16"), (torch.bfloat16, "BF16"), (torch.float32, "F32")]:
    for mask in ["none", "causal_top_left"]:
        b, h, n_q, n_k, d = 2, 3, 17, 17, 16
        q, k, v, d_o = (torch.randn(b, h, n, d).to(dtype) for n in (n_q, n_k, n_k, n_q))
        src, dst = f"{out}/in_{name}_{mask}.safetensors", f"{out}/ref_{name}_{mask}.safetensors"
        save_file({"q": q, "k": k, "v": v, "d_o": d_o}, src, metadata={"mask": mask, "scale": "0.3"})
        r = subprocess.run([flashcheck, "reference", "--inputs", src, "--out", dst], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{name} {mask}: flashcheck exit {r.returncode}: {r.stderr.strip()}")
            failed = True
            continue
        ref = load_file(dst)
        q64, k64, v64 = (x.double() for x in (q, k, v))
        causal = mask == "causal_top_left"
        o = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=causal, scale=0.3)
        s = 0.3 * q64 @ k64.transpose(-1, -2)
        if causal:
            s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool).triu(1), -math.inf)
        lse = torch.logsumexp(s, dim=-1)
        ok_keys = sorted(ref) == ["d_k", "d_q", "d_v", "lse", "o"] and all(t.dtype == torch.float64 for t in ref.values())
        do = (ref["o"] - o).abs().max().item()
        dl = (ref["lse"] - lse).abs().max().item()
        ok = ok_keys and do <= 1e-12 and dl <= 1e-12
        failed |= not ok
        print(f"{name} {mask}: keys/dtypes {'ok' if ok_keys else 'BAD'}  max|o - sdpa64| {do:.2e}  max|lse - logsumexp64| {dl:.2e}  {'ok' if ok else 'FAIL'}")
sys.exit(1 if failed else 0)
