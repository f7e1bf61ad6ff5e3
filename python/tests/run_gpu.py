"""The bridge's GPU tests (ctest label gpu): exit 77 (skipped) without torch or a CUDA device, else
pytest over test_torch.py."""
import os
import sys

try:
    import torch
except ImportError:
    print("torch is not installed: skipped")
    sys.exit(77)
if not torch.cuda.is_available():
    print("no CUDA device: skipped")
    sys.exit(77)
import pytest  # noqa: E402

# -q unless the caller asks for its own verbosity (scripts/device.sh external passes -v: one line per test).
quiet = [] if any(a.startswith("-v") for a in sys.argv[1:]) else ["-q"]
sys.exit(pytest.main([os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_torch.py"), "-p",
                      "no:cacheprovider"] + quiet + sys.argv[1:]))
