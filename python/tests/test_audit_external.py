"""The external audit's pipeline (tools/external_audit/audit_external.py --self-test) end to end on pure-Python
kernels, and its reading of a law run cut short (the laws its log printed)."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools", "external_audit")
sys.path.insert(0, TOOL)

import audit_summary  # noqa: E402


def test_the_self_test_reports_the_planted_bug_with_its_counterexample(tmp_path):
    out = tmp_path / "out"
    argv = [sys.executable, os.path.join(TOOL, "audit_external.py"), "--self-test", "--out", str(out),
            "--only", "cpu_tiled,py_off_by_one", "--cases", "3", "--no-long", "--budget", "120", "--threads", "1"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    summary = (out / "summary.md").read_text()
    assert "| py_off_by_one (" in summary and "### py_off_by_one: `reference`" in summary
    assert "python -m flashcheck check py_kernels:planted_bug --law reference --case " \
           "results/h200/external/regressions/py_off_by_one/reference-" in summary
    data = json.loads((out / "results.json").read_text())
    planted = next(k for k in data["kernels"] if k["name"] == "py_off_by_one")
    failed = [law for law in planted["runs"]["check"]["laws"] if law["status"] == "fail"]
    assert failed and all(os.path.exists(law["saved"]) for law in failed)
    tiled = next(k for k in data["kernels"] if k["name"] == "cpu_tiled")
    assert tiled["runs"]["quick"]["cells"] and "Errors beside cpu_tiled" in summary


def test_a_law_run_cut_short_keeps_the_laws_it_printed(tmp_path):
    log = tmp_path / "check.log"
    log.write_text("flashcheck check: kernel k (cuda), 12 cases per law, seed 1\n"
                   "  PASS  reference       every output agrees with the reference (14 cases; 2 regression files; 1.5 s)\n"
                   "  n/a   block_size      tiles change nothing (the kernel does not claim what the law needs)\n"
                   "  FAIL  nan_blast       a NaN or inf poisons only the rows that read it (2 cases, 0.1 s)\n"
                   "nan at q[b=0,h=0,i=0,c=0]: a key no poisoned row sees changed: d_k[b=0,h=0,j=1,c=0]\n"
                   "  minimal counterexample:\n"
                   "  problem: batch=1 n_q=2 n_k=2\n"
                   "  replay: python -m flashcheck check m:k --law nan_blast --reproduce XYZ\n"
                   "  saved: /out/regressions/k/nan_blast-1.safetensors\n")
    got = audit_summary.read_check(str(tmp_path / "absent.json"), str(log))
    assert not got["complete"]
    assert [(x["id"], x["status"], x["cases"]) for x in got["laws"]] == [
        ("reference", "pass", 14), ("block_size", "n/a", 0), ("nan_blast", "fail", 2)]
    law = got["laws"][2]
    assert law["replay"].endswith("--reproduce XYZ") and law["saved"].endswith("nan_blast-1.safetensors")
    assert "problem: batch=1" in law["counterexample"] and "d_k[b=0" in law["message"]
    assert "0 * NaN" in audit_summary._note("sdpa_math", law)


def test_a_law_that_gave_up_is_neither_held_nor_broken():
    laws = [{"id": "reference", "status": "pass", "cases": 12},
            {"id": "invisible_keys", "status": "fail", "cases": 6, "sentence": "keys a row cannot see ...",
             "message": "gave up after 6 cases (122 declined by the kernel, 0 outside the law): declined\n"},
            {"id": "nan_blast", "status": "fail", "cases": 2, "sentence": "a NaN ...",
             "message": "nan at q[b=0,h=0,i=0,c=0]: a key no poisoned row sees changed\n"}]
    data = {"kernels": [{"name": "k", "about": "a kernel", "spec": "m:k", "runs": {"check": {"laws": laws}}}],
            "command": "c", "cases_per_law": 12, "seed": 1, "seconds": 1, "budget_s": 2}
    summary = audit_summary.render(data, "/nonexistent")
    assert "| k (a kernel) | 1 | 1 | 0 | 1 |" in summary, summary  # held, broken, n/a, not reached
    assert "| invisible_keys | ? |" in summary and "| nan_blast | ✗ |" in summary
    assert "### k: `nan_blast`" in summary and "### k: `invisible_keys`" not in summary
    assert "- k `invisible_keys`: gave up after 6 cases" in summary


def _failed(law_id, message, problem):
    return {"id": law_id, "status": "fail", "message": message,
            "counterexample": "  problem: %s\n  config: block_m=0\n  q = 1 2\n" % problem}


def test_a_reading_states_the_shrunk_case_s_own_fields():
    # The facts in a reading (dtype, lengths, head dim, strides, XLA's algorithm) come from the case
    # and its message, so a reading cannot contradict the run it reads.
    refused = _failed("convex_hull", "jax_xla failed: forward returned 1: JaxRuntimeError: INVALID_ARGUMENT: "
                      "Unsupported dot precision algorithm: 4 (jax_attention.py:174 in forward)\n",
                      "batch=1 heads_q=1 heads_kv=1 n_q=1 n_k=1 d=9 dtype=F16 mask=none scale=0.33")
    note = audit_summary._note("jax_xla", refused)
    assert "d = 9" in note and "F16" in note and "n_q = 1" in note and "(4)" in note and "d = 1:" not in note
    other = _failed("shift", refused["message"].replace("algorithm: 4", "algorithm: 7"),
                    "batch=2 heads_q=1 heads_kv=1 n_q=3 n_k=5 d=2 dtype=BF16 mask=none scale=1")
    note = audit_summary._note("jax_xla", other)
    assert "d = 2" in note and "BF16" in note and "n_k = 5" in note and "(7)" in note
    strided = _failed("varlen_split", "the kernel threw: jax_xla failed: forward returned 1: ValueError: Only DLPack "
                      "tensors with trivial (compact) striding are supported; i.e., tensors whose striding represents "
                      "a transposition of the underlying buffer but not broadcasting. Dimensions were: [295,1,8], "
                      "strides were [16,11,1]. (dlpack.py:280 in from_dlpack)\n", "batch=1 heads_q=1 heads_kv=1 n_q=3 n_k=4 d=8 dtype=F32 mask=none")
    note = audit_summary._note("jax_xla", strided)
    assert "[295,1,8]" in note and "[16,11,1]" in note and "F32" in note and "declines them" not in note
    unknown = dict(refused, counterexample="")  # a field the run did not record is "?", never a guess
    assert "d = ?" in audit_summary._note("jax_xla", unknown)
