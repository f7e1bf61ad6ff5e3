"""Every law of flashcheck, and its error-bound audit up to N = 16384, on the attention kernels of other
libraries, through the Python bridge: PyTorch SDPA's flash, efficient, cuDNN and math backends,
FlexAttention (compiled; plain, softcap score_mod, sliding-window block mask), torch.nn.attention.varlen,
and JAX's dot_product_attention (cudnn, xla). cuda_wgmma, flashcheck's own kernel, runs the same audit
sweep for comparison.

Each kernel runs in its own `python -m flashcheck` subprocess (whose kernel runs in a worker process),
under a time limit, so a library that fails to import, raises, crashes or hangs costs its own row and
nothing else. Writes OUT/summary.md, OUT/results.json, OUT/command.txt, per kernel OUT/check/NAME.json
and OUT/audit/NAME/report.json, and every minimal counterexample as a regression case under
OUT/regressions/NAME/ (with its replay line in the summary).

    python3 examples/python/audit_external.py --out reports/h200/external [--quick] [--only flex,jax_xla]
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = [  # (name, spec), in the order of the summary
    ("sdpa_flash", "torch_sdpa:flash"),
    ("sdpa_efficient", "torch_sdpa:efficient"),
    ("sdpa_cudnn", "torch_sdpa:cudnn"),
    ("sdpa_math", "torch_sdpa:math"),
    ("flex", "flex_attention:flex"),
    ("torch_varlen", "torch_varlen:varlen"),
    ("jax_cudnn", "jax_attention:cudnn"),
    ("jax_xla", "jax_attention:xla"),
]
# Run only when named with --only: the contract (fc::Problem, hence the generators) has no softcap or
# window cases yet, so these would see exactly flex's plain problems.
VARIANT_KERNELS = [("flex_softcap", "flex_attention:flex_softcap"), ("flex_window", "flex_attention:flex_window")]
# FlashAttention-3 paper, Table 3: RMSE of O against an fp64 reference, N(0,1) + N(0,100)*Bernoulli(0.001).
FA3_RMSE = {"baseline fp16": 3.2e-4, "FlashAttention-2 fp16": 1.9e-4, "FlashAttention-3 fp16": 1.9e-4}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="reports/h200/external")
    ap.add_argument("--quick", action="store_true", help="a first smoke run: few cases, the quick audit sweep")
    ap.add_argument("--cases", type=int, help="random cases per law (default 40; --quick 6)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=3, help="kernels checked at once (one GPU, many CPU cores)")
    ap.add_argument("--budget", type=float, default=450, help="seconds for everything (default 450)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds one kernel call may take")
    ap.add_argument("--only", help="comma-separated kernel names")
    ap.add_argument("--no-audit", action="store_true", help="the laws only")
    ap.add_argument("--flashcheck", default=os.environ.get("FLASHCHECK_BIN", "flashcheck"),
                    help="the flashcheck CLI (for cuda_wgmma's audit)")
    return ap.parse_args()


def run(argv, limit, log_path, env):
    """Runs argv in its own process group under a wall-clock limit: (exit code or 'timeout', seconds)."""
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=max(limit, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = "timeout"
    return code, round(time.time() - t0, 1)


def tail(path, n=3):
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip() for line in f.readlines()[-n:]]
    except OSError:
        return []


def check_kernel(name, spec, a, deadline, env):
    """Every law on one kernel: its JSON, with how the run ended."""
    json_path = os.path.join(a.out, "check", name + ".json")
    regressions = os.path.join(a.out, "regressions", name)
    os.makedirs(regressions, exist_ok=True)
    argv = [sys.executable, "-m", "flashcheck", "check", spec, "--cases", str(a.cases), "--seed", str(a.seed),
            "--timeout", str(a.timeout), "--json-out", json_path, "--regressions", regressions, "--save-regressions"]
    log = os.path.join(a.out, "logs", name + ".check.log")
    code, seconds = run(argv, deadline - time.time(), log, env)
    result = {"name": name, "spec": spec, "exit": code, "seconds": seconds, "command": shlex.join(argv[1:])}
    try:
        with open(json_path) as f:
            result["check"] = json.load(f)
    except (OSError, ValueError):
        result["error"] = " ".join(tail(log, 2)) or "no output"
    return result


def audit_kernel(name, spec, a, deadline, env):
    out = os.path.join(a.out, "audit", name)
    argv = ([sys.executable, "-m", "flashcheck", "audit", spec] if spec else [a.flashcheck, "audit", "--kernel", name])
    argv += ["--out", out, "--seed", str(a.seed), "--dtype", "F16,BF16"] + (["--quick"] if a.quick else [])
    if spec:
        argv += ["--timeout", str(a.timeout)]
    code, seconds = run(argv, deadline - time.time(), os.path.join(a.out, "logs", name + ".audit.log"), env)
    result = {"exit": code, "seconds": seconds, "command": shlex.join(argv if not spec else argv[1:])}
    try:
        with open(os.path.join(out, "report.json")) as f:
            result["cells"] = cells_of(json.load(f))
    except (OSError, ValueError):
        result["error"] = " ".join(tail(os.path.join(a.out, "logs", name + ".audit.log"), 2)) or "no output"
    return result


def cells_of(report):
    """Per case: pass, the worst ratio to the bound and o's RMSE (the report's own fields)."""
    out = {}
    for cell in report.get("cells", []):
        if cell.get("kernel") == "cpu_naive":
            continue
        o = cell.get("tensors", {}).get("o", {})
        out[cell.get("case", "?")] = {"pass": cell.get("status") == "pass", "status": cell.get("status"),
                                      "ratio": o.get("ratio", {}).get("max"), "rmse": o.get("rmse"),
                                      "why": cell.get("error") or o.get("why", ""), "replay": cell.get("replay", "")}
    return out


def fmt(x):
    return "-" if x is None else ("%.2e" % x if isinstance(x, (int, float)) else str(x))


def summary(results, wgmma, a, started):
    lines = ["# External kernels under flashcheck", "",
             "Command: `%s`" % shlex.join([sys.executable] + sys.argv), "",
             "Every law (`python -m flashcheck check`, %d cases per law, seed %d) and the error-bound audit "
             "(`python -m flashcheck audit`, F16 and BF16%s) per kernel; cuda_wgmma runs the same audit. "
             "Wall time %.0f s." % (a.cases, a.seed, ", quick sweep" if a.quick else "", time.time() - started),
             "", "FlexAttention's softcap and sliding-window variants are not in the table: the contract has "
             "no softcap or window problems yet, so they would run flex's plain problems "
             "(`--only flex_softcap,flex_window` runs them).",
             "", "| kernel | laws pass | fail | n/a | unsupported | check | audit cells pass | worst o ratio | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    failures = []
    for r in results:
        laws = r.get("check", {}).get("laws", [])
        count = {s: sum(1 for x in laws if x["status"] == s) for s in ("pass", "fail", "n/a", "unsupported")}
        cells = r.get("audit", {}).get("cells", {})
        passed = sum(1 for c in cells.values() if c["pass"])
        ratios = [c["ratio"] for c in cells.values()]
        worst = "nan" if "nan" in ratios else max((x for x in ratios if isinstance(x, (int, float))), default=None)
        note = r.get("error") or r.get("audit", {}).get("error", "")
        lines.append("| %s | %d | %d | %d | %d | exit %s, %s s | %s | %s | %s |" % (
            r["name"], count["pass"], count["fail"], count["n/a"], count["unsupported"], r["exit"], r["seconds"],
            "%d/%d" % (passed, len(cells)) if cells else "-", fmt(worst), note[:120].replace("|", "/")))
        for law in laws:
            if law["status"] == "fail":
                failures.append((r["name"], law))
    lines += ["", "## Laws that failed", ""]
    for name, law in failures:
        first = (law.get("message") or "").strip().splitlines()[:1]
        lines += ["- **%s / %s** (%s): %s" % (name, law["id"], law.get("sentence", ""), first[0] if first else ""),
                  "  - replay: `%s`" % law.get("replay", ""), "  - saved: `%s`" % law.get("saved", "")]
    if not failures:
        lines.append("None.")
    lines += ["", "## Audit cells that failed", ""]
    bad = [(r["name"], case, c) for r in results for case, c in r.get("audit", {}).get("cells", {}).items()
           if not c["pass"]]
    lines += ["- **%s %s** (%s): %s; replay: `%s`" % (n, case, c["status"], str(c["why"])[:200], c["replay"])
              for n, case, c in bad] or ["None."]
    lines += ["", "## o's RMSE per audit case, beside cuda_wgmma", "",
              "FlashAttention-3 paper, Table 3 (fp16, outliers): %s." % ", ".join(
                  "%s %.1e" % kv for kv in FA3_RMSE.items()), ""]
    cases = sorted({c for r in results for c in r.get("audit", {}).get("cells", {})} | set(wgmma.get("cells", {})))
    names = [r["name"] for r in results if r.get("audit", {}).get("cells")]
    lines += ["| case | cuda_wgmma | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
    for case in cases:
        row = [fmt(wgmma.get("cells", {}).get(case, {}).get("rmse"))]
        row += [fmt(r["audit"]["cells"].get(case, {}).get("rmse")) for r in results if r["name"] in names]
        lines.append("| %s | %s |" % (case, " | ".join(row)))
    return "\n".join(lines) + "\n"


def main():
    a = parse_args()
    a.cases = a.cases or (6 if a.quick else 40)
    started, deadline = time.time(), time.time() + a.budget
    for sub in ("check", "audit", "logs", "regressions"):
        os.makedirs(os.path.join(a.out, sub), exist_ok=True)
    with open(os.path.join(a.out, "command.txt"), "w") as f:
        f.write(shlex.join([sys.executable] + sys.argv) + "\n")
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONPATH=os.pathsep.join(
        [HERE, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"), os.environ.get("PYTHONPATH", "")]))
    chosen = [k for k in KERNELS if not a.only or k[0] in a.only.split(",")]
    chosen += [k for k in VARIANT_KERNELS if a.only and k[0] in a.only.split(",")]
    # The laws first, then the audits, each phase with its share of the budget.
    check_deadline = started + a.budget * (1.0 if a.no_audit else 0.6)
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        results = list(pool.map(lambda k: check_kernel(k[0], k[1], a, check_deadline, env), chosen))
        wgmma = {}
        if not a.no_audit:
            jobs = [pool.submit(audit_kernel, n, s, a, deadline, env) for n, s in chosen]
            wgmma_job = pool.submit(audit_kernel, "cuda_wgmma", None, a, deadline, env)
            for r, job in zip(results, jobs):
                r["audit"] = job.result()
            wgmma = wgmma_job.result()
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"seed": a.seed, "cases_per_law": a.cases, "quick": a.quick, "kernels": results,
                   "cuda_wgmma_audit": wgmma, "seconds": round(time.time() - started, 1)}, f, indent=1)
    text = summary(results, wgmma, a, started)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
