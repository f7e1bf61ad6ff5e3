#!/usr/bin/env python3
"""cuda_wgmma / cuda_tiled / cuda_naive against PyTorch SDPA (flash and cuDNN backends) in one process, on the
same tensors and stream. Three jobs, each writing JSON:
  check   correctness vs float64 attention (relative Frobenius error, next to torch flash's own)
  perf    TFLOP/s, fwd and fwd+bwd, with ratios to torch flash and cuDNN
  memory  peak extra device memory vs N (d = 128) for cuda_tiled and cuda_naive
FLOPs: 4 N^2 d b h forward (halved for causal), fwd+bwd = 3.5x forward (the FlashAttention papers').
Timing: CUDA events around each call, warm-up first, median of repeats; inputs never zeros.
"""
import argparse, ctypes, json, math, os, statistics, subprocess, sys, time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

DT = {"f16": (torch.float16, 1), "bf16": (torch.bfloat16, 2)}
MASK = {"none": 0, "causal_top_left": 1, "causal_bottom_right": 2}


class Ours:
    """Our CUDA kernels through libfcbench (bench/bench_api.cpp), addressed by registry name."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.fcb_workspace_bytes.restype = ctypes.c_size_t
        self.lib.fcb_kernel_name.restype = ctypes.c_char_p
        self.kernels = []
        while (name := self.lib.fcb_kernel_name(len(self.kernels))) is not None:
            self.kernels.append(name.decode())

    def tiles(self, kernel, d, backward=False):
        """The kernel's forward (or backward) tiles for head dim d, its default first."""
        buf = (ctypes.c_int * 64)()
        n = self.lib.fcb_tiles(kernel.encode(), int(backward), d, buf, 32)
        if n < 0:
            raise ValueError(f"no CUDA kernel named {kernel}")
        return [(buf[2 * i], buf[2 * i + 1]) for i in range(min(n, 32))]

    def _shape(self, q, k):
        b, hq, nq, d = q.shape
        return [b, hq, k.shape[1], nq, k.shape[2], d]

    def workspace(self, kernel, backward, q, k):
        dt = DT_ID[q.dtype]
        nb = self.lib.fcb_workspace_bytes(kernel.encode(), int(backward), *self._shape(q, k), dt)
        return torch.empty(max(nb, 1), dtype=torch.uint8, device=q.device)

    def forward(self, q, k, v, mask, kernel="cuda_tiled", tile=(0, 0), ws=None):
        o = torch.empty_like(q)
        lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
        if ws is None:
            ws = self.workspace(kernel, False, q, k)
        P = ctypes.c_void_p
        rc = self.lib.fcb_forward(kernel.encode(), *self._shape(q, k), DT_ID[q.dtype], MASK[mask],
                                  ctypes.c_double(q.shape[-1] ** -0.5), tile[0], tile[1], P(q.data_ptr()),
                                  P(k.data_ptr()), P(v.data_ptr()), P(o.data_ptr()), P(lse.data_ptr()),
                                  P(ws.data_ptr()), P(torch.cuda.current_stream().cuda_stream))
        if rc:
            raise RuntimeError(f"fcb_forward {kernel} {tile}: cuda error {rc}")
        return o, lse

    def backward(self, q, k, v, o, lse, d_o, mask, kernel="cuda_tiled", tile=(0, 0), deterministic=False, ws=None):
        if ws is None:
            ws = self.workspace(kernel, True, q, k)
        d_q, d_k, d_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        P = ctypes.c_void_p
        tensors = [P(t.data_ptr()) for t in (q, k, v, o, d_o, lse, d_q, d_k, d_v, ws)]
        rc = self.lib.fcb_backward(kernel.encode(), *self._shape(q, k), DT_ID[q.dtype], MASK[mask],
                                   ctypes.c_double(q.shape[-1] ** -0.5), tile[0], tile[1], int(deterministic),
                                   *tensors, P(torch.cuda.current_stream().cuda_stream))
        if rc:
            raise RuntimeError(f"fcb_backward {kernel} {tile}: cuda error {rc}")
        return d_q, d_k, d_v


DT_ID = {torch.float16: 1, torch.bfloat16: 2}
SHORT = {"cuda_tiled": "tiled", "cuda_wgmma": "wgmma", "cuda_naive": "naive"}  # JSON key prefixes


