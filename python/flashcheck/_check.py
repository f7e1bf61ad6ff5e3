"""flashcheck.check: the C++ property suite (every law, generator, bound, shrink, replay line and exit
code of `flashcheck check`) on a Python kernel, through libflashcheck.so."""
import ctypes
import dataclasses
import importlib
import importlib.util
import json
import os
import sys
import tempfile

from . import _adapter, _capi


class UsageError(Exception):
    """Bad usage or input (the CLI's exit 2): the one-line reason."""


@dataclasses.dataclass
class Result:
    exit_code: int  # 0 every law holds, 1 a law failed, 3 none failed and one is inconclusive
    report: str     # the report `flashcheck check` prints
    laws: list      # per law: id, sentence, status (pass/fail/inconclusive/n/a), cases, message, hint, ...
    seed: int = 0

    @property
    def ok(self):
        return self.exit_code == 0

    @property
    def failures(self):
        return [law for law in self.laws if law.get("status") == "fail"]

    @property
    def inconclusive(self):
        return [law for law in self.laws if law.get("status") == "inconclusive"]

    def __bool__(self):
        return self.ok


def resolve(spec):
    """"package.module:name" or "path/to/file.py:name" -> the object (a Kernel or a callable)."""
    module, sep, attr = spec.rpartition(":")
    if not sep or not module or not attr:
        raise UsageError("%r is not MODULE:NAME or FILE.py:NAME" % spec)
    try:
        if module.endswith(".py"):
            name = "_flashcheck_spec_" + os.path.splitext(os.path.basename(module))[0]
            loader = importlib.util.spec_from_file_location(name, module)
            if loader is None:
                raise ImportError("cannot load %s" % module)
            mod = importlib.util.module_from_spec(loader)
            sys.modules[name] = mod
            loader.loader.exec_module(mod)
        else:
            mod = importlib.import_module(module)
        obj = mod
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj
    except Exception as exc:  # noqa: B902 - any failure to find the kernel is a usage error
        raise UsageError("cannot load %s: %s: %s" % (spec, type(exc).__name__, exc)) from None


def _spec_of(obj):
    """MODULE:NAME (or FILE.py:NAME) under which obj can be found again, or None."""
    target = obj.forward if isinstance(obj, _adapter.Kernel) else obj
    for candidate in (obj, target):
        mod = sys.modules.get(getattr(target, "__module__", None) or "")
        if mod is None:
            continue
        for name, value in vars(mod).items():
            if value is candidate and not name.startswith("_"):
                if mod.__name__ != "__main__":
                    return "%s:%s" % (mod.__name__, name)
                if getattr(mod, "__file__", None):
                    return "%s:%s" % (os.path.abspath(mod.__file__), name)
    return None


def _options(cases, seed, law, reproduce, timeout, layout, regressions, save_regressions, extra):
    argv = []
    for flag, value in (("--cases", cases), ("--seed", seed), ("--law", law), ("--reproduce", reproduce),
                        ("--timeout", timeout), ("--layout", layout), ("--regressions", regressions)):
        if value is not None:
            argv += [flag, str(value)]
    if save_regressions:
        argv.append("--save-regressions")
    return argv + list(extra)


def _run(command, kernel, argv, isolate, quiet):
    """flashcheck_run(command argv...) on kernel: (exit code, report text). Raises UsageError (exit 2)."""
    spec = kernel if isinstance(kernel, str) else _spec_of(kernel)
    if isolate is None:
        isolate = isinstance(kernel, str)
    if isolate and spec is None:
        raise UsageError("isolate=True needs a kernel given as 'module:name' (the worker imports it)")
    obj = None
    if not isolate:
        obj = _adapter.as_kernel(resolve(kernel) if isinstance(kernel, str) else kernel)
    prefix = "python -m flashcheck {cmd} %s" % (spec or "MODULE:KERNEL")
    if not isolate:
        prefix += " --isolation none"
    report = []

    @_capi.WRITE
    def write(text, size, ctx):
        chunk = ctypes.string_at(text, size).decode(errors="replace")
        report.append(chunk)
        if not quiet:
            sys.stdout.write(chunk)
            sys.stdout.flush()

    argv = [command] + list(argv)
    c_argv, keep = _capi.strings(argv)
    error = ctypes.create_string_buffer(2048)
    if isolate:
        worker, keep_w = _capi.strings([sys.executable, "-m", "flashcheck._worker", spec])
        saved = {k: os.environ.get(k) for k in ("FLASHCHECK_SYS_PATH", "PYTHONPATH")}
        # The worker imports this package and the spec's module from the same places as this process.
        os.environ["FLASHCHECK_SYS_PATH"] = json.dumps([os.path.abspath(p) for p in sys.path if p])
        os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (_package_root(), saved["PYTHONPATH"]) if x)
        try:
            code = _capi.lib().flashcheck_run(None, worker, prefix.encode(), len(argv), c_argv, write, None, error,
                                              len(error))
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    else:
        code = _capi.lib().flashcheck_run(ctypes.byref(obj.c_kernel()), None, prefix.encode(), len(argv), c_argv,
                                          write, None, error, len(error))
    if obj is not None and obj.interrupted:
        raise KeyboardInterrupt
    if code == 2:
        raise UsageError(error.value.decode(errors="replace"))
    return code, "".join(report)


