#!/usr/bin/env python3
"""GPU runs as results: one JSON per run in results/h200/runs/, and BENCH.md generated from them.

  bench/report.py collect WORK --command CMD --out DIR
      (scripts/device.sh bench) WORK holds a run's logs and JSON: steps.tsv (name, exit status, seconds), NAME.log,
      check.json, perf.json, perf_base.json, memory.json, audit/report.json, device.txt. Writes
      DIR/<YYYY-MM-DD-HHMM>_<commit>.json and prints its path. Numbers are copied, never recomputed.
  bench/report.py render RUN.json... --out results/h200/BENCH.md [--main RUN.json]
      The main run (default: the newest with perf at three sequence lengths and memory) in full; every
      run in the table of runs; a later run's perf beside the main run's.

A run JSON: {"meta": {date, device, torch, cudnn, commit, command}, "steps": [{name, rc, seconds,
summary}], "perf": [...], "perf_base": [...], "memory": [...], "check": [...], "audit": {verdict, summary}}
(bench_sdpa.py writes the perf / memory / check rows).
"""
import argparse, json, os, re, sys, time


def load(path):
    return json.load(open(path)) if os.path.exists(path) else None


# ---- collect -------------------------------------------------------------------------------------

def summary_of(name, log):
    """The lines of a step's log that carry its verdict."""
    keep = re.compile(r"(Passed|passed|failed|FAILED|\bFAIL\b|All tests|test cases|ERROR SUMMARY|RACECHECK SUMMARY|"
                      r"every law|law .* (holds|failed)|verdict|Error|error:)")
    lines = [l.strip("= ").rstrip() for l in log.splitlines() if keep.search(l)]
    return lines[-6:]


