"""A Python callable as a kernel of the plugin ABI (<flashcheck/plugin.h>): ctypes callbacks that
present the suite's tensors to the callable through DLPack and copy its outputs back. A Python
exception, a wrong shape, dtype or device is the case's failure (last_error's text), never a crash."""
import ctypes
import dataclasses
import os
import traceback

from . import _capi, _tensors, dtypes

DTYPES = dtypes.FLOATS  # a problem's storage dtypes
SWEPT = dtypes.SWEPT  # the kernel floats (F16, BF16, F32): the default dtypes, additive masks' dtypes
VARIANTS = ("d_v", "window", "softcap", "varlen", "paged", "alibi", "mask_bool", "mask_additive", "block_mask")
MASK_KINDS = ("none", "bool", "additive")  # fc_problem.mask_kind


@dataclasses.dataclass(frozen=True)
class Problem:
    """What one call computes: the shapes (q (batch, heads_q, n_q, d), k (batch, heads_kv, n_k, d),
    v (batch, heads_kv, n_k, d_v)), the mask ("none", "causal_top_left" as SDPA's is_causal,
    "causal_bottom_right" as FlashAttention's), scale, the variants, and the storage dtype."""

    batch: int
    heads_q: int
    heads_kv: int
    n_q: int
    n_k: int
    d: int
    d_v: int
    mask: str
    window_left: int
    window_right: int
    scale: float
    softcap: float
    dtype: str
    cu_seqlens_q: object = None  # the variants' tensors, in the kernel's framework, when present
    cu_seqlens_k: object = None
    page_table: object = None
    alibi_slopes: object = None
    strides: dict = None  # {"q", "k", "v", "o": strides in elements} of this call's tensors
    shapes: dict = None   # {"q", "k", "v", "o": shapes} (varlen (total, heads, d); paged k, v (pages, page_size,
    #                       heads_kv, d))
    varlen: bool = False  # the variants in use (also known in supports(), where their tensors are None)
    page_size: int = 0    # paged K/V: keys per page; 0: not paged
    alibi: bool = False
    probing: bool = False  # supports() asked by flashcheck's start-up probe (what the kernel takes at all,
    #                        on made-up shapes), not for a case: each case is asked again before it runs
    config: int = 0  # index into Kernel(configs=...) this call runs under (0 when none are declared)
    dtype_kv: str = None  # k's and v's dtype (dtype: q's), and o's: they differ only for a kernel that
    dtype_o: str = None   # declares per-tensor dtypes (Kernel(dtypes=[("F32", "F16", "F32")]))
    # Contract v3 (docs/SEMANTICS.md, "Mask tensors"), dense problems only: mask_kind "bool" (mask_tensor
    # BOOL, true = the key takes part) or "additive" (F32/F16/BF16, added to the score after softcap and
    # ALiBi, -inf hides), (B_m, H_m, n_q, n_k) with B_m, H_m 1 or full; block_mask BOOL (B_m, H_m,
    # ceil(n_q / block_q), ceil(n_k / block_k)). The tensors are None in supports().
    mask_kind: str = "none"
    mask_tensor: object = None
    block_mask: object = None
    block_q: int = 0
    block_k: int = 0
    mask_dtype: str = None  # the mask tensor's dtype ("BOOL", "F32", "F16", "BF16"), known in supports() too
    mask_shape: tuple = None  # its shape (B_m, H_m, n_q, n_k); block_mask_shape the block mask's
    block_mask_shape: tuple = None

    @property
    def is_causal(self):
        return self.mask != "none"

    @property
    def gqa_group(self):
        return self.heads_q // self.heads_kv


def _variants_of(p, a):
    used = set()
    if p.d_v != p.d:
        used.add("d_v")
    if p.window_left != -1 or p.window_right != -1:
        used.add("window")
    if p.softcap != 0:
        used.add("softcap")
    # A variant's tensors are present (ndim > 0) exactly when the problem uses it; their data are NULL
    # while flashcheck probes supports().
    if a.cu_seqlens_q.ndim or a.cu_seqlens_k.ndim:
        used.add("varlen")
    if a.page_table.ndim:
        used.add("paged")
    if a.alibi_slopes.ndim:
        used.add("alibi")
    if p.mask_kind == 1:  # version 5 (the bridge's fc_problem is the whole struct)
        used.add("mask_bool")
    if p.mask_kind == 2:
        used.add("mask_additive")
    if p.block_q > 0:
        used.add("block_mask")
    return used


