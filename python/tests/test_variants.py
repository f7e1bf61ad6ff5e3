"""The variants of contract v2 through the bridge: a Python kernel declaring windows, softcap, d_v and
varlen is probed for them (supports() sees each variant's fields and tensors), receives the variant
laws' problems with their tensors (cu_seqlens as host views), and passes them; a planted window bug is
caught by the window laws."""
import pytest

import flashcheck
import py_variant_kernels


@pytest.mark.parametrize("law", ["window_mask", "window_invisible", "softcap", "varlen_split", "zero_length"])
def test_a_correct_variant_kernel_passes_the_variant_laws(law, tmp_path):
    result = flashcheck.check(py_variant_kernels.correct, law=law, cases=6, seed=4, regressions=str(tmp_path),
                              quiet=True)
    assert result.ok, result.report
    assert [x["status"] for x in result.laws] == ["pass"], result.report
    assert "variants: varlen, window, softcap, d_v" in result.report


def test_a_kernel_without_a_variant_is_not_sent_its_law(tmp_path):
    result = flashcheck.check(py_variant_kernels.planted_window, law="varlen_split", cases=3, seed=4,
                              regressions=str(tmp_path), quiet=True)
    assert result.ok and result.laws[0]["status"] == "n/a", result.report


def test_a_window_off_by_one_is_caught(tmp_path):
    results = [flashcheck.check(py_variant_kernels.planted_window, law=law, cases=20, seed=4,
                                regressions=str(tmp_path), quiet=True) for law in ("window_mask", "window_invisible")]
    assert any(r.exit_code == 1 for r in results), "\n".join(r.report for r in results)
    failed = next(r for r in results if r.exit_code == 1)
    assert "window" in failed.failures[0]["message"] + failed.failures[0]["counterexample"]


def test_a_window_taken_only_under_a_causal_mask_is_found_and_run(tmp_path):
    result = flashcheck.check(py_variant_kernels.causal_windows, law="window_invisible", cases=6, seed=4,
                              regressions=str(tmp_path), quiet=True)
    assert "variants: window" in result.report
    assert result.ok and result.laws[0]["status"] == "pass" and result.laws[0]["cases"] > 0, result.report


@pytest.mark.parametrize("law", ["varlen_split", "zero_length", "reference"])
def test_a_kernel_of_compact_tensors_only_is_never_sent_another(law, tmp_path):
    # The start-up probe sees that it declines strided layouts (every axis of its probe problems longer
    # than 1), and the varlen batches and sequences the laws derive pass supports() as generated cases do.
    result = flashcheck.check(py_variant_kernels.compact_varlen, law=law, cases=12, seed=4,
                              regressions=str(tmp_path), quiet=True)
    assert "the kernel declines strided tensors" in result.report, result.report
    assert result.ok and [x["status"] for x in result.laws] == ["pass"], result.report


@pytest.mark.parametrize("isolate", [False, True])
def test_supports_is_told_whether_flashcheck_is_probing(isolate, tmp_path):
    # Problem.probing is True for the start-up probe's questions and False for a case's: a kernel that
    # answers the probe yes and declines cases above d = 4 gets every d in 1..8 generated, never runs
    # one above 4, and its declined cases are counted; in this process and in a worker alike.
    kernel = "py_variant_kernels:probed_optimistically" if isolate else py_variant_kernels.probed_optimistically
    result = flashcheck.check(kernel, law="reference", cases=30, seed=4, regressions=str(tmp_path), quiet=True,
                              isolate=isolate)
    assert result.ok and result.laws[0]["status"] == "pass", result.report
    assert result.laws[0]["declined"] > 0 and result.laws[0]["cases"] > 0, result.laws


def test_mask_tensors_and_block_masks_reach_a_declaring_kernel(tmp_path):
    # The suite's mask tensors and block masks (BOOL host views, additive F32/F16/BF16) reach a Python
    # kernel that declares them, which passes reference and the masks' laws.
    for law in ("reference", "mask_tensor_builtin", "block_mask_dense"):
        result = flashcheck.check(py_variant_kernels.masked, law=law, cases=6, seed=4, regressions=str(tmp_path),
                                  quiet=True)
        assert result.ok and result.laws[0]["status"] == "pass", result.report
        assert "variants: mask_bool, mask_additive, block_mask" in result.report