def collect(a):
    w = a.work
    steps = []
    if os.path.exists(os.path.join(w, "steps.tsv")):
        for line in open(os.path.join(w, "steps.tsv")):
            name, rc, secs = line.rstrip("\n").split("\t")
            log = os.path.join(w, name + ".log")
            steps.append(dict(name=name, rc=int(rc) if rc.lstrip("-").isdigit() else rc, seconds=int(secs),
                              summary=summary_of(name, open(log, errors="replace").read()) if os.path.exists(log) else []))
    run = dict(steps=steps)
    for key, f in (("check", "check.json"), ("perf", "perf.json"), ("perf_base", "perf_base.json"), ("memory", "memory.json")):
        d = load(os.path.join(w, f))
        if d:
            run[key] = d[key if key != "perf_base" else "perf"]
            run.setdefault("meta", {k: d.get(k) for k in ("date", "device", "torch", "cudnn", "commit")})
            if key == "perf_base":
                run["meta"]["base_commit"] = d.get("commit")
    audit = load(os.path.join(w, "audit", "report.json"))
    if audit:
        run["audit"] = dict(verdict=audit.get("verdict"), summary=audit.get("summary"))
    meta = run.setdefault("meta", {})
    meta.setdefault("date", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    meta.setdefault("commit", os.environ.get("FC_COMMIT", "unknown"))
    if not meta.get("device") and os.path.exists(os.path.join(w, "device.txt")):
        meta["device"] = open(os.path.join(w, "device.txt")).read().split(",")[0].strip()
    meta["command"] = a.command
    commit = (meta.get("commit") or "unknown").split()[0]
    date = meta["date"]  # "YYYY-MM-DD HH:MM:SS UTC"
    path = os.path.join(a.out, f"{date[:10]}-{date[11:13]}{date[14:16]}_{commit}.json")
    json.dump(run, open(path, "w"), indent=1)
    print(path)


# ---- render --------------------------------------------------------------------------------------

f0 = lambda x: "–" if x is None else f"{x:.0f}"
fx = lambda x: "–" if x is None else f"{x:.2f}×"


def fmt_bytes(b):
    return f"{b / 2**20:.1f} MiB" if b < 2**30 else f"{b / 2**30:.2f} GiB"


def ratio_range(perf, key):
    big = [r[key] for r in perf if r["n"] >= 4096 and key in r]
    return (min(big), max(big)) if big else None


def speed_table(perf):
    L = ["| dtype | d | N | causal | ours fwd | best | tiled | flash fwd | cuDNN fwd | fwd/flash | fwd/cuDNN | ours fwd+bwd | "
         "deterministic | tiled | flash fwd+bwd | cuDNN fwd+bwd | fb/flash | fb/cuDNN |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in perf:
        g = r.get
        tiled_fwd = max((v for k, v in r.items() if k.startswith("tiled_fwd_") and k[-1].isdigit()), default=None)
        L.append(f"| {r['dtype']} | {r['d']} | {r['n']} | {'yes' if r['causal'] else 'no'} | {f0(g('ours_fwd'))} | "
                 f"{f0(g('ours_fwd_best'))} | {f0(tiled_fwd)} | {f0(g('torch_flash_fwd'))} | {f0(g('torch_cudnn_fwd'))} | "
                 f"{fx(g('ratio_fwd_vs_flash'))} | {fx(g('ratio_fwd_vs_cudnn'))} | {f0(g('ours_fwdbwd'))} | "
                 f"{f0(g('ours_fwdbwd_deterministic'))} | {f0(g('tiled_fwdbwd'))} | {f0(g('torch_flash_fwdbwd'))} | "
                 f"{f0(g('torch_cudnn_fwdbwd'))} | {fx(g('ratio_fwdbwd_vs_flash'))} | {fx(g('ratio_fwdbwd_vs_cudnn'))} |")
    return L


def targets(perf):
    rf, rb = ratio_range(perf, "ratio_fwd_vs_flash"), ratio_range(perf, "ratio_fwdbwd_vs_flash")
    cf, cb = ratio_range(perf, "ratio_fwd_vs_cudnn"), ratio_range(perf, "ratio_fwdbwd_vs_cudnn")
    if not rf or not rb:
        return []
    L = [f"- forward ≥ 1.05× torch flash: **{'met' if rf[0] >= 1.05 else 'not met'}** — {rf[0]:.2f}× to {rf[1]:.2f}×.",
         f"- forward+backward ≥ 1.0× torch flash: **{'met' if rb[0] >= 1.0 else 'not met'}** — {rb[0]:.2f}× to {rb[1]:.2f}×."]
    if cf and cb:
        L.append(f"- against cuDNN: forward {cf[0]:.2f}× to {cf[1]:.2f}×; forward+backward {cb[0]:.2f}× to {cb[1]:.2f}×.")
    return L


def memory_section(mem):
    L = ["## Memory (d = 128, bf16, b = h = 1, no mask)", "",
         "Extra device memory each run takes beyond its inputs and outputs, read from the driver (cudaMemGetInfo",
         "before and after the run's own allocations; 2 MiB granular).", "",
         "| N | q k v o lse | cuda_wgmma fwd | cuda_tiled fwd | backward workspace (cuda_tiled; cuda_wgmma allocates the same) | "
         "cuda_naive fwd (S, P in HBM) | naive time |", "|---|---|---|---|---|---|---|"]
    for r in mem:
        nv = fmt_bytes(r["naive_fwd_extra_bytes"]) + ("" if r["naive_fwd_status"] == "ok" else f" needed — **{r['naive_fwd_status']}**")
        wg = f"{fmt_bytes(r['wgmma_fwd_extra_bytes'])} ({r['wgmma_fwd_status']})" if "wgmma_fwd_status" in r else "–"
        L.append(f"| {r['n']} | {fmt_bytes(r['io_bytes_fwd'])} | {wg} | {fmt_bytes(r['tiled_fwd_extra_bytes'])} "
                 f"({r['tiled_fwd_status']}) | {fmt_bytes(r['tiled_fwdbwd_extra_bytes'])} ({r['tiled_fwdbwd_status']}) | {nv} | "
                 f"{r['naive_fwd_seconds']:.2f} s |")
    return L + ["", "The forwards take nothing beyond their outputs; the backward takes the fp32 d_q accumulator, D and",
                "padded copies of lse and D (linear in N); cuda_naive takes 2·2·N² bytes for S and P.", ""]


def check_section(check):
    worst = {}
    for r in check:
        for k, v in r.items():
            if not isinstance(v, float) or "lse" in k or k.startswith("torch") or k in ("b", "d"):
                continue
            kern = "wgmma" if k.startswith("wgmma_") else "naive" if k.startswith("naive") else "tiled"
            what = k.removeprefix("wgmma_").split("_")[0] if kern != "naive" else "o"
            worst[(r["dtype"], kern, what)] = max(worst.get((r["dtype"], kern, what), 0), v)
    L = ["## Correctness sanity (relative Frobenius error vs float64 attention, worst over the problems)", "",
         f"{len(check)} problems (GQA, ragged n_q ≠ n_k, all three masks, every tile, atomic and deterministic backward).", "",
         "| dtype | kernel | o | d_q | d_k | d_v |", "|---|---|---|---|---|---|"]
    for dt in ("bf16", "f16"):
        for kern in ("wgmma", "tiled", "naive"):
            w = lambda x: "–" if (dt, kern, x) not in worst else f"{worst[(dt, kern, x)]:.2e}"
            L.append(f"| {dt} | cuda_{kern} | {w('o')} | {w('dq')} | {w('dk')} | {w('dv')} |")
    bitwise = [r[k] for r in check for k in r if k.endswith("det_bitwise")]
    if bitwise:
        L += ["", f"Deterministic backward bitwise repeatable: {sum(bitwise)} of {len(bitwise)} runs."]
    return L + [""]


def step_cell(s):
    rc = s["rc"]
    verdict = "ok" if rc == 0 else ("not carried" if rc == "not carried" else f"**rc {rc}**")
    tail = s["summary"][-1] if s.get("summary") else ""
    return f"{s['name']} {verdict}" + (f" ({tail})" if tail and rc != 0 else "")


def render(a):
    runs = sorted(((p, json.load(open(p))) for p in a.runs), key=lambda x: x[1]["meta"]["date"])
    full = lambda r: r.get("memory") and r.get("perf") and len({x["n"] for x in r["perf"]}) >= 3
    main = next((x for x in runs if os.path.abspath(x[0]) == os.path.abspath(a.main)), None) if a.main else \
        next((x for x in reversed(runs) if full(x[1])), None)
    if not main:
        sys.exit("report.py render: no run with full perf and memory (give --main)")
    mp, m = main
    meta = m["meta"]
    rel = lambda p: os.path.relpath(p, os.path.dirname(a.out))
    L = ["# CUDA kernels on the H200: speed, memory, correctness", "",
         f"Generated by `bench/report.py render` from `{os.path.dirname(rel(mp))}/`; do not edit by hand.", "",
         f"- main run: `{rel(mp)}` — {meta['date']}, {meta.get('device')}, torch {meta.get('torch')}, cuDNN "
         f"{meta.get('cudnn')}, sources at {meta.get('source_commit') or meta.get('commit')}; command `{meta.get('command')}`",
         "- TFLOP/s = 4·N²·d·b·h / time (halved for causal); fwd+bwd counts 3.5× the forward's FLOPs. b·h·d = 2048·16k/N",
         "  tokens: h = 2048/d heads, b = 16384/N.",
         "- Ours and PyTorch SDPA run in one process on the same tensors and stream (bench_sdpa.py loads libfcbench.so",
         "  through ctypes); CUDA events, 3 warm-ups, median of 30 (N ≤ 4k) or 10 repeats.",
         "- `ours` = the first kernel benchmarked (cuda_wgmma where the device has it) on its default tile, fwd+bwd with its",
         "  own backward; `best` = the fastest tile of any kernel (headroom, not in the ratios); `tiled` = cuda_tiled.", ""]
    if m.get("perf"):
        L += ["## Speed (TFLOP/s) and ratios to PyTorch SDPA", ""] + speed_table(m["perf"])
        L += ["", "### Against the targets (N ≥ 4k)", ""] + targets(m["perf"]) + [""]
    if m.get("memory"):
        L += memory_section(m["memory"])
    if m.get("check"):
        L += check_section(m["check"])
    later = [x for x in runs if x[1]["meta"]["date"] > meta["date"] and x[1].get("perf")]
    for p, r in later:
        L += [f"## Speed at {r['meta'].get('source_commit') or r['meta'].get('commit')} (`{rel(p)}`, {r['meta']['date']})", ""]
        L += speed_table(r["perf"]) + [""] + targets(r["perf"]) + [""]
        if r.get("perf_base"):
            rb = ratio_range(r["perf_base"], "ratio_fwdbwd_vs_flash")
            if rb:
                L += [f"The base build of the same call ({r['meta'].get('base_commit')}), forward+backward: {rb[0]:.2f}× to "
                      f"{rb[1]:.2f}× torch flash.", ""]
    L += ["## Runs", "", "| run | date | sources | command | steps | fwd/flash, fwd+bwd/flash (N ≥ 4k) |", "|---|---|---|---|---|---|"]
    for p, r in runs:
        mt = r["meta"]
        steps = "; ".join(step_cell(s) for s in r.get("steps", [])) or "–"
        rf, rb = (ratio_range(r["perf"], k) if r.get("perf") else None for k in ("ratio_fwd_vs_flash", "ratio_fwdbwd_vs_flash"))
        sp = f"{rf[0]:.2f}–{rf[1]:.2f}×, {rb[0]:.2f}–{rb[1]:.2f}×" if rf and rb else "–"
        L.append(f"| `{os.path.basename(p)}` | {mt['date']} | {mt.get('source_commit') or mt.get('commit')} | "
                 f"`{mt.get('command')}` | {steps} | {sp} |")
    open(a.out, "w").write("\n".join(L) + "\n")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("work")
    c.add_argument("--command", required=True)
    c.add_argument("--out", required=True)
    r = sub.add_parser("render")
    r.add_argument("runs", nargs="+")
    r.add_argument("--out", required=True)
    r.add_argument("--main", default="")
    a = ap.parse_args()
    collect(a) if a.cmd == "collect" else render(a)


if __name__ == "__main__":
    main()
