"""ctypes mirror of <flashcheck/plugin.h> and <flashcheck/flashcheck.h>, and the loading of
libflashcheck.so (the C API the CMake build produces). Nothing here is compiled against Python."""
import ctypes
import os

# <dlpack/dlpack.h> (DLPack 0.6)
kDLCPU, kDLCUDA = 1, 2
kDLInt, kDLUInt, kDLFloat, kDLBfloat = 0, 1, 2, 4


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))),
]

# <flashcheck/plugin.h>, ABI version 5 (the bridge declares no sinks, so it is never offered them; mask
# tensors and block masks as Kernel(variants=...) declares them)
FC_ABI_VERSION = 5
FC_DL_BOOL = 6  # DLPack's kDLBool: a BOOL tensor (mask tensors, block masks) is {6, 8, 1}
MASKS = ("none", "causal_top_left", "causal_bottom_right")  # enum fc_mask


class FcProblem(ctypes.Structure):
    _fields_ = [
        ("batch", ctypes.c_int32), ("heads_q", ctypes.c_int32), ("heads_kv", ctypes.c_int32),
        ("n_q", ctypes.c_int32), ("n_k", ctypes.c_int32),
        ("d", ctypes.c_int32), ("d_v", ctypes.c_int32),
        ("mask", ctypes.c_int32),
        ("window_left", ctypes.c_int32), ("window_right", ctypes.c_int32),
        ("scale", ctypes.c_double), ("softcap", ctypes.c_double),
        ("probing", ctypes.c_int32), ("config", ctypes.c_int32),
        ("sinks", DLTensor),  # version 4
        ("mask_tensor", DLTensor), ("mask_kind", ctypes.c_int32),  # version 5
        ("block_mask", DLTensor), ("block_q", ctypes.c_int32), ("block_k", ctypes.c_int32),
        ("cu_seqlens_q_padded", DLTensor), ("cu_seqlens_k_padded", DLTensor),  # version 5: never declared here
    ]


DTYPE_CODES = {None: 0, "F16": 1, "BF16": 2, "F32": 3, "F64": 4}  # enum fc_dtype_code
SUMMATIONS = {None: 0, "serial": 1, "tensor_core": 2}  # enum fc_summation
REDUCTIONS = {None: 0, "deterministic": 1, "atomic": 2}  # enum fc_backward_reduction
EXACTNESS = ("rows", "d_q_rows", "shared_scores", "tile_weights", "exact_scores")


class FcLengths(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("multiple_of", "residue", "min", "max")]


class FcArithmetic(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("summation", "accumulator", "fused_products", "p_unrounded", "p_type",
                                              "block_m", "block_n")] + [
        ("exp_ulps", ctypes.c_double), ("log_ulps", ctypes.c_double),
        ("exp_exact_at_zero", ctypes.c_int32), ("flushes_subnormals", ctypes.c_int32)]


class FcExactness(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in EXACTNESS]


class FcConfig(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("block_m", "block_n", "splits", "deterministic")]


class FcDtypes(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("q", "kv", "o")]


class FcDeclarations(ctypes.Structure):
    _fields_ = [
        ("n_q", FcLengths), ("n_k", FcLengths),
        ("max_batch", ctypes.c_int32), ("max_heads", ctypes.c_int32),
        ("head_dims", ctypes.POINTER(ctypes.c_int32)), ("num_head_dims", ctypes.c_int32),
        ("scale", ctypes.c_double),
        ("arithmetic", FcArithmetic),
        ("exact", FcExactness),
        ("backward_reduction", ctypes.c_int32),
        ("configs", ctypes.POINTER(FcConfig)), ("num_configs", ctypes.c_int32),
        ("large_offsets", ctypes.c_int32),
        ("dtypes", ctypes.POINTER(FcDtypes)), ("num_dtypes", ctypes.c_int32),  # version 4
        ("sinks", ctypes.c_int32),  # version 4: 0
        ("mask_tensors", ctypes.c_int32), ("mask_dtypes", ctypes.c_int32),  # version 5: 0
        ("block_masks", ctypes.c_int32),  # version 5: 0
        ("padded_varlen", ctypes.c_int32),  # version 5: 0
    ]


