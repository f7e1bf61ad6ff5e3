#!/usr/bin/env python3
"""Probe: does one non-finite element of q, k or v reach gradients outside its blast radius?

DESIGN §1: a NaN in q_i may poison row i only; a NaN in k_j or v_j only the rows that can see j. The
property suite's nan_blast law checks the forward (o, lse). This probe runs each CUDA backward on a
clean and a poisoned input (each with its own forward) and counts, per gradient, the rows outside the
radius that are not bit-identical: d_q rows that cannot see the poisoned key (or are not the poisoned
query), and d_k / d_v rows of keys no poisoned row can see.
Usage: python3 bench/nan_probe.py --lib .carry/libfcbench.so [--out probe.json]
"""
import argparse
import json

import torch

from bench_sdpa import Ours, visible_mask


def run(ours, kind, q, k, v, d_o, mask):
    if kind == "tiled":
        o, lse = ours.forward(q, k, v, mask, 0, (128, 64))
        return (o,) + ours.backward(q, k, v, o, lse, d_o, mask, (64, 64), False)
    o, lse = ours.forward(q, k, v, mask, 2, (128, 128))
    return (o,) + ours.backward(q, k, v, o, lse, d_o, mask, None, kind == "wgmma_det", wgmma=True)


def differs(a, b):  # per row (last dim reduced): not bit-identical
    return (a.view(torch.int16) != b.view(torch.int16)).any(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    ours = Ours(a.lib)
    torch.manual_seed(0)
    n, d, mask = 192, 64, "causal_top_left"
    mk = lambda: torch.randn(1, 1, n, d, device="cuda").to(torch.bfloat16)
    q, k, v, d_o = mk(), mk(), mk(), mk()
    vis = visible_mask(n, n, mask, "cuda")  # (i, j)
    rows = []
    for kind in ("tiled", "wgmma", "wgmma_det"):
        clean = run(ours, kind, q, k, v, d_o, mask)
        for name, pos in (("q", 20), ("k", 100), ("v", 100)):
            for val in (float("nan"), float("inf")):
                t = {"q": q, "k": k, "v": v}
                poisoned = {x: y.clone() for x, y in t.items()}
                poisoned[name][0, 0, pos, 3] = val
                got = run(ours, kind, poisoned["q"], poisoned["k"], poisoned["v"], d_o, mask)
                # rows of the radius: the poisoned query, or the queries that see the poisoned key
                r = torch.zeros(n, dtype=torch.bool, device="cuda")
                if name == "q":
                    r[pos] = True
                else:
                    r = vis[:, pos].clone()
                keys_seen = vis[r].any(0) if r.any() else torch.zeros(n, dtype=torch.bool, device="cuda")
                o_out = (differs(clean[0], got[0])[0, 0] & ~r).sum().item()
                dq_out = (differs(clean[1], got[1])[0, 0] & ~r).sum().item()
                dk_out = (differs(clean[2], got[2])[0, 0] & ~keys_seen).sum().item()
                dv_out = (differs(clean[3], got[3])[0, 0] & ~keys_seen).sum().item()
                row = dict(kernel=kind, poison=f"{name}[{pos}, 3] = {val}", o_rows_outside=o_out,
                           d_q_rows_outside=dq_out, d_k_rows_outside=dk_out, d_v_rows_outside=dv_out,
                           d_q_nan_rows_outside=(torch.isnan(got[1][0, 0].float()).any(-1) & ~r).sum().item())
                rows.append(row)
                print(json.dumps(row), flush=True)
    if a.out:
        json.dump(dict(n=n, d=d, mask=mask, dtype="bf16", rows=rows), open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
