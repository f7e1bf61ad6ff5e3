"""flashcheck.check on torch kernels (skipped without torch; the CUDA ones without a GPU): the suite's
CUDA memory crosses as DLPack without a copy, the backward through autograd or a second callable,
the isolated worker, the examples' adapters, planted bugs killed."""
import importlib.util
import os
import re
import sys

import pytest

torch = pytest.importorskip("torch")

import flashcheck  # noqa: E402
from flashcheck import _tensors  # noqa: E402
import torch_kernels  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "python")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

LAWS = ["reference", "lse_bracket", "convex_hull", "affine_v", "determinism"]


@pytest.mark.parametrize("law", LAWS)
def test_a_correct_torch_kernel_on_the_host_passes(law):
    result = flashcheck.check(torch_kernels.correct_cpu, law=law, cases=20, seed=3, quiet=True)
    assert result.ok, result.report
    assert [x["status"] for x in result.laws] == ["pass"]


@cuda
@pytest.mark.parametrize("law", LAWS)
def test_a_correct_torch_kernel_on_the_gpu_passes(law):
    result = flashcheck.check(torch_kernels.correct_cuda, law=law, cases=30, seed=3, quiet=True)
    assert result.ok, result.report
    assert [x["status"] for x in result.laws] == ["pass"]


@cuda
def test_the_backward_as_a_second_callable():
    result = flashcheck.check(torch_kernels.second_callable, law="reference", cases=30, seed=5, quiet=True)
    assert result.ok, result.report
    assert [x["status"] for x in result.laws] == ["pass"]


@cuda
def test_cuda_inputs_are_the_suites_memory(monkeypatch):
    seen = []
    real = _tensors.import_tensor

    def spy(dl, framework):
        tensor = real(dl, framework)
        seen.append((dl.data + dl.byte_offset, tensor.data_ptr(), tensor.device.type))
        return tensor

    monkeypatch.setattr(_tensors, "import_tensor", spy)
    result = flashcheck.check(torch_kernels.correct_cuda, law="reference", cases=5, seed=4, quiet=True)
    assert result.ok, result.report
    assert len(seen) >= 15
    assert all(suite == ours and device == "cuda" for suite, ours, device in seen), "an input was copied"


@cuda
@pytest.mark.parametrize("kernel, spec, why", [
    (torch_kernels.misaligned, "misaligned", "o"),
    (torch_kernels.planted_lse, "planted_lse", "lse"),
])
def test_a_planted_bug_in_a_torch_kernel_is_killed(kernel, spec, why, tmp_path):
    result = flashcheck.check(kernel, law="reference", cases=60, seed=2, regressions=str(tmp_path), quiet=True)
    assert result.exit_code == 1, result.report
    (failure,) = result.failures
    assert why in failure["message"], failure["message"]
    assert failure["replay"].startswith("python -m flashcheck check torch_kernels:%s --isolation none " % spec)


@cuda
def test_an_isolated_torch_kernel_passes():
    result = flashcheck.check("torch_kernels:correct_cuda", law="reference", cases=20, seed=9, quiet=True)
    assert result.ok, result.report


@cuda
def test_sdpa_math_in_the_pytest_fixture(flashcheck_check):
    flashcheck_check(torch_kernels.math_backend, law="reference", cases=20)


# FlashAttention-2's varlen kernels behind torch_varlen: the forward of a GQA batch whose longest
# sequence has one query, with a sequence of none, fails reshaping q as if every sequence had one query;
# the backward of a sequence with queries and no keys fails with "invalid argument".
LIBRARY_FAILURES = {("torch_varlen:varlen", "varlen_split"):
                    r"RuntimeError: shape '\[\d+, 1, \d+, \d+\]' is invalid for input of size \d+"
                    r"|AcceleratorError: CUDA error: invalid argument"}


@pytest.mark.parametrize("spec", ["torch_sdpa:cpu_flash", "torch_sdpa:cpu_math"])
@pytest.mark.parametrize("law", ["reference", "convex_hull", "invisible_keys", "mask_tensor_builtin",
                                 "block_mask_dense"])
def test_the_cpu_sdpa_example_adapts(spec, law, monkeypatch, tmp_path):
    """examples/python/torch_sdpa.py's CPU kernels, no GPU needed (skipped only without torch): a
    verdict on the library, never the adapter's own error (as for the CUDA examples below)."""
    monkeypatch.syspath_prepend(EXAMPLES)
    result = flashcheck.check(spec, law=law, cases=10, seed=1, quiet=True, timeout=300, regressions=str(tmp_path))
    assert [x["status"] for x in result.laws] in (["pass"], ["fail"]), result.report
    assert not re.search(r"\b\w+(Error|Exception): ", result.report), result.report


@cuda
@pytest.mark.parametrize("spec, law", [
    ("torch_sdpa:math", "reference"), ("torch_sdpa:flash", "reference"), ("torch_sdpa:efficient", "reference"),
    ("torch_sdpa:cudnn", "reference"), ("flex_attention:flex", "reference"),
    ("flex_attention:flex_window", "window_invisible"), ("flex_attention:flex_softcap", "softcap"),
    ("torch_varlen:varlen", "varlen_split"), ("jax_attention:xla", "window_invisible"),
    ("torch_sdpa:math", "mask_tensor_builtin"), ("torch_sdpa:math", "block_mask_dense"),
    ("jax_attention:cudnn", "varlen_split")])
def test_the_examples_adapt_in_a_few_lines(spec, law, monkeypatch, tmp_path):
    if spec.startswith("jax") and importlib.util.find_spec("jax") is None:
        pytest.skip("no JAX")
    monkeypatch.syspath_prepend(EXAMPLES)
    result = flashcheck.check(spec, law=law, cases=6, seed=1, quiet=True, timeout=300, regressions=str(tmp_path))
    # A verdict on the library (the external audit reports it), never the adapter's own error: the only
    # exceptions allowed are the library failures results/h200/external/FINDINGS.md records for the pair.
    assert [x["status"] for x in result.laws] in (["pass"], ["fail"]), result.report
    report = re.sub(LIBRARY_FAILURES.get((spec, law), r"(?!)"), "", result.report)
    assert not re.search(r"\b\w+(Error|Exception): ", report), result.report


@cuda
@pytest.mark.parametrize("law", ["mask_tensor_builtin", "block_mask_dense"])
def test_flex_attention_takes_mask_tensors_and_block_masks(law, monkeypatch, tmp_path):
    """flex_attention:flex_masked: the mask laws reach their cases (one dtype and head dim, so that the
    compiles fit the test's time) and give a verdict on the library, never the adapter's error."""
    monkeypatch.syspath_prepend(EXAMPLES)
    monkeypatch.setenv("FC_FLEX_DTYPES", "BF16")
    monkeypatch.setenv("FC_FLEX_HEAD_DIMS", "64")
    result = flashcheck.check("flex_attention:flex_masked", law=law, cases=10, seed=1, quiet=True, timeout=300,
                              regressions=str(tmp_path))
    print(result.report)  # the verdict, in the device log (-rA), for results/h200/external/FINDINGS.md
    assert [x["status"] for x in result.laws] in (["pass"], ["fail"]), result.report
    assert not re.search(r"\b\w+(Error|Exception): ", result.report), result.report


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
