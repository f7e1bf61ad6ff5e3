"""`python -m flashcheck._worker SPEC`: the worker process of an isolated Python kernel, started by the
suite (flashcheck_run with a worker command). It imports SPEC and serves it on the descriptors it
inherited; a failure to load is reported to the suite as its one-line error."""
import ctypes
import json
import os
import sys


def main(argv):
    for path in reversed(json.loads(os.environ.get("FLASHCHECK_SYS_PATH", "[]"))):
        if path not in sys.path:
            sys.path.insert(0, path)
    from flashcheck import _adapter, _capi, _check

    lib = _capi.lib()
    try:
        if len(argv) != 2:
            raise _check.UsageError("usage: python -m flashcheck._worker MODULE:NAME")
        kernel = _adapter.as_kernel(_check.resolve(argv[1]))
        c_kernel = kernel.c_kernel()
    except Exception as exc:  # noqa: B902 - reported to the suite, which exits 2 with it
        return lib.flashcheck_serve(None, ("%s" % exc).encode(errors="replace"))
    return lib.flashcheck_serve(ctypes.byref(c_kernel), None)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
