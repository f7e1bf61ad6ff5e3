"""flashcheck for kernels written in Python (torch, JAX, or plain Python): the C++ property suite of
flashcheck (certified references, error bounds, every law, shrinking, replay) over a callable.

    import flashcheck
    kernel = flashcheck.Kernel(my_attention, device="cuda", dtypes=["F16", "BF16"], writes_lse=False)
    result = flashcheck.check(kernel)            # or flashcheck.check("mypkg.attn:kernel"), isolated
    assert result.ok, result.report

Pure Python over libflashcheck.so's C API (ctypes); tensors cross as DLPack, without copies of the
kernel's inputs."""
from ._adapter import Kernel, Problem
from ._capi import library_path
from ._check import Result, UsageError, audit, check
from ._tensors import HostView

__all__ = ["Kernel", "Problem", "Result", "UsageError", "audit", "check", "library_path", "HostView", "version"]


def version():
    """The C library's version line, e.g. "flashcheck 0.1.0 (plugin ABI 2)"."""
    from . import _capi

    return _capi.lib().flashcheck_version().decode()
