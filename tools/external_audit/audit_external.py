"""Every law of flashcheck and its error-bound audit on the attention kernels of other libraries, through
the Python bridge: PyTorch SDPA's flash, efficient, cuDNN and math backends, FlexAttention (compiled;
plain, softcap score_mod, sliding-window block mask), torch.nn.attention.varlen, and JAX's
dot_product_attention (cudnn, xla). cuda_wgmma, flashcheck's own kernel, runs the same laws and the same
audit in the same run, for comparison.

Each run (a kernel's laws, its quick audit, its long audit) is its own subprocess (whose kernel runs in a
worker process) under its own wall-clock limit inside one overall deadline, several at once: a library that
fails to import, raises, crashes or hangs costs its own row and nothing else. Results are written as they
come: OUT/kernels/NAME.json after each run, OUT/summary.md and OUT/results.json rewritten each time, so a
run stopped at any point leaves everything finished so far. A law run cut short keeps every law it printed
(the log is parsed). Minimal counterexamples are saved under OUT/regressions/NAME/ (replayed first by the
next run when OUT/regressions is carried over from results/h200/external/regressions).

    python3 tools/external_audit/audit_external.py --out DIR [--budget 480] [--only flex,jax_xla]
    IMPLS=flex,jax_xla python3 tools/external_audit/audit_external.py --out DIR   # the same: one lane of a run
    python3 tools/external_audit/audit_external.py --self-test --out /tmp/x     # no GPU, no torch: pure Python
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

import audit_merge
import audit_summary

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
import flashcheck.laws as flashcheck_laws  # noqa: E402  (the law ids; the package's own, not a copy)
ADAPTERS = os.path.join(ROOT, "examples", "python")  # the torch and JAX adapters the specs name
# (name, spec or None for a flashcheck registry kernel, what it covers, extra `check` options). The order
# is the summary's. sdpa_flash_any_stride and sdpa_cudnn_any_stride are SDPA's flash and cuDNN backends
# without the adapter's decline of strides that are not 16-byte aligned: one law each, to keep the
# counterexample of the fault they meet (no audit).
KERNELS = [
    ("cuda_wgmma", None, "flashcheck's own Hopper kernel (the comparison)", []),
    ("sdpa_flash", "torch_sdpa:flash", "SDPA, FlashAttention-2 backend", []),
    ("sdpa_efficient", "torch_sdpa:efficient", "SDPA, memory-efficient (cutlass) backend", []),
    ("sdpa_cudnn", "torch_sdpa:cudnn", "SDPA, cuDNN backend", []),
    ("sdpa_math", "torch_sdpa:math", "SDPA, math (reference) backend", []),
    ("flex", "flex_attention:flex", "FlexAttention, compiled; masks as block masks", []),
    ("flex_softcap", "flex_attention:flex_softcap", "FlexAttention, softcap score_mod", []),
    ("flex_window", "flex_attention:flex_window", "FlexAttention, sliding-window block mask", []),
    ("torch_varlen", "torch_varlen:varlen", "torch.nn.attention.varlen (FlashAttention-2 varlen)", []),
    ("jax_cudnn", "jax_attention:cudnn", "jax.nn.dot_product_attention, cudnn", []),
    ("jax_xla", "jax_attention:xla", "jax.nn.dot_product_attention, xla", []),
    ("sdpa_flash_any_stride", "torch_sdpa:flash_any_stride", "SDPA flash, unaligned rows not declined",
     ["--law", "reference"]),
    ("sdpa_cudnn_any_stride", "torch_sdpa:cudnn_any_stride", "SDPA cuDNN, unaligned strides not declined",
     ["--law", "reference"]),
]
NO_AUDIT = {"sdpa_flash_any_stride", "sdpa_cudnn_any_stride", "py_variants", "py_off_by_one"}  # (the last two: head dims 1..8)
# The scope of this audit where an adapter offers more than one run can compile in its budget: FlexAttention
# compiles one kernel per dtype, head dims (d, d_v) and padded length (flex_attention.py pads every call to
# a power-of-two length >= 1024), forward and backward, so its audits take fp16 and bf16 at d = 64 and 128
# (the issue's) and its law runs d = 64 (two programs a kernel instead of eight), as the summary says.
SCOPE = {"FC_FLEX_DTYPES": "F16,BF16", "FC_FLEX_HEAD_DIMS": "64,128", "FC_FLEX_MIN_BUCKET": "1024"}
CHECK_SCOPE = {"FC_FLEX_HEAD_DIMS": "64"}
# Every law id, in the order `check` runs them (python/flashcheck/laws.py, generated from the binary's
# list). A kernel in LAW_SPLIT runs each law in its own process under LAW_BUDGET seconds, several at once,
# instead of all in one process under --check-budget: one law that stalls (worker restarts after a fault the
# adapter does not foresee, a shrink through slow cases) then costs its own row, not every law after it. It
# costs one interpreter start (torch's import) per law, so only kernels with no compilation per process are
# split, and jax_xla, whose supports() compiles each case's programs before the case runs (jax_attention.py:
# XLA refuses some shapes' dot algorithm) and ran past 300 s with every law in one process; JAX's persistent
# compilation cache (jax_attention.py) lets its law processes share what each compiles.
LAWS = flashcheck_laws.IDS
LAW_SPLIT = {"torch_varlen", "sdpa_cudnn", "jax_xla"}
LAW_BUDGET = 150
# Laws of a split kernel with a budget and a per-call time-out of their own. torch_varlen's varlen_split
# ran past 150 s twice on the H200 with nothing written (each case runs the batch and every sequence
# again, forward and backward, and a failing case shrinks through as many): a shorter call time-out turns
# a stalled call into a failing case with its replay line, and the longer budget lets the law finish.
LAW_BUDGETS = {"varlen_split": 300}
LAW_CALL_TIMEOUT = {"varlen_split": 30}
# Laws whose runs log every kernel call (an adapter reading FC_TRACE_CALLS, torch_varlen's): the two that
# stalled with an empty log, so that a stall shows the call it stalled in.
TRACED_LAWS = {"varlen_split", "zero_length"}
# Seconds for one kernel's laws where the default is not enough: FlexAttention compiles (cold Triton
# cache) before its first case.
CHECK_BUDGET = {"flex": 360, "flex_softcap": 360, "flex_window": 360}
# Seconds one call may take where the first call of a dtype and head dim compiles (Triton, cold cache).
CALL_TIMEOUT = {"flex": 240, "flex_softcap": 240, "flex_window": 240}
# Cases per law where every new shape is a new compilation (JAX jits per shape, forward and backward):
# 8 keeps P(a law sees no multi-tile case) = 0.7^8 < 6 % while halving the compilations of the default.
CASES = {"jax_cudnn": 8, "jax_xla": 8}
# --self-test: the same pipeline on pure-Python kernels (python/tests/py_kernels.py: a correct one and one
# with a planted causal off-by-one) and cpu_tiled as the comparison; small audit cases.
SELF_TEST = [
    ("cpu_tiled", None, "flashcheck's tiled CPU kernel (the comparison)", []),
    ("py_attention", "py_kernels:any_head_dim", "pure Python, correct", []),
    ("py_variants", "py_variant_kernels:correct", "pure Python, windows, softcap, d_v, varlen", []),
    ("py_off_by_one", "py_kernels:planted_bug", "pure Python, causal mask off by one (planted)", []),
]
# The audit cases: the quick sweep (N <= 256, every regime), then the long ones (the FA3 paper's outlier
# distribution and the normal one at N = 1024 and 16384; the 16384 cells check the last 1024 rows).
# Two runs (an audit writes its report at its end: a run cut short keeps nothing, so each stays small).
LONG_CASES = {"n%d" % n: ["%s/%s/n%d" % (t, r, n) for t in ("F16", "BF16") for r in ("outliers", "normal")]
              for n in (1024, 16384)}
AUDIT_KINDS = ("quick",) + tuple(LONG_CASES)
SELF_TEST_CASES = ["F16/normal/n16", "BF16/normal/n16", "F16/causal_top_left/q64k32"]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="results/h200/external")
    ap.add_argument("--cases", type=int, default=12,
                    help="random cases per law (default 12: with 30%% of a GPU kernel's cases drawn multi-tile, "
                         "P(a law sees none) = 0.7^12 < 1.5%%)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=16, help="runs at once (default 16: one GPU, 16 cores; the law "
                    "runs take the first slots, the audits the rest as they free)")
    ap.add_argument("--budget", type=float, default=480, help="seconds for everything (default 480)")
    ap.add_argument("--check-budget", type=float, default=300, help="seconds for one kernel's laws (default 300)")
    ap.add_argument("--audit-budget", type=float, default=150, help="seconds for one audit run (default 150)")
    ap.add_argument("--timeout", type=float, default=60, help="seconds one kernel call may take (default 60)")
    ap.add_argument("--threads", type=int, default=2, help="oracle threads per run (FC_THREADS, default 2)")
    ap.add_argument("--only", default=os.environ.get("IMPLS") or None,
                    help="comma-separated kernel names (default: $IMPLS, else every kernel): one lane of a run "
                         "split over GPUs; audit_summary.py --merge joins the lanes' results.json")
    ap.add_argument("--no-audit", action="store_true", help="the laws only")
    ap.add_argument("--no-long", action="store_true", help="the quick audit sweep only")
    ap.add_argument("--regressions-from", default=os.path.join(ROOT, "results", "h200", "external", "regressions"),
                    help="saved counterexamples replayed first (copied into OUT/regressions)")
    ap.add_argument("--flashcheck", default=os.environ.get("FLASHCHECK_BIN", "flashcheck"), help="the flashcheck CLI")
    ap.add_argument("--self-test", action="store_true", help="the pipeline on pure-Python kernels, no GPU")
    a = ap.parse_args(argv)
    if a.only:
        names = {k[0] for k in (SELF_TEST if a.self_test else KERNELS)}
        bad = [x for x in a.only.split(",") if x not in names]
        if bad:
            ap.error("--only: unknown kernel(s) %s (known: %s)" % (", ".join(bad), ", ".join(sorted(names))))
    return a


class Runner:
    """Runs the planned subprocesses under one deadline and records each result as it comes."""

    def __init__(self, a):
        self.a, self.started = a, time.time()
        self.deadline = self.started + a.budget
        self.lock = threading.Lock()
        self.kernels = SELF_TEST if a.self_test else KERNELS
        if a.only:
            self.kernels = [k for k in self.kernels if k[0] in a.only.split(",")]
        self.results = {k[0]: {"name": k[0], "spec": k[1], "about": k[2], "runs": {}} for k in self.kernels}
        self.audited = [k for k in self.kernels if k[0] not in NO_AUDIT]
        self.env = self._env()

    def _env(self):
        a = self.a
        paths = [ADAPTERS, os.path.join(ROOT, "python")] + ([os.path.join(ROOT, "python", "tests")] if a.self_test else [])
        return dict(os.environ, PYTHONPATH=os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]).rstrip(":"),
                    FC_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads), PYTHONUNBUFFERED="1",
                    TORCHINDUCTOR_COMPILE_THREADS="4", XLA_PYTHON_CLIENT_PREALLOCATE="false", TF_CPP_MIN_LOG_LEVEL="2",
                    **SCOPE)

    def path(self, *parts):
        return os.path.join(self.a.out, *parts)

    # -- the plan: every kernel's laws first, then the quick audits, then the long ones --
    def plan(self):
        # Whole law runs first (FlexAttention's need their budget from the start), then the split ones.
        jobs = [("check", k) for k in self.kernels if not self.split(k)]
        jobs += [("check-" + law, k) for k in self.kernels if self.split(k) for law in LAWS]
        if not self.a.no_audit:
            kinds = AUDIT_KINDS[:1] if self.a.no_long else AUDIT_KINDS[:2] if self.a.self_test else AUDIT_KINDS
            jobs += [(kind, k) for kind in kinds for k in self.audited]
        return jobs

    def split(self, kernel):
        """Whether the kernel's laws run one process each (LAW_SPLIT; never a kernel held to one law)."""
        return kernel[0] in LAW_SPLIT and "--law" not in kernel[3]

    def check_json(self, kind, name):
        law = kind.partition("-")[2]
        return self.path("check", name + ("." + law if law else "") + ".json")

    def argv(self, kind, kernel):
        a = self.a
        name, spec, _, extra = kernel
        head = [a.flashcheck] if spec is None else [sys.executable, "-m", "flashcheck"]
        if kind.startswith("check"):
            regressions = self.path("regressions", name)
            os.makedirs(regressions, exist_ok=True)
            argv = head + ["check"] + (["--kernel", name] if spec is None else [spec])
            cases = min(a.cases, CASES.get(name, a.cases))
            argv += ["--cases", str(cases), "--seed", str(a.seed), "--json-out", self.check_json(kind, name),
                     "--regressions", regressions, "--save-regressions"] + extra
            if kind != "check":
                argv += ["--law", kind.partition("-")[2]]
        else:
            # Compact tensors: the audit measures errors, the laws (mixed layouts) hold the strides.
            argv = head + ["audit"] + (["--kernel", name] if spec is None else [spec, "--layout", "compact"])
            argv += ["--out", self.path("audit", name + "-" + kind), "--seed", str(a.seed), "--jobs", str(a.threads)]
            if a.self_test:
                argv += sum((["--case", c] for c in SELF_TEST_CASES[:2] if kind == "quick"), [])
                argv += sum((["--case", c] for c in SELF_TEST_CASES[2:] if kind == "n1024"), [])
            elif kind == "quick":
                argv += ["--quick", "--dtype", "F16", "--dtype", "BF16"]
            else:
                argv += sum((["--case", c] for c in LONG_CASES[kind]), [])
        if spec is not None:
            law = kind.partition("-")[2] if kind.startswith("check-") else ""
            timeout = LAW_CALL_TIMEOUT.get(law) or max(a.timeout, CALL_TIMEOUT.get(name, 0))
            argv += ["--timeout", str(timeout)]
        return argv

    def run_one(self, kind, kernel):
        try:
            self._run_one(kind, kernel)
        except Exception as exc:  # noqa: B902 - one run's trouble is its row's, never the whole audit's
            with self.lock:
                self.results[kernel[0]]["runs"][kind] = {"exit": "error", "seconds": 0,
                                                         "note": "%s: %s" % (type(exc).__name__, exc)}
                self.write()

    def budget(self, kind, name):
        if kind == "check":
            return max(self.a.check_budget, CHECK_BUDGET.get(name, 0))
        if kind.startswith("check-"):
            return LAW_BUDGETS.get(kind.partition("-")[2], LAW_BUDGET)
        return self.a.audit_budget

    def _run_one(self, kind, kernel):
        name = kernel[0]
        limit = min(self.budget(kind, name), self.deadline - time.time())
        argv = self.argv(kind, kernel)
        log = self.path("logs", "%s.%s.log" % (name, kind))
        result = {"command": shlex.join(argv[1:] if argv[0] == sys.executable else argv), "limit_s": round(limit)}
        if limit < 5:
            result.update(exit="not run", seconds=0, note="no time left before the overall deadline")
        else:
            env = dict(self.env, **CHECK_SCOPE) if kind.startswith("check") and not self.a.self_test else self.env
            if kind.partition("-")[2] in TRACED_LAWS:
                env = dict(env, FC_TRACE_CALLS="1")
            code, seconds = run(argv, limit, log, env)
            result.update(exit=code, seconds=seconds)
            if kind.startswith("check"):
                result.update(audit_summary.read_check(self.check_json(kind, name), log))
            else:
                result.update(audit_summary.read_audit(self.path("audit", name + "-" + kind, "report.json"), log))
        with self.lock:
            r = self.results[name]
            if kind.startswith("check-"):  # one law of a split kernel: its laws read as one run
                r.setdefault("law_runs", {})[kind.partition("-")[2]] = result
                r["runs"]["check"] = audit_merge.merge_law_runs(r["law_runs"], LAWS)
            else:
                r["runs"][kind] = result
            self.write()
        print("%6.0f s  %-15s %-5s exit %s after %s s" % (time.time() - self.started, name, kind, result["exit"],
                                                         result["seconds"]), flush=True)

    def write(self):
        """OUT/kernels/NAME.json, OUT/results.json and OUT/summary.md as they stand (under the lock)."""
        for name, r in self.results.items():
            atomic_write(self.path("kernels", name + ".json"), json.dumps(r, indent=1) + "\n")
        data = {"command": shlex.join([sys.executable] + sys.argv), "seed": self.a.seed, "cases_per_law": self.a.cases,
                "scope": {} if self.a.self_test else dict(SCOPE, **{"laws: " + k: v for k, v in CHECK_SCOPE.items()}),
                "budget_s": self.a.budget, "seconds": round(time.time() - self.started, 1),
                "baseline": self.kernels[0][0] if self.kernels and self.kernels[0][1] is None else None,
                "kernels": [self.results[k[0]] for k in self.kernels]}
        atomic_write(self.path("results.json"), json.dumps(data, indent=1) + "\n")
        atomic_write(self.path("summary.md"), audit_summary.render(data, self.a.out))


