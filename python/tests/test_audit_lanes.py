"""The external audit's pure-Python parts that decide what runs where, without torch, JAX or a GPU:
FlexAttention's padded shapes (examples/python/shape_buckets.py), the law-per-process split and its
merge, and the merge of two lanes' results (tools/external_audit/audit_merge.py)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))  # shape_buckets, the FlexAttention adapter's
sys.path.insert(0, os.path.join(ROOT, "tools", "external_audit"))

import audit_external  # noqa: E402
import audit_merge  # noqa: E402
import shape_buckets  # noqa: E402


def test_buckets_are_powers_of_two_at_least_the_floor_and_the_length():
    assert [shape_buckets.bucket(n, 128) for n in (1, 127, 128, 129, 1000, 1024, 1025, 16384)] == \
        [128, 128, 128, 256, 1024, 1024, 2048, 16384]
    assert shape_buckets.bucket(5, 1) == 8
    with pytest.raises(ValueError):
        shape_buckets.bucket(5, 100)  # not a power of two


def test_padded_shapes_keep_the_gqa_group_and_never_size_one():
    # (batch, heads_q, heads_kv, n) of the padded call; query head h still reads key head h // group.
    assert shape_buckets.padded_shape(1, 1, 1, 3, 70, 1024) == (2, 2, 2, 1024)
    assert shape_buckets.padded_shape(3, 6, 2, 1500, 2, 1024) == (3, 6, 2, 2048)
    assert shape_buckets.padded_shape(1, 4, 1, 16, 16, 128) == (2, 8, 2, 128)
    with pytest.raises(ValueError):
        shape_buckets.padded_shape(1, 3, 2, 4, 4, 128)


def test_dense_mask_elements_count_the_padded_square():
    # FlexAttention's masked adapter declines past its budget: a row of 16385 keys pads to 32768 squared.
    assert shape_buckets.dense_mask_elements(1, 1, 1, 1, 16385, 1024) == 2 * 2 * 32768 * 32768
    assert shape_buckets.dense_mask_elements(3, 6, 2, 7, 9, 1024) == 3 * 6 * 1024 * 1024
    assert shape_buckets.dense_mask_elements(1, 1, 1, 1, 65537, 1024, per_head=False) == 131072 * 131072


def _law(law_id, status):
    return {"id": law_id, "status": status, "sentence": "", "cases": 1, "message": ""}


def test_a_split_kernels_law_runs_read_as_one_run_in_law_order():
    parts = {"shift": {"exit": 0, "seconds": 2.0, "limit_s": 150, "laws": [_law("shift", "pass")]},
             "reference": {"exit": 1, "seconds": 3.5, "limit_s": 150, "laws": [_law("reference", "fail")]},
             "extreme": {"exit": "timeout", "seconds": 150.0, "limit_s": 150, "laws": [], "complete": False,
                         "log_tail": ["stuck"]}}
    merged = audit_merge.merge_law_runs(parts, audit_external.LAWS)
    assert [x["id"] for x in merged["laws"]] == ["reference", "shift"]
    assert merged["exit"] == "timeout" and not merged["complete"] and merged["seconds"] == 155.5
    assert merged["log_tail"] == ["extreme: stuck"] and merged["processes"] == 3
    del parts["extreme"]
    merged = audit_merge.merge_law_runs(parts, audit_external.LAWS)
    assert merged["exit"] == 1 and merged["complete"] and "log_tail" not in merged


def test_the_plan_splits_the_listed_kernels_one_law_a_process_and_takes_impls_from_the_environment(
        tmp_path, monkeypatch):
    monkeypatch.setenv("IMPLS", "sdpa_flash,torch_varlen")
    a = audit_external.parse_args(["--out", str(tmp_path), "--no-long"])
    assert a.only == "sdpa_flash,torch_varlen"
    plan = audit_external.Runner(a).plan()
    kinds = {(kind, k[0]) for kind, k in plan}
    assert ("check", "sdpa_flash") in kinds and ("check", "torch_varlen") not in kinds
    assert {kind for kind, name in kinds if name == "torch_varlen" and kind.startswith("check-")} == \
        {"check-" + law for law in audit_external.LAWS}
    assert {k[0] for _, k in plan} == {"sdpa_flash", "torch_varlen"}
    argv = audit_external.Runner(a).argv("check-zero_length", next(k for _, k in plan if k[0] == "torch_varlen"))
    assert argv[argv.index("--law") + 1] == "zero_length" and argv[argv.index("--json-out") + 1].endswith(
        "torch_varlen.zero_length.json")
    assert argv[argv.index("--timeout") + 1] == "60"  # the default call time-out
    runner, varlen = audit_external.Runner(a), next(k for _, k in plan if k[0] == "torch_varlen")
    argv = runner.argv("check-varlen_split", varlen)  # varlen_split: its own call time-out and budget
    assert argv[argv.index("--timeout") + 1] == "30" and runner.budget("check-varlen_split", "torch_varlen") == 300
    assert runner.budget("check-zero_length", "torch_varlen") == audit_external.LAW_BUDGET
    monkeypatch.setenv("IMPLS", "no_such_kernel")
    with pytest.raises(SystemExit):
        audit_external.parse_args(["--out", str(tmp_path)])


def _lane(names, seconds):
    return {"command": "lane " + names[0], "seed": 1, "cases_per_law": 12, "scope": {"A": "1"}, "budget_s": 470,
            "seconds": seconds, "baseline": "cuda_wgmma" if "cuda_wgmma" in names else None,
            "kernels": [{"name": n, "spec": None if n == "cuda_wgmma" else n + ":x", "about": n, "runs": {}}
                        for n in names]}


def test_two_lanes_merge_into_one_summary(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d, data in ((a, _lane(["cuda_wgmma", "flex"], 400.0)), (b, _lane(["jax_xla"], 450.0))):
        d.mkdir()
        (d / "results.json").write_text(audit_merge.json.dumps(data))
        (d / "device.txt").write_text("NVIDIA H200\n")
        (d / "kernels").mkdir()
        (d / "kernels" / (data["kernels"][0]["name"] + ".json")).write_text("{}")
    out = tmp_path / "merged"
    assert audit_merge.main(["--out", str(out), str(a / "results.json"), str(b / "results.json")]) == 0
    merged = audit_merge.json.loads((out / "results.json").read_text())
    assert [k["name"] for k in merged["kernels"]] == ["cuda_wgmma", "flex", "jax_xla"]
    assert merged["seconds"] == 450.0 and merged["baseline"] == "cuda_wgmma" and merged["lanes"] == 2
    summary = (out / "summary.md").read_text()
    assert "| jax_xla (jax_xla) |" in summary and "NVIDIA H200" in summary
    assert sorted(os.listdir(out / "kernels")) == ["cuda_wgmma.json", "jax_xla.json"]
    with pytest.raises(ValueError):
        audit_merge.merge_results([_lane(["flex"], 1.0), _lane(["flex"], 2.0)])


def test_a_rerun_lane_replaces_the_kernels_it_reran(tmp_path):
    lanes = {"a": _lane(["cuda_wgmma", "flex"], 400.0), "b": _lane(["jax_xla", "torch_varlen"], 450.0),
             "c": _lane(["jax_xla"], 300.0)}
    lanes["c"]["kernels"][0]["about"] = "rerun"
    for name, data in lanes.items():
        d = tmp_path / name
        (d / "check").mkdir(parents=True)
        (d / "results.json").write_text(audit_merge.json.dumps(data))
        for k in data["kernels"]:
            (d / "check" / (k["name"] + ".json")).write_text(name)
    (tmp_path / "b" / "check" / "jax_xla.reference.json").write_text("stale")
    out = tmp_path / "merged"
    (out / "check").mkdir(parents=True)
    (out / "check" / "old.json").write_text("from an earlier merge")
    paths = [str(tmp_path / n / "results.json") for n in "abc"]
    assert audit_merge.main(["--out", str(out)] + paths) == 2  # a kernel in two lanes, no --override
    assert audit_merge.main(["--override", "--fresh", "--out", str(out)] + paths) == 0
    merged = audit_merge.json.loads((out / "results.json").read_text())
    assert [k["name"] for k in merged["kernels"]] == ["cuda_wgmma", "flex", "jax_xla", "torch_varlen"]
    assert merged["kernels"][2]["about"] == "rerun"
    assert sorted(os.listdir(out / "check")) == ["cuda_wgmma.json", "flex.json", "jax_xla.json", "torch_varlen.json"]
    assert (out / "check" / "jax_xla.json").read_text() == "c"
    assert (out / "check" / "torch_varlen.json").read_text() == "b"