def check(kernel, *, cases=None, seed=None, law=None, reproduce=None, timeout=None, layout=None, regressions=None,
          save_regressions=False, isolate=None, quiet=False, extra_args=(), max_n=None, max_batch=None,
          max_heads=None, shape_buckets=False):
    """Run every law of flashcheck on `kernel` and return a Result (raise UsageError on bad usage).

    kernel: a flashcheck.Kernel, a callable forward(q, k, v, problem) (wrapped in a default Kernel),
    or a "module:name" / "file.py:name" spec naming one. A spec runs in a worker process (isolate
    defaults to True for it): a crash or hang of the kernel fails its case and a fresh worker goes on.
    A Kernel or callable runs in this process (Python exceptions fail their case). The other options
    are `flashcheck check`'s (cases per law, RapidCheck seed, one law, a replay token, seconds per
    call, "mixed"/"compact" layouts, the regression folder); max_n, max_batch and max_heads bound
    the shapes drawn (`--max-n`, `--max-batch`, `--max-heads`), within what the kernel declares;
    shape_buckets=True draws n_q, n_k as powers of two only (`--shape-buckets`: a kernel that compiles
    per shape meets a few lengths)."""
    extra = list(extra_args)
    for flag, value in (("--max-n", max_n), ("--max-batch", max_batch), ("--max-heads", max_heads)):
        if value is not None:
            extra += [flag, str(int(value))]
    if shape_buckets:
        extra.append("--shape-buckets")
    mine = "--json-out" not in extra  # the caller's own --json-out FILE (python -m flashcheck) is kept
    if mine:
        fd, json_path = tempfile.mkstemp(prefix="flashcheck_", suffix=".json")
        os.close(fd)
        extra += ["--json-out", json_path]
    else:
        at = extra.index("--json-out")
        json_path = extra[at + 1] if at + 1 < len(extra) else ""
    try:
        argv = _options(cases, seed, law, reproduce, timeout, layout, regressions, save_regressions, extra)
        code, report = _run("check", kernel, argv, isolate, quiet)
        data = {}
        if os.path.isfile(json_path) and os.path.getsize(json_path):
            with open(json_path) as f:
                data = json.load(f)
        return Result(code, report, data.get("laws", []), data.get("seed", 0))
    finally:
        if mine:
            os.unlink(json_path)


def audit(kernel, out, *, quick=False, kernels=(), dtypes=(), regimes=(), cases=(), seed=None, timeout=None,
          jobs=None, isolate=None, extra_args=()):
    """`flashcheck audit` with `kernel` as one more subject (beside the registry `kernels` named, e.g.
    "cuda_wgmma"): the error-bound report over the sweep (N up to 16384 with a GPU kernel) written to
    `out` (report.json, .md, .html). Returns (exit code, the parsed report.json)."""
    argv = ["--out", out]
    for flag, values in (("--kernel", kernels), ("--dtype", dtypes), ("--regime", regimes), ("--case", cases)):
        for value in values:
            argv += [flag, value]
    for flag, value in (("--seed", seed), ("--timeout", timeout), ("--jobs", jobs)):
        if value is not None:
            argv += [flag, str(value)]
    if quick:
        argv.append("--quick")
    code, _ = _run("audit", kernel, argv + list(extra_args), isolate, True)
    with open(os.path.join(out, "report.json")) as f:
        return code, json.load(f)


def _package_root():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