def run(argv, limit, log_path, env):
    """argv in its own process group under a wall-clock limit: (exit code or 'timeout', seconds)."""
    t0 = time.time()
    with open(log_path, "w") as log:
        try:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                    cwd=ADAPTERS)
        except OSError as exc:
            log.write("cannot start %s: %s\n" % (argv[0], exc))
            return "cannot start", 0.0
        try:
            code = proc.wait(timeout=max(limit, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the run, its worker and any compiler it started
            proc.wait()
            code = "timeout"
    return code, round(time.time() - t0, 1)


def atomic_write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv=None):
    a = parse_args(argv)
    if a.self_test and a.flashcheck == "flashcheck" and os.path.exists(os.path.join(ROOT, "build", "cli", "flashcheck")):
        a.flashcheck = os.path.join(ROOT, "build", "cli", "flashcheck")
    a.out = os.path.abspath(a.out)
    for sub in ("check", "audit", "logs", "regressions", "kernels"):
        os.makedirs(os.path.join(a.out, sub), exist_ok=True)
    if not a.self_test and os.path.isdir(a.regressions_from) and \
            os.path.abspath(a.regressions_from) != os.path.join(a.out, "regressions"):
        shutil.copytree(a.regressions_from, os.path.join(a.out, "regressions"), dirs_exist_ok=True)
    with open(os.path.join(a.out, "command.txt"), "w") as f:
        f.write(shlex.join([sys.executable] + sys.argv) + "\n")
    r = Runner(a)
    with r.lock:
        r.write()
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = [pool.submit(r.run_one, kind, k) for kind, k in r.plan()]
        for f in futures:
            f.result()
    with r.lock:
        r.write()
    print(open(os.path.join(a.out, "summary.md")).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
