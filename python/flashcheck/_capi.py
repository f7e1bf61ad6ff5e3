"""ctypes mirror of <flashcheck/plugin.h> and <flashcheck/flashcheck.h>, and the loading of
libflashcheck.so (the C API the CMake build produces). Nothing here is compiled against Python."""
import ctypes
import os

from . import dtypes

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


DTYPE_CODES = {None: 0, **dtypes.ABI_CODES}  # enum fc_dtype_code, from the contract's dtype table
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


# <flashcheck/flashcheck.h>, version 1 of its structs
WRITE = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p)
_STRINGS = ctypes.POINTER(ctypes.c_char_p)  # a NULL-terminated char*[] (strings())
ORACLES = {"auto": 0, "cpu": 1, "gpu": 2}  # enum flashcheck_oracle
LAYOUTS = {"mixed": 0, "compact": 1}  # enum flashcheck_layout
INCONCLUSIVE_EXIT3, INCONCLUSIVE_FAIL, INCONCLUSIVE_PASS = 0, 1, 2  # enum flashcheck_on_inconclusive
LAW_STATUSES = ("pass", "fail", "inconclusive", "n/a")  # enum flashcheck_law_status


class _Sized(ctypes.Structure):
    """A struct whose first field, struct_size, is set to its size."""

    def __init__(self, **fields):
        super().__init__(**fields)
        self.struct_size = ctypes.sizeof(self)


class Subject(_Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("kernel", ctypes.POINTER(FcKernel)),
        ("worker_argv", _STRINGS),
        ("worker_env", _STRINGS),
        ("replay_prefix", ctypes.c_char_p),
        ("write", WRITE),
        ("write_ctx", ctypes.c_void_p),
    ]


class CheckRequest(_Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("subject", Subject),
        ("cases", ctypes.c_int32),
        ("seed_given", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
        ("law", ctypes.c_char_p), ("reproduce", ctypes.c_char_p), ("case_file", ctypes.c_char_p),
        ("inputs", ctypes.c_char_p), ("regressions", ctypes.c_char_p),
        ("save_regressions", ctypes.c_int32),
        ("timeout_s", ctypes.c_double),
        ("layout", ctypes.c_int32),
        ("max_n", ctypes.c_int32), ("max_batch", ctypes.c_int32), ("max_heads", ctypes.c_int32),
        ("shape_buckets", ctypes.c_int32),
        ("oracle", ctypes.c_int32),
        ("on_inconclusive", ctypes.c_int32),
        ("shrink_faults", ctypes.c_int32),
        ("replay_repeats", ctypes.c_int32),
        ("no_progress", ctypes.c_int32),
        ("json_out", ctypes.c_char_p),
    ]


class AuditRequest(_Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("subject", Subject),
        ("out", ctypes.c_char_p),
        ("quick", ctypes.c_int32),
        ("accumulation", ctypes.c_int32),
        ("kernels", _STRINGS), ("dtypes", _STRINGS), ("regimes", _STRINGS), ("cases", _STRINGS),
        ("seed_given", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
        ("timeout_s", ctypes.c_double),
        ("layout", ctypes.c_int32),
        ("jobs", ctypes.c_int32),
        ("oracle", ctypes.c_int32),
        ("junit", ctypes.c_char_p),
        ("shard", ctypes.c_char_p),
        ("print_json", ctypes.c_int32),
    ]


class LawResult(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("id", ctypes.c_char_p),
        ("status", ctypes.c_int32),
        ("cases", ctypes.c_int64), ("regression_cases", ctypes.c_int64), ("declined", ctypes.c_int64),
        ("message", ctypes.c_char_p),
    ]


class Result(_Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("exit_code", ctypes.c_int32),
        ("error", ctypes.c_char_p),
        ("json", ctypes.POINTER(ctypes.c_char)),
        ("json_size", ctypes.c_size_t),
        ("laws", ctypes.c_void_p),
        ("num_laws", ctypes.c_size_t),
        ("law_size", ctypes.c_size_t),
        ("internal", ctypes.c_void_p),
    ]

    def text(self):
        """The JSON report, decoded ("" when there is none)."""
        return ctypes.string_at(self.json, self.json_size).decode(errors="replace") if self.json_size else ""

    def law(self, i):
        """The i-th law entry (flashcheck_result_law)."""
        return LawResult.from_address(self.laws + i * self.law_size)

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
        handle.flashcheck_run.argtypes = [ctypes.POINTER(Subject), ctypes.c_int, _STRINGS, ctypes.c_char_p,
                                          ctypes.c_size_t]
        handle.flashcheck_check.restype = ctypes.c_int
        handle.flashcheck_check.argtypes = [ctypes.POINTER(CheckRequest), ctypes.POINTER(Result)]
        handle.flashcheck_audit.restype = ctypes.c_int
        handle.flashcheck_audit.argtypes = [ctypes.POINTER(AuditRequest), ctypes.POINTER(Result)]
        handle.flashcheck_result_free.restype = None
        handle.flashcheck_result_free.argtypes = [ctypes.POINTER(Result)]
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


def string_list(items):
    """strings() as the char** a struct field holds (NULL for an empty list); keep the array alive."""
    if not items:
        return None, None
    arr, _ = strings(items)
    return ctypes.cast(arr, _STRINGS), arr