def _one_line(exc):
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        f = frames[-1]
        where = " (%s:%d in %s)" % (os.path.basename(f.filename), f.lineno, f.name)
    text = "%s: %s" % (type(exc).__name__, exc) if not isinstance(exc, _tensors.CaseError) else str(exc)
    return (" ".join(text.split()) + where)[:1500]


class Kernel:
    """An attention kernel written in Python, with what it implements.

    forward(q, k, v, problem) -> a tuple (o, lse), or o: q, k, v are framework tensors (torch, jax, or
    flashcheck HostViews for framework "python") shaped (batch, heads, n, d) in the suite's memory;
    o must be (batch, heads_q, n_q, d_v) in o's dtype (problem.dtype_o: q's unless declared otherwise) on
    q's device, lse (batch, heads_q, n_q) float32.
    dtypes: the storage dtypes taken, each a name ("F16", one dtype for q, k, v and o) or a (q, kv, o)
    triple of names for per-tensor dtypes (("F32", "F16", "F32"): an fp16 K/V cache beside fp32 q and o);
    with a triple the list is declared (fc_declarations.dtypes) and exactly its entries are drawn.
    backward: "autograd" (torch autograd / jax.vjp through forward), None (no backward), or a callable
    (q, k, v, o, lse, d_o, problem) -> (d_q, d_k, d_v).
    framework: "torch", "jax", "numpy" (host only; read-only arrays, no BF16) or "python".

    Declarations (docs/python.md, "Declarations"; each a claim the laws hold the kernel to):
    n_q, n_k: the lengths taken, a dict of multiple_of, residue, min, max (e.g. {"multiple_of": 64});
    max_batch, max_heads: bounds; scale: the one softmax scale taken; arithmetic: a dict of
    summation ("serial" or "tensor_core"), accumulator ("F32", "F16"), fused_products, p_unrounded,
    p_type, block_m, block_n, exp_ulps, log_ulps, exp_exact_at_zero, flushes_subnormals; exact: the
    exactness claims (rows, d_q_rows, shared_scores, tile_weights, exact_scores); backward_reduction:
    "deterministic" or "atomic"; configs: a list of dicts of block_m, block_n, splits, deterministic,
    the call's one given as problem.config; large_offsets: 64-bit indexing."""

    def __init__(self, forward, backward="autograd", *, name=None, device=None, dtypes=None,
                 masks=_capi.MASKS, head_dims=None, gqa=True, writes_lse=True, variants=(), contiguous=False,
                 supports=None, framework=None, n_q=None, n_k=None, max_batch=0, max_heads=0, scale=0.0,
                 arithmetic=None, exact=(), backward_reduction=None, configs=(), large_offsets=False):
        if not callable(forward):
            raise TypeError("forward must be callable")
        self.forward = forward
        self.framework = framework or _default_framework()
        if self.framework in ("numpy", "python") and backward == "autograd":
            backward = None  # no autograd there: a callable or nothing
        self.backward = backward
        if device is None:  # host arrays for NumPy and plain Python, the GPU for torch and JAX
            device = "cpu" if self.framework in ("numpy", "python") else "cuda"
        if dtypes is None:  # NumPy has no bfloat16
            dtypes = tuple(t for t in SWEPT if self.framework != "numpy" or t != "BF16")
        self.name = name or getattr(forward, "__name__", "python_kernel").replace("<", "").replace(">", "")
        self.device = device
        sets = [tuple(x) if isinstance(x, (tuple, list)) else (x, x, x) for x in dtypes]
        bad = [x for x in dtypes if not isinstance(x, (tuple, list)) and x not in DTYPES]
        bad += [x for x in dtypes if isinstance(x, (tuple, list)) and (len(x) != 3 or any(t not in DTYPES for t in x))]
        bad += [m for m in masks if m not in _capi.MASKS]
        bad += [v for v in variants if v not in VARIANTS]
        bad += [device] if device not in ("cpu", "cuda") else []
        bad += [self.framework] if self.framework not in ("torch", "jax", "numpy", "python") else []
        if bad:
            raise ValueError("unknown dtype, mask, variant, device or framework: %s" % ", ".join(map(str, bad)))
        if self.framework in ("numpy", "python") and device != "cpu":
            raise ValueError("framework %r runs on host tensors: device='cpu'" % self.framework)
        if len(set(sets)) != len(sets):
            raise ValueError("dtypes: an entry is given twice")
        if self.framework == "numpy" and any("BF16" in x for x in sets):
            raise ValueError("NumPy has no bfloat16: leave BF16 out of dtypes")
        if backward is not None and not callable(backward) and backward != "autograd":
            raise ValueError("backward is 'autograd', None or a callable (q, k, v, o, lse, d_o, problem)")
        self.dtypes, self.masks, self.variants = tuple(dtypes), tuple(masks), set(variants)
        # Per-tensor dtypes: a triple declares the whole list; names alone are probed as before.
        self._dtype_sets = tuple(sets) if any(isinstance(x, (tuple, list)) for x in dtypes) else None
        self.head_dims = None if head_dims is None else set(head_dims)
        self.gqa, self.writes_lse, self.contiguous, self.user_supports = gqa, writes_lse, contiguous, supports
        self._declarations = _declarations(n_q, n_k, max_batch, max_heads, scale, arithmetic, exact,
                                           backward_reduction, configs, large_offsets, self.head_dims,
                                           self._dtype_sets, self.variants)
        self.configs = [dict(c) for c in configs]
        self.interrupted = False
        self._error = ctypes.create_string_buffer(2048)
        self._c = None

    # -- the ABI struct (built once, kept alive with its callbacks) --
    def c_kernel(self):
        if self._c is None:
            self._callbacks = (_capi.SUPPORTS(self._supports), _capi.FORWARD(self._forward),
                               _capi.BACKWARD(self._backward) if self.backward else _capi.BACKWARD(),
                               _capi.LAST_ERROR(self._last_error))
            self._name = self.name.encode()
            self._c = _capi.FcKernel(_capi.FC_ABI_VERSION, self._name,
                                     _capi.kDLCUDA if self.device == "cuda" else _capi.kDLCPU,
                                     1 if self.writes_lse else 0, *self._callbacks,
                                     ctypes.pointer(self._declarations[0]))
        return self._c

    def _last_error(self):
        return ctypes.addressof(self._error)

    def _fail(self, exc):
        if isinstance(exc, KeyboardInterrupt):
            self.interrupted = True
        self._error.value = _one_line(exc).encode(errors="replace")[: len(self._error) - 1]
        return 1

    def _problem(self, p, a, probing=False):
        extra = {}
        for field in ("cu_seqlens_q", "cu_seqlens_k", "page_table", "alibi_slopes"):
            dl = getattr(a, field)
            if dl.data:
                extra[field] = _tensors.import_tensor(dl, self.framework)
        for field in ("mask_tensor", "block_mask"):
            dl = getattr(p, field)
            if dl.data:
                extra[field] = _tensors.import_tensor(dl, self.framework)
        dense = ("q", "k", "v", "o")
        strides = {t: _tensors.strides_of(getattr(a, t)) for t in dense}
        shapes = {t: _tensors.shape_of(getattr(a, t)) for t in dense}
        used = _variants_of(p, a)
        return Problem(p.batch, p.heads_q, p.heads_kv, p.n_q, p.n_k, p.d, p.d_v, _capi.MASKS[p.mask], p.window_left,
                       p.window_right, p.scale, p.softcap, _tensors.dtype_name(a.q), strides=strides, shapes=shapes,
                       varlen="varlen" in used, page_size=shapes["k"][1] if "paged" in used else 0,
                       alibi="alibi" in used, probing=probing or bool(p.probing), config=p.config,
                       dtype_kv=_tensors.dtype_name(a.k), dtype_o=_tensors.dtype_name(a.o),
                       mask_kind=MASK_KINDS[p.mask_kind] if 0 <= p.mask_kind < 3 else "none", block_q=p.block_q,
                       block_k=p.block_k,
                       mask_dtype=_tensors.dtype_name(p.mask_tensor) if p.mask_tensor.ndim else None,
                       mask_shape=_tensors.shape_of(p.mask_tensor) if p.mask_tensor.ndim else None,
                       block_mask_shape=_tensors.shape_of(p.block_mask) if p.block_mask.ndim else None, **extra)

    def _supports(self, pp, pa):
        try:
            p, a = pp.contents, pa.contents
            if self.interrupted:
                return 0
            if self._dtype_sets is None and _tensors.dtype_name(a.q) not in self.dtypes:
                return 0
            if self._dtype_sets is not None and tuple(_tensors.dtype_name(t) for t in (a.q, a.k, a.o)) not in \
                    self._dtype_sets:
                return 0
            if not 0 <= p.mask < 3 or _capi.MASKS[p.mask] not in self.masks:
                return 0
            if self.head_dims is not None and (p.d not in self.head_dims or p.d_v not in self.head_dims):
                return 0
            if not self.gqa and p.heads_q != p.heads_kv:
                return 0
            if not _variants_of(p, a) <= self.variants:
                return 0
            dense = ("q", "k", "v", "o")
            if self.contiguous and not all(_tensors.is_compact(getattr(a, t)) for t in dense):
                return 0
            if self.user_supports is not None:
                probing = bool(_capi.lib().flashcheck_probing())
                return 1 if self.user_supports(self._problem(p, a, probing)) else 0
            return 1
        except BaseException:  # noqa: B902 - a supports() that raises declines
            return 0

    def _forward(self, pp, pa, stream):
        try:
            if self.interrupted:
                raise KeyboardInterrupt
            p, a = pp.contents, pa.contents
            fw = self.framework
            q, k, v = (_tensors.import_tensor(getattr(a, t), fw) for t in ("q", "k", "v"))
            o, lse = _split(self.forward(q, k, v, self._problem(p, a)))
            _tensors.copy_out(o, a.o, "o")
            if self.writes_lse:
                if lse is None:
                    raise _tensors.CaseError("the callable returned no lse (declare writes_lse=False)")
                _tensors.copy_out(lse, a.lse, "lse")
            return 0
        except BaseException as exc:  # noqa: B902 - every exception is the case's failure
            return self._fail(exc)

    def _backward(self, pp, pa, stream):
        try:
            if self.interrupted:
                raise KeyboardInterrupt
            p, g = pp.contents, pa.contents
            a, fw = g.fwd, self.framework
            q, k, v, d_o = (_tensors.import_tensor(t, fw) for t in (a.q, a.k, a.v, g.d_o))
            problem = self._problem(p, a)
            if callable(self.backward):
                o, lse = (_tensors.import_tensor(t, fw) for t in (a.o, a.lse))
                grads = self.backward(q, k, v, o, lse, d_o, problem)
            elif fw == "torch":
                grads = _torch_grads(self.forward, q, k, v, d_o, problem)
            else:
                grads = _jax_grads(self.forward, q, k, v, d_o, problem)
            if not isinstance(grads, (tuple, list)) or len(grads) != 3:
                raise _tensors.CaseError("backward must return (d_q, d_k, d_v)")
            for value, dst, what in zip(grads, (g.d_q, g.d_k, g.d_v), ("d_q", "d_k", "d_v")):
                _tensors.copy_out(value, dst, what)
            return 0
        except BaseException as exc:  # noqa: B902
            return self._fail(exc)


