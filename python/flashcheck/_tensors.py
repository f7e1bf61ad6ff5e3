"""The suite's tensors as framework tensors and back, through DLPack and nothing else.

Inputs: each DLTensor the suite hands a kernel (host or CUDA memory, any strides) is presented to the
framework as an object with ``__dlpack__``/``__dlpack_device__`` whose capsule is built here with
ctypes, so ``torch.from_dlpack`` and ``jax.dlpack.from_dlpack`` wrap the suite's memory without a copy.
Outputs: the callable's tensors are exported with their own ``__dlpack__`` and copied into the suite's
by ``flashcheck_copy`` (C), which first checks shape, dtype and device; a pure-Python kernel's nested
lists are written element by element, each value rounded once to the storage type."""
import ctypes
import math
import struct

from . import _capi, dtypes

DTYPES = {dl: d.name for dl, d in dtypes.BY_DLPACK.items()}  # (DLPack code, bits) -> the dtype's name


class CaseError(Exception):
    """A failing case caused by what the callable returned (wrong shape, dtype, device, type)."""


def dtype_name(dl):
    return DTYPES.get((dl.dtype.code, dl.dtype.bits), "code%d/%d" % (dl.dtype.code, dl.dtype.bits))


def shape_of(dl):
    return tuple(dl.shape[i] for i in range(dl.ndim))


def strides_of(dl):
    """Strides in elements (compact row-major when the DLTensor has none)."""
    if dl.strides:
        return tuple(dl.strides[i] for i in range(dl.ndim))
    out, s = [], 1
    for n in reversed(shape_of(dl)):
        out.append(s)
        s *= n
    return tuple(reversed(out))


def is_compact(dl):
    shape, strides, s = shape_of(dl), strides_of(dl), 1
    for n, st in zip(reversed(shape), reversed(strides)):
        if n > 1 and st != s:
            return False
        s *= n
    return True


# ---- inputs: DLTensor -> framework ---------------------------------------------------------------

_py = ctypes.pythonapi
_py.PyCapsule_New.restype = ctypes.py_object
_py.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_py.PyCapsule_GetPointer.restype = ctypes.c_void_p
_py.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_py.PyCapsule_SetName.restype = ctypes.c_int
_py.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_CAPSULE = b"dltensor"
_USED = b"used_dltensor"
_alive = {}  # address -> DLManagedTensor the consumer has not released yet


@ctypes.CFUNCTYPE(None, ctypes.POINTER(_capi.DLManagedTensor))
def _release(managed):
    _alive.pop(ctypes.addressof(managed.contents), None)


class SuiteTensor:
    """One of the suite's tensors behind the DLPack protocol (valid during the call only)."""

    def __init__(self, dl):
        self._dl = dl

    def __dlpack_device__(self):
        return (self._dl.device.device_type, self._dl.device.device_id)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        managed = _capi.DLManagedTensor()
        managed.dl_tensor = self._dl
        managed.deleter = _release
        _alive[ctypes.addressof(managed)] = managed
        return _py.PyCapsule_New(ctypes.addressof(managed), _CAPSULE, None)


def import_tensor(dl, framework):
    """The suite's tensor as a torch tensor, a JAX array, a NumPy array (read-only), or a HostView
    (framework "python")."""
    if framework == "numpy":
        import numpy

        if dl.device.device_type != _capi.kDLCPU:
            raise CaseError("framework 'numpy' needs host tensors (device='cpu')")
        return numpy.from_dlpack(SuiteTensor(dl))
    if framework == "torch":
        import torch

        return torch.from_dlpack(SuiteTensor(dl))
    if framework == "jax":
        import jax.dlpack

        return jax.dlpack.from_dlpack(SuiteTensor(dl))
    return HostView(dl)


# ---- outputs: framework -> DLTensor --------------------------------------------------------------


def _ready(value):
    """Detached from autograd and finished computing, so its memory holds the values."""
    if hasattr(value, "detach"):
        value = value.detach()
        if getattr(value, "is_cuda", False):
            import torch

            torch.cuda.synchronize(value.device)
    if hasattr(value, "block_until_ready"):
        value.block_until_ready()
    return value


