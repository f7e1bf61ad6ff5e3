"""flashcheck.check: the C++ property suite (every law, generator, bound, shrink, replay line and exit
code of `flashcheck check`) on a Python kernel, through libflashcheck.so."""
import ctypes
import dataclasses
import importlib
import importlib.util
import json
import os
import sys

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


# The flags of `flashcheck check` and `flashcheck audit` that extra_args may hold, as the request's field
# and the kind of value: int, float, str, a list entry ("append"), a flag (None) or an enum's table.
_CHECK_FLAGS = {
    "--cases": ("cases", int), "--seed": ("seed", int), "--law": ("law", str), "--reproduce": ("reproduce", str),
    "--case": ("case_file", str), "--inputs": ("inputs", str), "--regressions": ("regressions", str),
    "--save-regressions": ("save_regressions", None), "--timeout": ("timeout_s", float),
    "--layout": ("layout", _capi.LAYOUTS), "--max-n": ("max_n", int), "--max-batch": ("max_batch", int),
    "--max-heads": ("max_heads", int), "--shape-buckets": ("shape_buckets", None),
    "--oracle": ("oracle", _capi.ORACLES), "--fail-on-inconclusive": ("fail_on_inconclusive", None),
    "--allow-inconclusive": ("allow_inconclusive", None), "--shrink-faults": ("shrink_faults", int),
    "--replay-repeats": ("replay_repeats", int), "--no-progress": ("no_progress", None),
    "--json-out": ("json_out", str),
}
_AUDIT_FLAGS = {
    "--out": ("out", str), "--quick": ("quick", None), "--accumulation": ("accumulation", None),
    "--kernel": ("kernels", "append"), "--dtype": ("dtypes", "append"), "--regime": ("regimes", "append"),
    "--case": ("cases", "append"), "--seed": ("seed", int), "--timeout": ("timeout_s", float),
    "--layout": ("layout", _capi.LAYOUTS), "--jobs": ("jobs", int), "--oracle": ("oracle", _capi.ORACLES),
    "--junit": ("junit", str), "--shard": ("shard", str), "--json": ("print_json", None),
}


def _parse_extra(command, args, table):
    """extra_args (the CLI's flags) as {field: value}; UsageError for a flag the command does not take."""
    out, args = {}, list(args)
    while args:
        flag, value = args.pop(0), None
        if "=" in flag and flag.startswith("--"):
            flag, value = flag.split("=", 1)
        if flag not in table:
            raise UsageError("%s: unknown option %s (options: %s)" % (command, flag, ", ".join(sorted(table))))
        field, kind = table[flag]
        if kind is None:
            if value is not None:
                raise UsageError("%s takes no value" % flag)
            out[field] = True
            continue
        if value is None:
            if not args:
                raise UsageError("%s needs a value" % flag)
            value = args.pop(0)
        if kind == "append":
            for part in value.split(","):
                out.setdefault(field, []).append(part)
        elif isinstance(kind, dict):
            if value not in kind:
                raise UsageError("%s %s: expected %s" % (flag, value, " or ".join(kind)))
            out[field] = value
        else:
            try:
                out[field] = kind(value)
            except ValueError:
                raise UsageError("%s %s: not %s" % (flag, value, "a number" if kind is float else "an integer")) \
                    from None
    return out


def _enum(table, flag, value):
    if value is None:
        return 0
    if value not in table:
        raise UsageError("%s %r: expected %s" % (flag, value, " or ".join(table)))
    return table[value]


# The request's fields where 0 stands for the CLI's default (or no bound): a 0 given is refused, as the
# CLI refuses it.
_NONZERO = {"cases": "--cases", "shrink_faults": "--shrink-faults", "timeout_s": "--timeout", "max_n": "--max-n",
            "max_batch": "--max-batch", "max_heads": "--max-heads", "jobs": "--jobs"}


def _number(o, field, kind=int):
    """o[field] for the request (0 when absent), a given 0 refused where 0 is the default."""
    value = o.get(field)
    if value is None:
        return kind(0)
    if field in _NONZERO and value == 0:
        raise UsageError("%s 0: expected a value above 0" % _NONZERO[field])
    return kind(value)


