"""flashcheck.check on pure-Python kernels: the C++ suite's laws, shrinking, replay and exit codes
through the ctypes bridge, in-process and isolated in a worker process."""
import collections.abc
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

import pytest

import flashcheck
import py_kernels

HERE = os.path.dirname(os.path.abspath(__file__))


def run_replay(line):
    """Runs a replay line ("python -m flashcheck check ...") as a subprocess."""
    argv = shlex.split(line)
    assert argv[:3] == ["python", "-m", "flashcheck"], line
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE]))
    return subprocess.run([sys.executable] + argv[1:], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize("law", ["reference", "lse_bracket", "nan_blast", "invisible_keys"])
def test_a_correct_python_kernel_passes(law):
    result = flashcheck.check(py_kernels.correct, law=law, seed=3, quiet=True)
    assert result.ok, result.report
    assert [x["status"] for x in result.laws] == ["pass"]


def test_a_planted_bug_is_killed_with_a_minimal_case_and_a_replay_line(tmp_path):
    # An empty regression folder: the repository's saved cases would catch the bug before any random one.
    result = flashcheck.check(py_kernels.planted_bug, law="reference", seed=2, regressions=str(tmp_path), quiet=True)
    assert result.exit_code == 1
    (failure,) = result.failures
    assert "mask=causal" in failure["counterexample"]
    assert failure["replay"].startswith("python -m flashcheck check py_kernels:planted_bug --isolation none "
                                        "--law reference --reproduce ")
    again = run_replay(failure["replay"])
    assert again.returncode == 1, again.stdout + again.stderr
    assert failure["counterexample"].splitlines()[0] in again.stdout


@pytest.mark.parametrize("kernel, why", [
    (py_kernels.raising, "ValueError: n_k = 4 is too long for me (py_kernels.py:"),
    (py_kernels.misshapen, "o: expected shape"),
    (py_kernels.nan_kernel, "o: o[b=0,h=0,i=0,c=0] = nan"),
])
def test_what_a_callable_gets_wrong_is_a_failing_case(kernel, why, tmp_path):
    # An empty regression folder: the random cases and their shrinking, not the repository's saved cases.
    result = flashcheck.check(kernel, law="reference", cases=30, seed=5, regressions=str(tmp_path), quiet=True)
    assert result.exit_code == 1
    assert why in result.failures[0]["message"], result.report
    assert re.search(r"n_k=4\b", result.failures[0]["counterexample"])


@pytest.mark.parametrize("spec, why, options", [
    ("py_kernels:crashing", "SIGSEGV", {}),
    ("py_kernels:hanging", "did not return within 0.5 s", {"timeout": 0.5}),
])
def test_an_isolated_kernel_that_crashes_or_hangs_fails_its_case(spec, why, options, tmp_path):
    result = flashcheck.check(spec, law="reference", cases=20, seed=5, regressions=str(tmp_path), quiet=True,
                              **options)
    assert result.exit_code == 1, result.report
    assert why in result.failures[0]["message"]
    assert re.search(r"n_k=4\b", result.failures[0]["counterexample"])
    assert "the worker was restarted" in result.report


def test_an_isolated_correct_kernel_passes():
    result = flashcheck.check("py_kernels:correct", law="reference", cases=40, seed=9, quiet=True)
    assert result.ok, result.report


def test_bad_usage_is_one_line():
    for spec in ["no_such_module:kernel", "py_kernels:no_such_name", "not a spec"]:
        with pytest.raises(flashcheck.UsageError) as info:
            flashcheck.check(spec, quiet=True)
        assert "\n" not in str(info.value)
    with pytest.raises(flashcheck.UsageError, match="unknown law"):
        flashcheck.check(py_kernels.correct, law="no_such_law", quiet=True)
    cli = run_replay("python -m flashcheck check no_such_module:kernel")
    assert cli.returncode == 2 and cli.stderr.count("\n") == 1, cli.stderr


class _WatchedEnviron(collections.abc.MutableMapping):
    """os.environ, recording every key set or deleted through it."""

    def __init__(self, real):
        self.real, self.changed = real, []

    def __getitem__(self, key):
        return self.real[key]

    def __setitem__(self, key, value):
        self.changed.append(key)
        self.real[key] = value

    def __delitem__(self, key):
        self.changed.append(key)
        del self.real[key]

    def __iter__(self):
        return iter(self.real)

    def __len__(self):
        return len(self.real)

    def copy(self):
        return dict(self.real)


def test_check_and_audit_leave_the_environment_and_the_temp_folder_alone(tmp_path, monkeypatch):
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    watched = _WatchedEnviron(os.environ)
    monkeypatch.setattr(os, "environ", watched)
    before = dict(watched.real)
    # Isolated: the worker imports py_kernels from this process's sys.path, told through its own environment.
    isolated = flashcheck.check("py_kernels:correct", law="lse_bracket", cases=5, seed=1, quiet=True)
    assert isolated.ok and [x["id"] for x in isolated.laws] == ["lse_bracket"], isolated.report
    assert isolated.seed == 1
    here = flashcheck.check(py_kernels.correct, law="lse_bracket", cases=5, seed=1, quiet=True,
                            extra_args=("--oracle", "cpu", "--replay-repeats", "2"))
    assert here.ok and here.laws[0]["status"] == "pass", here.report
    code, report = flashcheck.audit(py_kernels.any_head_dim, str(tmp_path / "audit"), cases=["F32/normal/n16"])
    assert code == 0 and report["verdict"]["status"] == "pass"
    assert watched.changed == [] and dict(watched.real) == before
    assert os.listdir(temp) == []


def test_extra_args_take_the_commands_flags_and_refuse_others_in_one_line():
    for extra, why in [(("--oracle", "tpu"), "--oracle tpu: expected auto or cpu or gpu"),
                       (("--no-such-flag",), "unknown option --no-such-flag"),
                       (("--cases",), "--cases needs a value"),
                       (("--cases", "many"), "--cases many: not an integer")]:
        with pytest.raises(flashcheck.UsageError) as info:
            flashcheck.check(py_kernels.correct, law="lse_bracket", quiet=True, extra_args=extra)
        assert why in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(flashcheck.UsageError, match="--cases 0"):
        flashcheck.check(py_kernels.correct, cases=0, quiet=True)
    with pytest.raises(flashcheck.UsageError, match="--cases 2000000: expected 1 to 1000000"):
        flashcheck.check(py_kernels.correct, cases=2000000, quiet=True)


def test_the_pytest_fixture(flashcheck_check):
    result = flashcheck_check(py_kernels.forward_only, law="lse_bracket")
    assert result.ok


def test_the_audit_runs_a_python_kernel(tmp_path):
    code, report = flashcheck.audit(py_kernels.any_head_dim, str(tmp_path), cases=["F32/normal/n16", "F16/normal/n64"])
    assert code == 0, report.get("verdict")
    cells = [c for c in report["cells"] if c["kernel"] == "py_attention"]
    assert len(cells) == 2 and all(c["status"] == "pass" for c in cells)
    assert cells[0]["replay"].startswith("python -m flashcheck audit py_kernels:any_head_dim --isolation none --case ")
    assert "d_q" in cells[0]["tensors"]  # the backward too


def test_the_command_line_writes_the_json_it_is_asked_for(tmp_path):
    out = tmp_path / "laws.json"
    cli = run_replay("python -m flashcheck check py_kernels:correct --isolation none --law lse_bracket --cases 5 "
                     "--seed 1 --json-out %s" % out)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    data = json.loads(out.read_text())
    assert [law["id"] for law in data["laws"]] == ["lse_bracket"] and data["laws"][0]["status"] == "pass"


def test_a_kernel_without_lse_is_not_held_to_the_lse_laws(tmp_path):
    # Its lse slot keeps the suite's NaN fill: a law reading it would fail a correct kernel.
    result = flashcheck.check(py_kernels.no_lse, law="lse_bracket", cases=5, seed=3, regressions=str(tmp_path),
                              quiet=True)
    assert result.ok and result.laws[0]["status"] == "n/a", result.report
    assert flashcheck.check(py_kernels.no_lse, law="reference", cases=5, seed=3, regressions=str(tmp_path),
                            quiet=True).ok


def _multiple_of_64(q, k, v, p):
    if p.n_q % 64 or p.n_k % 64:
        raise ValueError("a length that is not a multiple of 64 reached the kernel: n_q %d, n_k %d" % (p.n_q, p.n_k))
    if p.config not in (0, 1):
        raise ValueError("config %d was never declared" % p.config)
    return py_kernels.attention(q, k, v, p)


def _declared(**declarations):
    return flashcheck.Kernel(_multiple_of_64, None, name="py_multiple_of_64", device="cpu", framework="python",
                             dtypes=("F32",), head_dims=[4, 8], gqa=False,
                             supports=lambda p: p.n_q % 64 == 0 and p.n_k % 64 == 0, **declarations)


def test_a_kernel_declaring_multiples_of_64_gets_only_those_and_passes():
    kernel = _declared(n_q={"multiple_of": 64}, n_k={"multiple_of": 64}, max_batch=1, max_heads=1,
                       configs=[{"block_m": 64, "block_n": 64}, {"block_m": 64, "block_n": 128}])
    result = flashcheck.check(kernel, law="reference", cases=10, seed=3, quiet=True, max_n=128)
    assert result.ok, result.report
    (law,) = result.laws
    assert law["status"] == "pass" and law["cases"] >= 10 and law["declined"] == 0, law
    # Without the declarations the same kernel is refused at load: the probe's n = 16 is declined.
    with pytest.raises(flashcheck.UsageError, match="declines every problem"):
        flashcheck.check(_declared(), law="reference", cases=5, seed=3, quiet=True)


@pytest.mark.parametrize("bad", [dict(n_q={"multiple_of": 64, "residue": 64}), dict(n_k={"step": 2}),
                                 dict(arithmetic={"summation": "pairwise"}), dict(exact=["bits"]),
                                 dict(backward_reduction="sometimes"), dict(configs=[{"tile": 64}]),
                                 dict(arithmetic={"accumulator": "F8"}), dict(head_dims=[300])])
def test_a_bad_declaration_is_a_value_error(bad):
    with pytest.raises(ValueError):
        flashcheck.Kernel(py_kernels.attention, None, device="cpu", framework="python", **bad)