def copy_out(value, dst, what):
    """Copy the callable's `what` (o, lse, d_q, ...) into the suite's tensor dst."""
    if isinstance(value, (list, tuple)) and not hasattr(value, "__dlpack__"):
        return write_nested(value, dst, what)
    if isinstance(value, HostView):
        return write_nested(value.tolist(), dst, what)
    if not hasattr(value, "__dlpack__"):
        raise CaseError("%s is a %s, not a tensor" % (what, type(value).__name__))
    value = _ready(value)
    capsule = value.__dlpack__()
    address = _py.PyCapsule_GetPointer(capsule, _CAPSULE)
    managed = ctypes.cast(address, ctypes.POINTER(_capi.DLManagedTensor)).contents
    error = ctypes.create_string_buffer(512)
    try:
        rc = _capi.lib().flashcheck_copy(ctypes.byref(managed.dl_tensor), ctypes.byref(dst), error, len(error))
    finally:  # the consumer's part of the protocol: rename the capsule, then release the tensor
        _py.PyCapsule_SetName(capsule, _USED)
        if managed.deleter:
            managed.deleter(ctypes.cast(address, ctypes.POINTER(_capi.DLManagedTensor)))
    if rc != 0:
        raise CaseError("%s: %s" % (what, error.value.decode(errors="replace")))
    return None


# ---- pure Python: host tensors element by element ------------------------------------------------


def round_to(x, dtype):
    """x rounded once (to nearest, ties to even) to the storage dtype; inf past its range."""
    d = dtypes.BY_NAME.get(dtype)
    d = d if d is not None and d.is_float else dtypes.BY_NAME["F64"]  # (an integer or BOOL: left as it is)
    p, emin, emax = d.precision, d.min_exp, d.max_exp
    if x != x or x in (math.inf, -math.inf) or x == 0 or p == 53:
        return x
    e = max(math.frexp(x)[1] - 1, emin)
    q = math.ldexp(round(math.ldexp(x, p - 1 - e)), e - (p - 1))  # round(): ties to even
    return math.copysign(math.inf, x) if abs(q) > math.ldexp(2 - math.ldexp(1, 1 - p), emax) else q


_FORMATS = {"F16": "e", "F32": "f", "F64": "d", "I32": "i", "BF16": "H", "BOOL": "?"}


class HostView:
    """A host tensor of the suite read and written by index: view[b, h, i, c]; tolist()."""

    def __init__(self, dl):
        if dl.device.device_type != _capi.kDLCPU:
            raise CaseError("framework 'python' needs host tensors (device='cpu')")
        self.shape, self.strides, self.dtype = shape_of(dl), strides_of(dl), dtype_name(dl)
        self._size = dl.dtype.bits // 8
        self._base = dl.data + dl.byte_offset if dl.data else 0
        self._fmt = "<" + _FORMATS[self.dtype]

    def _address(self, idx):
        return self._base + self._size * sum(i * s for i, s in zip(idx, self.strides))

    def __getitem__(self, idx):
        raw = ctypes.string_at(self._address(idx), self._size)
        if self.dtype == "BF16":
            return struct.unpack("<f", struct.pack("<I", struct.unpack("<H", raw)[0] << 16))[0]
        return struct.unpack(self._fmt, raw)[0]

    def __setitem__(self, idx, x):
        x = float(x) if self.dtype != "I32" else int(x)
        if self.dtype == "BF16":
            bits = struct.unpack("<I", struct.pack("<f", round_to(x, "BF16")))[0]
            raw = struct.pack("<H", 0x7FC0 if x != x else bits >> 16)
        else:
            raw = struct.pack(self._fmt, round_to(x, self.dtype) if self.dtype != "I32" else x)
        ctypes.memmove(self._address(idx), raw, self._size)

    def tolist(self):
        def rec(prefix):
            if len(prefix) == len(self.shape):
                return self[tuple(prefix)]
            return [rec(prefix + [i]) for i in range(self.shape[len(prefix)])]

        return rec([])


def write_nested(value, dst, what):
    view = HostView(dst)

    def rec(v, prefix):
        if len(prefix) == len(view.shape):
            view[tuple(prefix)] = v
            return
        n = view.shape[len(prefix)]
        if not isinstance(v, (list, tuple)) or len(v) != n:
            raise CaseError("%s: expected shape %s, got a %s at index %s" % (
                what, view.shape, "%s of length %d" % (type(v).__name__, len(v))
                if isinstance(v, (list, tuple)) else type(v).__name__, tuple(prefix)))
        for i, x in enumerate(v):
            rec(x, prefix + [i])

    rec(value, [])
