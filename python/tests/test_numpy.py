"""flashcheck.check on NumPy kernels (skipped where NumPy is absent): inputs cross as DLPack without a
copy, outputs through the arrays' own __dlpack__, the backward as a second callable."""
import pytest

np = pytest.importorskip("numpy")

import flashcheck  # noqa: E402
from flashcheck import _tensors  # noqa: E402
import np_kernels  # noqa: E402


@pytest.mark.parametrize("law", ["reference", "extreme", "nan_blast", "affine_v"])
def test_a_correct_numpy_kernel_passes(law):
    result = flashcheck.check(np_kernels.correct, law=law, cases=30, seed=4, quiet=True)
    assert result.ok, result.report
    assert [x["status"] for x in result.laws] == ["pass"]


def test_a_kernel_rounding_p_and_ds_to_fp16_passes():
    """P and dS rounded to F16 before the gradient GEMMs, subnormals kept (what a tensor-core backward
    does): a kernel that declares nothing is charged for it, tiny gradients included."""
    result = flashcheck.check(np_kernels.rounded_operands, law="reference", cases=60, seed=1, quiet=True)
    assert result.exit_code == 0, result.report


def test_the_inputs_are_the_suites_memory(monkeypatch):
    seen = []
    real = _tensors.import_tensor

    def spy(dl, framework):
        array = real(dl, framework)
        seen.append((dl.data + dl.byte_offset, array.__array_interface__["data"][0], array.flags.writeable))
        return array

    monkeypatch.setattr(_tensors, "import_tensor", spy)
    result = flashcheck.check(np_kernels.correct, law="reference", cases=5, seed=4, quiet=True)
    assert result.ok, result.report
    assert len(seen) >= 15
    assert all(suite == ours for suite, ours, _ in seen), "an input was copied"
    assert not any(writable for _, _, writable in seen), "the kernel could write the suite's inputs"


def test_a_planted_bug_in_a_numpy_kernel_is_killed(tmp_path):
    result = flashcheck.check(np_kernels.planted_bug, law="reference", seed=2, regressions=str(tmp_path), quiet=True)
    assert result.exit_code == 1, result.report
    (failure,) = result.failures
    assert "lse" in failure["message"], failure["message"]
    assert failure["replay"].startswith("python -m flashcheck check np_kernels:planted_bug --isolation none ")


def test_a_numpy_kernel_is_declared_on_the_host_without_bfloat16():
    with pytest.raises(ValueError, match="bfloat16"):
        flashcheck.Kernel(np_kernels.attention, framework="numpy", dtypes=["BF16"])
    with pytest.raises(ValueError, match="device='cpu'"):
        flashcheck.Kernel(np_kernels.attention, framework="numpy", device="cuda")
    assert flashcheck.Kernel(np_kernels.attention, framework="numpy").dtypes == ("F16", "F32")


def test_a_wrong_dtype_is_a_failing_case():
    def float64_out(q, k, v, p):
        o, lse = np_kernels.attention(q, k, v, p)
        return o.astype(np.float64), lse  # the contract: o in q's dtype

    kernel = flashcheck.Kernel(float64_out, None, name="np_f64_out", framework="numpy", dtypes=["F32"])
    result = flashcheck.check(kernel, law="reference", cases=5, seed=1, quiet=True)
    assert result.exit_code == 1
    message = result.failures[0]["message"]
    assert "o: got float64" in message and "expected float32" in message, message
