#!/usr/bin/env python3
"""Turn one device run's JSON (bench_sdpa.py: check, perf, memory) into reports/h200/: a combined
JSON with provenance and a Markdown page. Numbers are copied, never recomputed or rounded upward.
Usage: bench/report.py --run DIR --out reports/h200 [--source COMMIT] [--final DIR --final-source COMMIT]
  --final: a later run's sanitizer logs (sanitize_memcheck.log, sanitize_racecheck.log) and perf JSON
           (--final-perf, default perf_quick.json), reported beside the full run when kernels changed after it.
"""
import argparse, json, os


def load(path):
    return json.load(open(path)) if os.path.exists(path) else None


def fmt_bytes(b):
    return f"{b / 2**20:.1f} MiB" if b < 2**30 else f"{b / 2**30:.2f} GiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default="bash bench/run_h200.sh tests sanitize check perf memory")
    ap.add_argument("--source", default="", help="the commit holding the sources the carried binaries were built from")
    ap.add_argument("--final", default="", help="a later run's directory (sanitizer logs, perf_quick.json)")
    ap.add_argument("--final-source", default="")
    ap.add_argument("--final-perf", default="perf_quick.json", help="the later run's perf JSON, in --final's directory")
    ap.add_argument("--final-note", default="", help="a sentence on what changed before the later run")
    a = ap.parse_args()
    check, perf, mem = (load(os.path.join(a.run, f)) for f in ("check.json", "perf.json", "memory.json"))
    head = perf or check or mem
    meta = {k: head[k] for k in ("date", "device", "torch", "cudnn", "commit")}
    meta["command"] = a.command
    meta["source_commit"] = a.source or meta["commit"]
    tests = open(os.path.join(a.run, "tests.txt")).read() if os.path.exists(os.path.join(a.run, "tests.txt")) else ""
    # early run_h200.sh printed tail's status as "rc="; Catch2's own summary lines are the verdict
    tests = "\n".join(l for l in tests.splitlines() if not l.startswith("rc="))
    san = open(os.path.join(a.run, "sanitize.txt")).read() if os.path.exists(os.path.join(a.run, "sanitize.txt")) else ""
    os.makedirs(a.out, exist_ok=True)
    json.dump(dict(meta=meta, perf=perf and perf["perf"], memory=mem and mem["memory"], check=check and check["check"],
                   tests=tests, sanitize=san), open(os.path.join(a.out, "bench.json"), "w"), indent=1)

    L = ["# cuda_wgmma and cuda_tiled on the H200: speed, memory, correctness", "",
         f"- date: {meta['date']}; device: {meta['device']}; torch {meta['torch']}, cuDNN {meta['cudnn']}",
         f"- sources: commit {meta['source_commit']} (HEAD when the binaries were built: {meta['commit']}); command: `{meta['command']}`",
         "  on the device, with binaries built here (nvcc 13.0, sm_90a) and carried by `bench/carry.sh`",
         "- TFLOP/s = 4·N²·d·b·h / time (halved for causal); fwd+bwd counts 3.5× the forward's FLOPs.",
         "- Ours and PyTorch SDPA run in one process on the same tensors and stream (bench_sdpa.py loads",
         "  libfcbench.so through ctypes); CUDA events, 3 warm-ups, median of 30 (N ≤ 4k) or 10 repeats.",
         "- `ours` = cuda_wgmma (TMA + wgmma, sm_90a) on its default tile, fwd+bwd with its own backward; `best` = the",
         "  fastest instantiated tile of either kernel (headroom, not used in ratios); `tiled` = cuda_tiled (mma.sync) on",
         "  its default tiles, for reference.",
         "- b·h·d = 2048·16k/N tokens: h = 2048/d heads, b = 16384/N.", ""]
    if perf:
        L += ["## Speed (TFLOP/s) and ratios to PyTorch SDPA", "",
              "| dtype | d | N | causal | ours fwd | best | tiled | flash fwd | cuDNN fwd | fwd/flash | fwd/cuDNN | ours fwd+bwd | deterministic | tiled | flash fwd+bwd | cuDNN fwd+bwd | fb/flash | fb/cuDNN |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in perf["perf"]:
            g = lambda k: r.get(k)
            f = lambda x: "–" if x is None else f"{x:.0f}"
            q = lambda x: "–" if x is None else f"{x:.2f}×"
            tiled_fwd = max((v for k, v in r.items() if k.startswith("tiled_fwd_") and k[-1].isdigit()), default=None)
            L.append(f"| {r['dtype']} | {r['d']} | {r['n']} | {'yes' if r['causal'] else 'no'} | {f(g('ours_fwd'))} | {f(g('ours_fwd_best'))} | "
                     f"{f(tiled_fwd)} | {f(g('torch_flash_fwd'))} | {f(g('torch_cudnn_fwd'))} | {q(g('ratio_fwd_vs_flash'))} | {q(g('ratio_fwd_vs_cudnn'))} | "
                     f"{f(g('ours_fwdbwd'))} | {f(g('ours_fwdbwd_deterministic'))} | {f(g('tiled_fwdbwd'))} | {f(g('torch_flash_fwdbwd'))} | "
                     f"{f(g('torch_cudnn_fwdbwd'))} | {q(g('ratio_fwdbwd_vs_flash'))} | {q(g('ratio_fwdbwd_vs_cudnn'))} |")
        L += ["", "`tiled` fwd is cuda_tiled's fastest tile; `tiled` fwd+bwd its default backward tile on its own forward."]
        big = [r for r in perf["perf"] if r["n"] >= 4096 and "ratio_fwd_vs_flash" in r]
        if big:
            lo_f = min(r["ratio_fwd_vs_flash"] for r in big); hi_f = max(r["ratio_fwd_vs_flash"] for r in big)
            lo_b = min(r["ratio_fwdbwd_vs_flash"] for r in big); hi_b = max(r["ratio_fwdbwd_vs_flash"] for r in big)
            met_f = all(r["ratio_fwd_vs_flash"] >= 1.05 for r in big); met_b = all(r["ratio_fwdbwd_vs_flash"] >= 1.0 for r in big)
            L += ["", "### Against the targets (N ≥ 4k)", "",
                  f"- forward ≥ 1.05× torch flash: **{'met' if met_f else 'NOT met'}** — measured {lo_f:.2f}× to {hi_f:.2f}×.",
                  f"- forward+backward ≥ 1.0× torch flash: **{'met' if met_b else 'NOT met'}** — measured {lo_b:.2f}× to {hi_b:.2f}×.",
                  f"- against cuDNN: forward {min(r['ratio_fwd_vs_cudnn'] for r in big if 'ratio_fwd_vs_cudnn' in r):.2f}× to "
                  f"{max(r['ratio_fwd_vs_cudnn'] for r in big if 'ratio_fwd_vs_cudnn' in r):.2f}×; forward+backward "
                  f"{min(r['ratio_fwdbwd_vs_cudnn'] for r in big if 'ratio_fwdbwd_vs_cudnn' in r):.2f}× to "
                  f"{max(r['ratio_fwdbwd_vs_cudnn'] for r in big if 'ratio_fwdbwd_vs_cudnn' in r):.2f}×."]
            short = [f"{r['dtype']} d={r['d']} N={r['n']}{' causal' if r['causal'] else ''}: {r['ratio_fwdbwd_vs_flash']:.2f}×"
                     for r in big if r["ratio_fwdbwd_vs_flash"] < 1.0]
            if short:
                L.append("- below 1.0× forward+backward: " + "; ".join(short) + ".")
        L.append("")
    if mem:
        L += ["## Memory receipt (d = 128, bf16, b = h = 1, no mask)", "",
              "Extra device memory each run takes beyond its inputs and outputs (q k v o lse, and d_o d_q d_k d_v),",
              "read from the driver (cudaMemGetInfo before and after the run's own allocations; 2 MiB granular).", "",
              "| N | q k v o lse | cuda_wgmma fwd | cuda_tiled fwd | backward workspace (measured on cuda_tiled; cuda_wgmma allocates the same) | cuda_naive fwd (S, P in HBM) | naive time |", "|---|---|---|---|---|---|---|"]
        for r in mem["memory"]:
            nv = fmt_bytes(r["naive_fwd_extra_bytes"]) + ("" if r["naive_fwd_status"] == "ok" else f" needed — **{r['naive_fwd_status']}**")
            wg = f"{fmt_bytes(r['wgmma_fwd_extra_bytes'])} ({r['wgmma_fwd_status']})" if "wgmma_fwd_status" in r else "–"
            L.append(f"| {r['n']} | {fmt_bytes(r['io_bytes_fwd'])} | {wg} | {fmt_bytes(r['tiled_fwd_extra_bytes'])} ({r['tiled_fwd_status']}) | "
                     f"{fmt_bytes(r['tiled_fwdbwd_extra_bytes'])} ({r['tiled_fwdbwd_status']}) | {nv} | {r['naive_fwd_seconds']:.2f} s |")
        L += ["", "The forwards take nothing beyond their outputs; the backward (one workspace for both kernels) takes the fp32",
              "d_q accumulator, D, and padded copies of lse and D for the wgmma backward's TMA: linear in N. cuda_naive takes",
              "2·2·N² bytes for S and P: quadratic, and past the card at the row marked out_of_memory.", ""]
    if check:
        worst = {}
        for r in check["check"]:
            for k, v in r.items():
                if not isinstance(v, float) or "lse" in k or k.startswith("torch") or k in ("b", "d"):
                    continue
                kern = "wgmma" if k.startswith("wgmma_") else "naive" if k.startswith("naive") else "tiled"
                what = k.removeprefix("wgmma_").split("_")[0] if kern != "naive" else "o"
                worst[(r["dtype"], kern, what)] = max(worst.get((r["dtype"], kern, what), 0), v)
        L += ["## Correctness sanity in the same run (relative Frobenius error vs float64 attention)", "",
              f"{len(check['check'])} problems (GQA, ragged n_q ≠ n_k, all three masks, every tile, atomic and deterministic backward).", "",
              "| dtype | kernel | o | d_q | d_k | d_v |", "|---|---|---|---|---|---|"]
        for dt in ("bf16", "f16"):
            for kern in ("wgmma", "tiled", "naive"):
                w = lambda x: "–" if (dt, kern, x) not in worst else f"{worst[(dt, kern, x)]:.2e}"
                L.append(f"| {dt} | cuda_{kern} | {w('o')} | {w('dq')} | {w('dk')} | {w('dv')} |")
        flash = [r for r in check["check"] if "torch_flash_o" in r]
        if flash:
            L.append("")
            L.append("Where torch flash runs the same problem, its error beside ours (o, d_q): " + "; ".join(
                f"{r['dtype']} N={r['nq']} d={r['d']} {r['mask']}: {r['o_128x64']:.2e}/{r['torch_flash_o']:.2e}, "
                f"{r['dq_atomic_64x64']:.2e}/{r['torch_flash_dq']:.2e}" for r in flash[:4]) + ".")
        L.append("")
    if tests or san:
        L += ["## GPU tests and sanitizer (same call)", "", "```", tests.strip()[-1500:], "", san.strip()[-1200:], "```", ""]
    if a.final:
        L += [f"## Later run at commit {a.final_source} (the kernels changed after the run above)", ""]
        if a.final_note:
            L += [a.final_note, ""]
        for tool in ("memcheck", "racecheck"):
            path = os.path.join(a.final, f"sanitize_{tool}.log")
            if os.path.exists(path):
                tail = [l for l in open(path).read().splitlines() if "SUMMARY" in l or "passed" in l]
                L += [f"- compute-sanitizer {tool} on `cuda_tiled_test \"[sanitize]\"`: " + " / ".join(t.strip("= ") for t in tail)]
        pq = load(os.path.join(a.final, a.final_perf))
        if pq:
            ns = sorted({r["n"] for r in pq["perf"]})
            L += ["", f"Perf of the later sources (`{a.final_perf}`: N = {', '.join(map(str, ns))}; cuda_wgmma's default tile "
                  "and its own backward, torch flash and cuDNN in the same pass):", "",
                  "| dtype | d | N | causal | ours fwd | flash fwd | fwd/flash | ours fwd+bwd | deterministic | flash fwd+bwd | fb/flash | fb/cuDNN |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for r in pq["perf"]:
                L.append(f"| {r['dtype']} | {r['d']} | {r['n']} | {'yes' if r['causal'] else 'no'} | {r['ours_fwd']:.0f} | "
                         f"{r['torch_flash_fwd']:.0f} | {r['ratio_fwd_vs_flash']:.2f}× | {r['ours_fwdbwd']:.0f} | "
                         f"{r['ours_fwdbwd_deterministic']:.0f} | {r['torch_flash_fwdbwd']:.0f} | "
                         f"{r['ratio_fwdbwd_vs_flash']:.2f}× | {r['ratio_fwdbwd_vs_cudnn']:.2f}× |")
            big = [r for r in pq["perf"] if r["n"] >= 4096]
            if big:
                lo = lambda k: min(r[k] for r in big)
                hi = lambda k: max(r[k] for r in big)
                L += ["", f"Against the targets (N ≥ 4k) in this pass: forward {lo('ratio_fwd_vs_flash'):.2f}× to "
                      f"{hi('ratio_fwd_vs_flash'):.2f}× torch flash, forward+backward {lo('ratio_fwdbwd_vs_flash'):.2f}× to "
                      f"{hi('ratio_fwdbwd_vs_flash'):.2f}×; against cuDNN forward+backward {lo('ratio_fwdbwd_vs_cudnn'):.2f}× "
                      f"to {hi('ratio_fwdbwd_vs_cudnn'):.2f}×."]
        L.append("")
    open(os.path.join(a.out, "BENCH.md"), "w").write("\n".join(L))


if __name__ == "__main__":
    main()