def _lengths(spec, axis):
    spec = dict(spec or {})
    unknown = set(spec) - {"multiple_of", "residue", "min", "max"}
    if unknown:
        raise ValueError("%s: unknown keys %s (multiple_of, residue, min, max)" % (axis, ", ".join(sorted(unknown))))
    v = {key: int(spec.get(key, 0)) for key in ("multiple_of", "residue", "min", "max")}
    m = v["multiple_of"]
    if m < 0 or v["min"] < 0 or v["max"] < 0 or (m > 1 and not 0 <= v["residue"] < m) or (
            m <= 1 and v["residue"] != 0) or (v["max"] and v["min"] > v["max"]):
        raise ValueError("%s = %r is not a set of lengths (residue in [0, multiple_of), 0 <= min <= max)" % (axis, spec))
    return _capi.FcLengths(**v)


def _dtype_code(name, what):
    if name not in _capi.DTYPE_CODES:
        raise ValueError("%s: %r is not one of %s" % (what, name, ", ".join(t for t in _capi.DTYPE_CODES if t)))
    return _capi.DTYPE_CODES[name]


_ARITHMETIC_KEYS = ("summation", "accumulator", "fused_products", "p_unrounded", "p_type", "block_m", "block_n",
                    "exp_ulps", "log_ulps", "exp_exact_at_zero", "flushes_subnormals")