def _seed(req, value):
    if value is not None:
        value = int(value)
        if not 0 <= value < 2 ** 64:
            raise UsageError("--seed %d: expected an integer from 0 to 2^64 - 1" % value)
        req.seed_given, req.seed = 1, value


def _bytes(value):
    return None if value is None else os.fspath(value).encode()


def _package_root():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Subject:
    """The subject struct of a request (a kernel in this process, or the worker command that serves a
    spec, with the worker's environment), and everything its pointers point into."""

    def __init__(self, kernel, isolate, quiet):
        spec = kernel if isinstance(kernel, str) else _spec_of(kernel)
        if isolate is None:
            isolate = isinstance(kernel, str)
        if isolate and spec is None:
            raise UsageError("isolate=True needs a kernel given as 'module:name' (the worker imports it)")
        self.obj = None if isolate else _adapter.as_kernel(resolve(kernel) if isinstance(kernel, str) else kernel)
        prefix = "python -m flashcheck {cmd} %s" % (spec or "MODULE:KERNEL")
        if not isolate:
            prefix += " --isolation none"
        self.chunks = []

        @_capi.WRITE
        def write(text, size, ctx):
            chunk = ctypes.string_at(text, size).decode(errors="replace")
            self.chunks.append(chunk)
            if not quiet:
                sys.stdout.write(chunk)
                sys.stdout.flush()

        self.write = write
        self.c = _capi.Subject(replay_prefix=prefix.encode(), write=write)
        if isolate:
            # The worker imports this package and the spec's module from the same places as this process:
            # its own environment says where (this process's is left as it is).
            env = ["FLASHCHECK_SYS_PATH=" + json.dumps([os.path.abspath(p) for p in sys.path if p]),
                   "PYTHONPATH=" + os.pathsep.join(x for x in (_package_root(), os.environ.get("PYTHONPATH")) if x)]
            self.c.worker_argv, self.argv = _capi.string_list([sys.executable, "-m", "flashcheck._worker", spec])
            self.c.worker_env, self.env = _capi.string_list(env)
        else:
            self.c_kernel = self.obj.c_kernel()
            self.c.kernel = ctypes.pointer(self.c_kernel)

    def report(self):
        return "".join(self.chunks)

    def after(self, code, error):
        """Raises KeyboardInterrupt when the kernel was interrupted, UsageError on exit 2."""
        if self.obj is not None and self.obj.interrupted:
            raise KeyboardInterrupt
        if code == 2:
            raise UsageError(error)


def _call(function, request, subject):
    """function(request) -> (exit code, the JSON report, the law entries); raises UsageError on exit 2."""
    result = _capi.Result()
    code = function(ctypes.byref(request), ctypes.byref(result))
    try:
        if result.struct_size != ctypes.sizeof(result) or (code == 2 and not result.error):
            raise UsageError("libflashcheck.so did not take the request (a library of another version?)")
        error, text = (result.error or b"").decode(errors="replace"), result.text()
        laws = [result.law(i) for i in range(result.num_laws)]
        entries = [(law.id.decode(), _capi.LAW_STATUSES[law.status]) for law in laws]
    finally:
        _capi.lib().flashcheck_result_free(ctypes.byref(result))
    subject.after(code, error)
    return code, text, entries


