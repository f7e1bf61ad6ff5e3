"""`python -m flashcheck check|audit MODULE:NAME [--isolation process|none] [options]`: what a replay
line of a Python kernel runs (the options are the CLI's). `python -m flashcheck version` prints the
library's version."""
import sys

from . import _capi, _check


def main(argv):
    if len(argv) >= 1 and argv[0] == "version":
        from . import version

        try:
            print(version())
        except (_capi.LibraryNotFound, _capi.LoadError) as exc:
            sys.stderr.write("flashcheck: %s\n" % " ".join(str(exc).split()))
            return 2
        return 0
    if len(argv) < 2 or argv[0] not in ("check", "audit") or argv[1].startswith("-"):
        sys.stderr.write("flashcheck: usage: python -m flashcheck check|audit MODULE:NAME [--isolation process|none] "
                         "[options of flashcheck check|audit]\n")
        return 2
    spec, rest, isolate = argv[1], list(argv[2:]), True
    if "--isolation" in rest:
        at = rest.index("--isolation")
        value = rest[at + 1] if at + 1 < len(rest) else ""
        if value not in ("process", "none"):
            sys.stderr.write("flashcheck: --isolation takes process or none\n")
            return 2
        isolate = value == "process"
        del rest[at:at + 2]
    try:
        return _check.run_cli(argv[0], spec, rest, isolate)
    except (_check.UsageError, _capi.LibraryNotFound, _capi.LoadError) as exc:
        sys.stderr.write("flashcheck: %s\n" % " ".join(str(exc).split()))
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
