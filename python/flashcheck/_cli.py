"""The `flashcheck` console script of the wheel (setup.py): runs the flashcheck CLI the wheel carries
(flashcheck/bin/flashcheck), with its arguments."""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "flashcheck")
    if not os.access(exe, os.X_OK):
        sys.stderr.write("flashcheck: %s not found: this flashcheck package was not installed by pip "
                         "(build/cli/flashcheck is the CMake build's CLI)\n" % exe)
        return 2
    os.execv(exe, [exe] + sys.argv[1:])
    return 2  # not reached: execv replaces the process or raises


if __name__ == "__main__":
    sys.exit(main())