def run_cli(command, spec, argv, isolate):
    """`python -m flashcheck check|audit SPEC [options]`: the CLI's parser on argv (flashcheck_run)."""
    subject = _Subject(spec, isolate, False)
    c_argv, keep = _capi.strings([command] + list(argv))
    error = ctypes.create_string_buffer(2048)
    code = _capi.lib().flashcheck_run(ctypes.byref(subject.c), len(argv) + 1, c_argv, error, len(error))
    subject.after(code, error.value.decode(errors="replace"))
    return code


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
    per shape meets a few lengths). extra_args: any other option of `flashcheck check`, as on its
    command line (e.g. ("--oracle", "gpu"))."""
    o = {k: v for k, v in (("cases", cases), ("seed", seed), ("law", law), ("reproduce", reproduce),
                           ("timeout_s", timeout), ("layout", layout), ("regressions", regressions),
                           ("max_n", max_n), ("max_batch", max_batch), ("max_heads", max_heads)) if v is not None}
    o.update(save_regressions=bool(save_regressions), shape_buckets=bool(shape_buckets))
    o.update(_parse_extra("check", extra_args, _CHECK_FLAGS))
    subject = _Subject(kernel, isolate, quiet)
    req = _capi.CheckRequest(subject=subject.c)
    for field in ("cases", "max_n", "max_batch", "max_heads", "shrink_faults"):
        setattr(req, field, _number(o, field))
    if "replay_repeats" in o:  # the request's 0 is the default (10), -1 none
        req.replay_repeats = int(o["replay_repeats"]) or -1
    _seed(req, o.get("seed"))
    for field in ("law", "reproduce", "case_file", "inputs", "regressions", "json_out"):
        setattr(req, field, _bytes(o.get(field)))
    req.timeout_s = _number(o, "timeout_s", float)
    req.layout = _enum(_capi.LAYOUTS, "--layout", o.get("layout"))
    req.oracle = _enum(_capi.ORACLES, "--oracle", o.get("oracle"))
    req.on_inconclusive = (_capi.INCONCLUSIVE_FAIL if o.get("fail_on_inconclusive") else
                           _capi.INCONCLUSIVE_PASS if o.get("allow_inconclusive") else _capi.INCONCLUSIVE_EXIT3)
    if o.get("fail_on_inconclusive") and o.get("allow_inconclusive"):
        raise UsageError("--fail-on-inconclusive and --allow-inconclusive exclude each other")
    for field in ("save_regressions", "shape_buckets", "no_progress"):
        setattr(req, field, 1 if o.get(field) else 0)
    code, text, _ = _call(_capi.lib().flashcheck_check, req, subject)
    data = json.loads(text) if text else {}
    return Result(code, subject.report(), data.get("laws", []), data.get("seed", 0))


def audit(kernel, out, *, quick=False, kernels=(), dtypes=(), regimes=(), cases=(), seed=None, timeout=None,
          jobs=None, isolate=None, extra_args=()):
    """`flashcheck audit` with `kernel` as one more subject (beside the registry `kernels` named, e.g.
    "cuda_wgmma"): the error-bound report over the sweep (N up to 131072 with a GPU kernel) written to
    `out` (report.json, .md, .html). Returns (exit code, the report, as report.json has it)."""
    o = {"out": out, "quick": quick, "kernels": list(kernels), "dtypes": list(dtypes), "regimes": list(regimes),
         "cases": list(cases), "seed": seed, "timeout_s": timeout, "jobs": jobs}
    for field, value in _parse_extra("audit", extra_args, _AUDIT_FLAGS).items():
        o[field] = o[field] + value if isinstance(value, list) else value
    subject = _Subject(kernel, isolate, False)
    req = _capi.AuditRequest(subject=subject.c)
    keep = []
    for field in ("kernels", "dtypes", "regimes", "cases"):
        ptr, arr = _capi.string_list(o[field])
        setattr(req, field, ptr)
        keep.append(arr)
    for field in ("out", "junit", "shard"):
        setattr(req, field, _bytes(o.get(field)))
    _seed(req, o.get("seed"))
    req.timeout_s = _number(o, "timeout_s", float)
    req.jobs = _number(o, "jobs")
    req.layout = _enum(_capi.LAYOUTS, "--layout", o.get("layout"))
    req.oracle = _enum(_capi.ORACLES, "--oracle", o.get("oracle"))
    for field in ("quick", "accumulation", "print_json"):
        setattr(req, field, 1 if o.get(field) else 0)
    code, text, _ = _call(_capi.lib().flashcheck_audit, req, subject)
    return code, json.loads(text)