class FcForwardArgs(ctypes.Structure):
    _fields_ = [(n, DLTensor) for n in
                ("q", "k", "v", "o", "lse", "cu_seqlens_q", "cu_seqlens_k", "page_table", "alibi_slopes")]


class FcBackwardArgs(ctypes.Structure):
    _fields_ = [("fwd", FcForwardArgs)] + [(n, DLTensor) for n in ("d_o", "d_q", "d_k", "d_v")]


SUPPORTS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(FcProblem), ctypes.POINTER(FcForwardArgs))
FORWARD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(FcProblem), ctypes.POINTER(FcForwardArgs), ctypes.c_void_p)
BACKWARD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(FcProblem), ctypes.POINTER(FcBackwardArgs), ctypes.c_void_p)
LAST_ERROR = ctypes.CFUNCTYPE(ctypes.c_void_p)  # a char* the adapter keeps alive


class FcKernel(ctypes.Structure):
    _fields_ = [
        ("abi_version", ctypes.c_int32),
        ("name", ctypes.c_char_p),
        ("device_type", ctypes.c_int32),
        ("writes_lse", ctypes.c_int32),
        ("supports", SUPPORTS),
        ("forward", FORWARD),
        ("backward", BACKWARD),
        ("last_error", LAST_ERROR),
        ("declarations", ctypes.POINTER(FcDeclarations)),
        ("merge", ctypes.c_void_p),  # version 5: NULL (an attention kernel, not a merge-state kernel)
    ]


# <flashcheck/flashcheck.h>
WRITE = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p)

_lib = None


class LibraryNotFound(FileNotFoundError):
    """No libflashcheck.so where this package looks."""


class LoadError(ImportError):
    """libflashcheck.so is there but does not load (a library it needs is missing)."""


def _candidates():
    env = os.environ.get("FLASHCHECK_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, "lib", "libflashcheck.so")]  # the wheel's (setup.py)
    try:  # written by `cmake --install`: where the library went
        from . import _install  # noqa: WPS433

        out.append(_install.LIBRARY)
    except ImportError:
        pass
    out.append(os.path.join(os.path.dirname(os.path.dirname(here)), "build", "capi", "libflashcheck.so"))
    return out


def library_path():
    """The libflashcheck.so this package uses (FLASHCHECK_LIBRARY overrides the search)."""
    for path in _candidates():
        if os.path.isfile(path):
            return path
    raise LibraryNotFound(
        "libflashcheck.so not found (looked at %s); `pip install .` from a clone, build flashcheck with CMake "
        "and install it, or set FLASHCHECK_LIBRARY to the library's path" % ", ".join(_candidates()))


def lib():
    global _lib
    if _lib is None:
        path = library_path()
        try:
            handle = ctypes.CDLL(path)  # the GIL is released during calls; callbacks take it back
        except OSError as exc:  # a library it needs is missing: the loader's message names it
            raise LoadError("cannot load %s: %s" % (path, " ".join(str(exc).split()))) from None
        handle.flashcheck_run.restype = ctypes.c_int
        handle.flashcheck_run.argtypes = [
            ctypes.POINTER(FcKernel), ctypes.POINTER(ctypes.c_char_p), ctypes.c_char_p, ctypes.c_int,
            ctypes.POINTER(ctypes.c_char_p), WRITE, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        handle.flashcheck_serve.restype = ctypes.c_int
        handle.flashcheck_serve.argtypes = [ctypes.POINTER(FcKernel), ctypes.c_char_p]
        handle.flashcheck_copy.restype = ctypes.c_int
        handle.flashcheck_copy.argtypes = [ctypes.POINTER(DLTensor), ctypes.POINTER(DLTensor), ctypes.c_char_p,
                                           ctypes.c_size_t]
        handle.flashcheck_version.restype = ctypes.c_char_p
        handle.flashcheck_probing.restype = ctypes.c_int
        handle.flashcheck_probing.argtypes = []
        _lib = handle
    return _lib


def strings(items):
    """A NULL-terminated char*[] (and the buffers it points into, to keep alive)."""
    encoded = [s.encode() for s in items]
    arr = (ctypes.c_char_p * (len(encoded) + 1))(*encoded, None)
    return arr, encoded
