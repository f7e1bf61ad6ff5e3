"""Per-tensor dtypes from Python (skipped where NumPy is absent): a kernel declares (q, kv, o) triples,
sees each tensor in its own dtype, and is judged by them: a correct fp32-query, fp16-cache kernel
passes; the same kernel reading K as bfloat16 is killed. (Rounding o to fp16 is within the charge of a
kernel that declares no arithmetic, which may compute in the coarsest of its dtypes; the C example,
which declares its arithmetic, is killed for it: plugin/tests/mixed_plugin_test.cpp.)"""
import pytest

np = pytest.importorskip("numpy")

import flashcheck  # noqa: E402
import np_kernels  # noqa: E402

MIXED = [("F32", "F16", "F32")]


def mixed_attention(q, k, v, p):
    assert (q.dtype, k.dtype, v.dtype) == (np.float32, np.float16, np.float16), (q.dtype, k.dtype)
    assert (p.dtype, p.dtype_kv, p.dtype_o) == ("F32", "F16", "F32")
    return np_kernels.attention(q, k, v, p)  # float64 arithmetic, o rounded once to float32


def k_read_as_bf16(q, k, v, p):
    bits = np.asarray(k, dtype=np.float32).view(np.uint32)  # round to nearest even at 8 significand bits
    k_bf16 = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000))
    return np_kernels.attention(q, k_bf16.view(np.float32), v, p)


def test_a_mixed_dtype_kernel_passes():
    kernel = flashcheck.Kernel(mixed_attention, None, name="np_mixed", framework="numpy", dtypes=MIXED)
    for law in ("reference", "affine_v"):
        result = flashcheck.check(kernel, law=law, cases=30, seed=3, quiet=True)
        assert result.ok, result.report
        assert [x["status"] for x in result.laws] == ["pass"]


def test_k_read_coarser_than_stored_is_killed(tmp_path):
    kernel = flashcheck.Kernel(k_read_as_bf16, None, name="np_mixed_k_bf16", framework="numpy", dtypes=MIXED)
    result = flashcheck.check(kernel, law="reference", cases=30, seed=3, regressions=str(tmp_path), quiet=True)
    assert result.exit_code == 1, result.report
    assert "exceeds the bound" in result.failures[0]["message"], result.failures[0]["message"]


def test_dtype_triples_are_checked():
    with pytest.raises(ValueError, match="unknown dtype"):
        flashcheck.Kernel(mixed_attention, None, framework="numpy", dtypes=[("F32", "F8", "F32")])
    with pytest.raises(ValueError, match="twice"):
        flashcheck.Kernel(mixed_attention, None, framework="numpy", dtypes=["F32", ("F32", "F32", "F32")])
    with pytest.raises(ValueError, match="bfloat16"):
        flashcheck.Kernel(mixed_attention, None, framework="numpy", dtypes=[("F32", "BF16", "F32")])