def visible_mask(n_q, n_k, mask, device):
    i = torch.arange(n_q, device=device)[:, None]
    j = torch.arange(n_k, device=device)[None, :]
    if mask == "none":
        return torch.ones(n_q, n_k, dtype=torch.bool, device=device)
    off = 0 if mask == "causal_top_left" else n_k - n_q
    return j <= i + off


def reference(q, k, v, d_o, mask):
    """float64 attention with autograd; empty rows give o = 0, lse = -inf, zero gradients."""
    q, k, v = (t.double().detach().requires_grad_() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = (q @ kk.transpose(-1, -2)) * q.shape[-1] ** -0.5
    vis = visible_mask(q.shape[2], k.shape[2], mask, q.device)
    s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
    o = p @ vv
    o.backward(d_o.double())
    return o.detach(), lse.detach(), q.grad, k.grad, v.grad


def rel(a, b):
    return ((a.double() - b).norm() / b.norm().clamp_min(1e-300)).item()


def job_check(ours, wgmma):
    out = []
    torch.manual_seed(0)
    cases = [(2, 4, 2, 257, 300, 64), (1, 2, 1, 200, 77, 128), (1, 3, 3, 128, 128, 128), (2, 2, 2, 1000, 1000, 64),
             (1, 4, 1, 64, 512, 128), (1, 2, 2, 33, 17, 64)]
    for dt in ("bf16", "f16"):
        for (b, hq, hkv, nq, nk, d) in cases:
            for mask in MASK:
                q = torch.randn(b, hq, nq, d, device="cuda").to(DT[dt][0])
                k = torch.randn(b, hkv, nk, d, device="cuda").to(DT[dt][0])
                v = torch.randn(b, hkv, nk, d, device="cuda").to(DT[dt][0])
                d_o = torch.randn(b, hq, nq, d, device="cuda").to(DT[dt][0])
                ro, rlse, rdq, rdk, rdv = reference(q, k, v, d_o, mask)
                row = dict(dtype=dt, b=b, hq=hq, hkv=hkv, nq=nq, nk=nk, d=d, mask=mask)
                # Every forward tile of the tiled kernels, the naive baseline, every backward tile
                # (atomic and deterministic); keys: "<tile>" for cuda_tiled, "wgmma_<...>" for cuda_wgmma.
                for kernel in [k for k in ("cuda_tiled", "cuda_wgmma") if wgmma or k != "cuda_wgmma"]:
                    prefix = "" if kernel == "cuda_tiled" else "wgmma_"
                    for tile in ours.tiles(kernel, d):
                        o, lse = ours.forward(q, k, v, mask, kernel, tile)
                        fin, tag = torch.isfinite(rlse), f"{tile[0]}x{tile[1]}"
                        row[f"{prefix}o_{tag}"] = rel(o, ro)
                        row[f"{prefix}lse_maxabs_{tag}"] = (lse.double()[fin] - rlse[fin]).abs().max().item() if fin.any() else 0.0
                        row[f"{prefix}lse_inf_ok_{tag}"] = bool(torch.equal(torch.isinf(lse) & (lse < 0), ~fin))
                        row[f"{prefix}o_nan_{tag}"] = bool(torch.isnan(o).any())
                    o, lse = ours.forward(q, k, v, mask, kernel)  # the default tile
                    for det in (False, True):
                        for bt in ours.tiles(kernel, d, backward=True):
                            dq, dk, dv = ours.backward(q, k, v, o, lse, d_o, mask, kernel, bt, det)
                            tag = f"{'det' if det else 'atomic'}" + (f"_{bt[0]}x{bt[1]}" if kernel == "cuda_tiled" else "")
                            row[f"{prefix}dq_{tag}"], row[f"{prefix}dk_{tag}"], row[f"{prefix}dv_{tag}"] = rel(dq, rdq), rel(dk, rdk), rel(dv, rdv)
                    # the deterministic variant is bitwise repeatable
                    a = ours.backward(q, k, v, o, lse, d_o, mask, kernel, (0, 0), True)
                    bb = ours.backward(q, k, v, o, lse, d_o, mask, kernel, (0, 0), True)
                    row[f"{prefix}det_bitwise"] = all(torch.equal(x, y) for x, y in zip(a, bb))
                o, lse = ours.forward(q, k, v, mask, "cuda_naive")
                row["naive_o"] = rel(o, ro)
                if mask != "causal_bottom_right" and nq == nk and hq == hkv:
                    qf, kf, vf = (t.detach().clone().requires_grad_() for t in (q, k, v))
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        of = F.scaled_dot_product_attention(qf, kf, vf, is_causal=mask != "none")
                    of.backward(d_o)
                    row["torch_flash_o"] = rel(of, ro)
                    row["torch_flash_dq"], row["torch_flash_dk"], row["torch_flash_dv"] = rel(qf.grad, rdq), rel(kf.grad, rdk), rel(vf.grad, rdv)
                out.append(row)
                print(json.dumps(row), flush=True)
    return out


def time_ms(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def job_perf(ours, ns, ds, dtypes, kernels, quick_tiles):
    """kernels: registry names, the first is "ours" in the ratios (its default tile, its own backward)."""
    rows = []
    for dt in dtypes:
        for d in ds:
            for n in ns:
                for causal in (False, True):
                    h = 2048 // d          # 16 or 32 heads: (b h) d = 2048 per token
                    b = max(1, 16384 // n)  # 16k tokens per batch
                    torch.manual_seed(1)
                    mk = lambda: torch.randn(b, h, n, d, device="cuda", dtype=DT[dt][0])
                    q, k, v, d_o = mk(), mk(), mk(), mk()
                    mask = "causal_top_left" if causal else "none"
                    flops = 4 * n * n * d * b * h / (2 if causal else 1)
                    reps = 30 if n <= 4096 else 10
                    row = dict(dtype=dt, d=d, n=n, b=b, h=h, causal=causal)
                    # Every forward tile of each kernel (only the default with quick_tiles); the default
                    # tile of the first kernel is "ours", every other figure is reported beside it.
                    for kernel in kernels:
                        tiles = ours.tiles(kernel, d)
                        for tile in tiles[:1] if quick_tiles else tiles:
                            ms = time_ms(lambda: ours.forward(q, k, v, mask, kernel, tile), reps)
                            row[f"{SHORT[kernel]}_fwd_{tile[0]}x{tile[1]}"] = flops / ms / 1e9
                    first, tile0 = kernels[0], ours.tiles(kernels[0], d)[0]
                    row["ours_fwd_kernel"] = f"{SHORT[first]} {tile0[0]}x{tile0[1]}"
                    row["ours_fwd"] = row[f"{SHORT[first]}_fwd_{tile0[0]}x{tile0[1]}"]
                    row["ours_fwd_best"] = max(v_ for k_, v_ in row.items() if "_fwd_" in k_ and k_[-1].isdigit())
                    # fwd+bwd of each kernel with its own forward (default tile): every backward tile
                    # (atomic), and the default one deterministic.
                    for kernel in kernels:
                        short, btiles = SHORT[kernel], ours.tiles(kernel, d, backward=True)
                        ws = ours.workspace(kernel, True, q, k)
                        o, lse = ours.forward(q, k, v, mask, kernel)
                        kf = lambda: ours.forward(q, k, v, mask, kernel)
                        for bt in btiles[:1] if quick_tiles else btiles:
                            ms = time_ms(lambda: (kf(), ours.backward(q, k, v, o, lse, d_o, mask, kernel, bt, False, ws)), reps)
                            row[f"{short}_fwdbwd_{bt[0]}x{bt[1]}"] = 3.5 * flops / ms / 1e9
                        ms = time_ms(lambda: (kf(), ours.backward(q, k, v, o, lse, d_o, mask, kernel, btiles[0], True, ws)), reps)
                        row[f"{short}_fwdbwd_deterministic"] = 3.5 * flops / ms / 1e9
                        row[f"{short}_fwdbwd"] = row[f"{short}_fwdbwd_{btiles[0][0]}x{btiles[0][1]}"]
                        del ws, o, lse
                    row["ours_fwdbwd"] = row[f"{SHORT[first]}_fwdbwd"]
                    row["ours_fwdbwd_deterministic"] = row[f"{SHORT[first]}_fwdbwd_deterministic"]
                    row["ours_fwdbwd_best"] = max(v_ for k_, v_ in row.items() if "_fwdbwd_" in k_ and k_[-1].isdigit())
                    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                        try:
                            with sdpa_kernel(be):
                                ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), reps)
                                row[f"torch_{name}_fwd"] = flops / ms / 1e9
                                qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
                                def fb():
                                    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                                    out.backward(d_o)
                                ms = time_ms(fb, reps)
                                row[f"torch_{name}_fwdbwd"] = 3.5 * flops / ms / 1e9
                        except Exception as e:  # a backend that refuses the shape: say so
                            row[f"torch_{name}_error"] = str(e)[:200]
                    for name in ("flash", "cudnn"):
                        if f"torch_{name}_fwd" in row:
                            row[f"ratio_fwd_vs_{name}"] = row["ours_fwd"] / row[f"torch_{name}_fwd"]
                            row[f"ratio_fwdbwd_vs_{name}"] = row["ours_fwdbwd"] / row[f"torch_{name}_fwdbwd"]
                    rows.append(row)
                    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
                    del q, k, v, d_o
    return rows


def job_memory(ours, max_n, no_wgmma):
    rows = []
    n = 1024
    while n <= max_n:
        torch.cuda.empty_cache()
        row = dict(n=n, d=128, b=1, h=1, dtype="bf16")
        mk = lambda: torch.randn(1, 1, n, 128, device="cuda", dtype=torch.bfloat16)
        q, k, v, d_o = mk(), mk(), mk(), mk()
        o, lse = torch.empty_like(q), torch.empty(1, 1, n, device="cuda")
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        row["io_bytes_fwd"] = 4 * q.numel() * 2 + lse.numel() * 4
        P = ctypes.c_void_p
        runs = (("cuda_tiled", 0, "tiled_fwd"), ("cuda_tiled", 1, "tiled_fwdbwd"), ("cuda_naive", 0, "naive_fwd")) + \
            (() if no_wgmma else (("cuda_wgmma", 0, "wgmma_fwd"),))
        for kernel, bwd, name in runs:
            extra = ctypes.c_size_t(0)
            t0 = time.time()
            rc = ours.lib.fcb_measure_extra(kernel.encode(), bwd, 1, 1, 1, n, n, 128, 2, 0, ctypes.c_double(128 ** -0.5),
                                            *[P(t.data_ptr()) for t in (q, k, v, o, lse, d_o, dq, dk, dv)],
                                            ctypes.byref(extra))
            row[f"{name}_extra_bytes"] = extra.value
            row[f"{name}_status"] = "ok" if rc == 0 else ("out_of_memory" if rc == 2 else f"cuda_error_{rc}")
            row[f"{name}_seconds"] = time.time() - t0
        rows.append(row)
        print(json.dumps(row), flush=True)
        del q, k, v, d_o, o, lse, dq, dk, dv
        n *= 2
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--jobs", default="check,perf,memory")
    ap.add_argument("--quick", action="store_true", help="perf at N = 4096 only")
    ap.add_argument("--ns", help="perf sequence lengths, comma-separated (default 1024,4096,16384)")
    ap.add_argument("--ds", default="64,128", help="perf head dims")
    ap.add_argument("--dtypes", default="bf16,f16", help="perf dtypes")
    ap.add_argument("--wgmma-only", action="store_true", help="perf: cuda_wgmma's default tiles only (an A/B run)")
    ap.add_argument("--no-wgmma", action="store_true", help="cuda_tiled only (a GPU that is not sm_90)")
    ap.add_argument("--max-n", type=int, default=262144)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    ours = Ours(a.lib)
    kernels = ["cuda_tiled"] if a.no_wgmma else ["cuda_wgmma", "cuda_tiled"]  # the first is "ours"
    if a.wgmma_only:
        kernels = ["cuda_wgmma"]
    res = dict(date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), device=torch.cuda.get_device_name(),
               torch=torch.__version__, cudnn=torch.backends.cudnn.version(), command=" ".join(sys.argv),
               commit=os.environ.get("FC_COMMIT", "unknown"))
    for job in a.jobs.split(","):
        t0 = time.time()
        if job == "check":
            res["check"] = job_check(ours, not a.no_wgmma)
        elif job == "perf":
            ns = [int(x) for x in a.ns.split(",")] if a.ns else [4096] if a.quick else [1024, 4096, 16384]
            res["perf"] = job_perf(ours, ns, [int(x) for x in a.ds.split(",")], a.dtypes.split(","), kernels, a.wgmma_only)
        elif job == "memory":
            res["memory"] = job_memory(ours, a.max_n, a.no_wgmma)
        print(f"# job {job}: {time.time() - t0:.1f} s", flush=True)
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