_CONFIG_KEYS = ("block_m", "block_n", "splits", "deterministic")


def _declarations(n_q, n_k, max_batch, max_heads, scale, arithmetic, exact, backward_reduction, configs,
                  large_offsets, head_dims, dtype_sets=None, variants=()):
    """The fc_declarations struct, and the arrays it points into (kept alive with it)."""
    d = _capi.FcDeclarations()
    d.n_q, d.n_k = _lengths(n_q, "n_q"), _lengths(n_k, "n_k")
    if int(max_batch) < 0 or int(max_heads) < 0 or not float(scale) >= 0:
        raise ValueError("max_batch, max_heads and scale must be >= 0 (0: not declared)")
    d.max_batch, d.max_heads, d.scale = int(max_batch), int(max_heads), float(scale)
    dims = sorted(head_dims) if head_dims else []
    if any(not 1 <= x <= 256 for x in dims):
        raise ValueError("head_dims must lie in 1..256")
    dims_arr = (ctypes.c_int32 * max(len(dims), 1))(*dims)
    d.head_dims, d.num_head_dims = ctypes.cast(dims_arr, ctypes.POINTER(ctypes.c_int32)), len(dims)
    a = dict(arithmetic or {})
    if set(a) - set(_ARITHMETIC_KEYS):
        raise ValueError("arithmetic: unknown keys %s" % ", ".join(sorted(set(a) - set(_ARITHMETIC_KEYS))))
    if a.get("summation") not in _capi.SUMMATIONS:
        raise ValueError("arithmetic['summation'] is 'serial' or 'tensor_core'")
    d.arithmetic = _capi.FcArithmetic(
        _capi.SUMMATIONS[a.get("summation")], _dtype_code(a.get("accumulator"), "accumulator"),
        int(bool(a.get("fused_products"))), int(bool(a.get("p_unrounded"))), _dtype_code(a.get("p_type"), "p_type"),
        int(a.get("block_m", 0)), int(a.get("block_n", 0)), float(a.get("exp_ulps", 0)), float(a.get("log_ulps", 0)),
        int(bool(a.get("exp_exact_at_zero"))), int(bool(a.get("flushes_subnormals"))))
    bad = [x for x in exact if x not in _capi.EXACTNESS]
    if bad:
        raise ValueError("exact: unknown claims %s (%s)" % (", ".join(bad), ", ".join(_capi.EXACTNESS)))
    d.exact = _capi.FcExactness(*(int(x in exact) for x in _capi.EXACTNESS))
    if backward_reduction not in _capi.REDUCTIONS:
        raise ValueError("backward_reduction is 'deterministic', 'atomic' or None")
    d.backward_reduction = _capi.REDUCTIONS[backward_reduction]
    rows = []
    for c in configs:
        c = dict(c)
        if set(c) - set(_CONFIG_KEYS):
            raise ValueError("configs: unknown keys %s" % ", ".join(sorted(set(c) - set(_CONFIG_KEYS))))
        rows.append(_capi.FcConfig(int(c.get("block_m", 0)), int(c.get("block_n", 0)), int(c.get("splits", 0)),
                                   int(bool(c.get("deterministic")))))
    cfg_arr = (_capi.FcConfig * max(len(rows), 1))(*rows)
    d.configs, d.num_configs = ctypes.cast(cfg_arr, ctypes.POINTER(_capi.FcConfig)), len(rows)
    d.large_offsets = int(bool(large_offsets))
    sets = [_capi.FcDtypes(*(_capi.DTYPE_CODES[t] for t in x)) for x in (dtype_sets or ())]
    sets_arr = (_capi.FcDtypes * max(len(sets), 1))(*sets)
    d.dtypes, d.num_dtypes = ctypes.cast(sets_arr, ctypes.POINTER(_capi.FcDtypes)), len(sets)
    variants = set(variants or ())
    d.mask_tensors = (1 if "mask_bool" in variants else 0) | (2 if "mask_additive" in variants else 0)
    if "mask_additive" in variants:  # additive masks in every kernel float (F16, BF16, F32)
        d.mask_dtypes = sum(1 << _capi.DTYPE_CODES[t] for t in SWEPT)
    d.block_masks = int("block_mask" in variants)
    return d, dims_arr, cfg_arr, sets_arr


def _split(result):
    """(o, lse) from a tuple (o, lse) / (o,) or a bare o (a tensor, or nested lists)."""
    if isinstance(result, tuple):
        if len(result) == 2:
            return result
        if len(result) == 1:
            return result[0], None
        raise _tensors.CaseError("the callable returned a tuple of %d items, not (o, lse)" % len(result))
    return result, None


def _torch_grads(forward, q, k, v, d_o, problem):
    import torch

    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    with torch.enable_grad():
        o, _ = _split(forward(*leaves, problem))
        torch.autograd.backward(o, d_o)
    return tuple(t.grad if t.grad is not None else torch.zeros_like(t) for t in leaves)


def _jax_grads(forward, q, k, v, d_o, problem):
    import jax

    _, vjp = jax.vjp(lambda q_, k_, v_: _split(forward(q_, k_, v_, problem))[0], q, k, v)
    return vjp(d_o)


def _default_framework():
    for name in ("torch", "jax"):
        try:
            __import__(name)
            return name
        except ImportError:
            continue
    return "python"


def as_kernel(obj):
    return obj if isinstance(obj, Kernel) else Kernel(obj)
