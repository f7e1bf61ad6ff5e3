#!/usr/bin/env python3
"""The folder rule and the type-name rule, enforced. Folders: which part of the source may include
which (docs/architecture.md, "Folders"). Every tracked C, C++ and CUDA source outside tests/ folders is given a part by its path;
each of its project includes ("dir/file") must name a part its own part may use. The contract is the
ground floor (contract/): it includes nothing of the project; the references use nothing of the
systems under test (kernels/, plugin/); the plugin machinery (plugin/) stands on the contract, the
harness memory and the registry; the verdict of one kernel run (verdict/) stands on the registry and
the references, and the laws (properties/), the fuzz judge (fuzz/) and the reports (reports/) on it.

  scripts/source_rules.py [ROOT]   exit 0: every include keeps the rule; 1: each breach on a line
  scripts/source_rules.py --self-test   the rule on planted trees (one keeps it, each other breaks it)

Tests (any path with a tests/ folder), a folder's benchmarks (reference/bench/) and the libFuzzer harnesses may include what their
checks need and are not checked; examples/ builds against the installed headers only.

Type names: every struct, class, union and enum a C, C++ or CUDA source defines (at any scope, a
function's local types and the tests' included), and every alias `using X =` at namespace scope (a line
that starts with it), has a name no other definition has, so that a name means one thing wherever it is
read. examples/ (programs of their own, against the installed headers) is not checked.
"""
import os
import re
import subprocess
import sys

# Parts, most specific path first. A file takes the first part whose prefix its path starts with.
PARTS = [
    ("contract", ["contract/", "include/flashcheck/"]),
    ("harness", ["kernels/hostile.", "kernels/guard."]),        # the memory a call is made in
    ("registry", ["kernels/registry."]),
    ("parallel", ["reference/parallel."]),                      # the worker threads every layer shares
    ("cpu_kernels", ["kernels/cpu/"]),
    ("cuda_kernels", ["kernels/cuda/"]),
    ("mutants", ["kernels/mutants/"]),
    ("plugin", ["plugin/"]),
    ("reference", ["reference/"]),
    ("io", ["io/"]),
    ("verdict", ["verdict/"]),                                   # one kernel run judged: run, oracle, bound, verdict
    ("properties", ["properties/"]),
    ("fuzz_report", ["reports/fuzz_report."]),                  # the fuzz report's format, alone
    ("reports", ["reports/"]),
    ("fuzz", ["fuzz/"]),
    ("cli", ["cli/"]),
    ("capi", ["capi/"]),
    ("bench", ["bench/"]),
]

# What each part may include besides itself.
USES = {
    "contract": set(),
    "harness": {"contract"},
    "parallel": set(),
    "io": {"contract"},
    "reference": {"contract", "parallel"},
    "cpu_kernels": {"contract", "registry", "parallel"},
    "cuda_kernels": {"contract", "harness", "registry"},
    "mutants": {"contract", "registry", "cpu_kernels"},
    "registry": {"contract", "cpu_kernels", "cuda_kernels", "mutants"},
    "plugin": {"contract", "harness", "registry"},
    "verdict": {"contract", "harness", "registry", "parallel", "reference"},
    "properties": {"contract", "harness", "registry", "parallel", "reference", "io", "verdict"},
    "fuzz_report": set(),
    "reports": {"contract", "harness", "registry", "parallel", "cpu_kernels", "reference", "io", "verdict",
                "properties", "fuzz_report"},
    "fuzz": {"contract", "harness", "registry", "parallel", "reference", "io", "verdict", "properties", "fuzz_report"},
    "cli": {"contract", "harness", "registry", "parallel", "plugin", "reference", "io", "verdict", "properties",
            "reports", "fuzz_report", "fuzz"},
    "capi": {"contract", "harness", "registry", "parallel", "plugin", "reference", "io", "verdict", "properties",
             "reports", "fuzz_report", "fuzz", "cli"},
    "bench": {"contract", "registry", "cuda_kernels"},
}

SOURCE = re.compile(r"\.(h|hpp|c|cpp|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def part_of(path):
    for name, prefixes in PARTS:
        if any(path.startswith(p) for p in prefixes):
            return name
    return None


def checked(path):
    parts = path.split("/")
    return SOURCE.search(path) and "tests" not in parts[:-1] and "bench" not in parts[1:-1] \
        and parts[0] not in ("examples", "tests") and not path.startswith("fuzz/harness/") and "vendor" not in parts


def breaches(files):
    """files: {path: text}. Yields 'path: includes X (part P), which part Q may not use' lines."""
    for path in sorted(files):
        if not checked(path):
            continue
        own = part_of(path)
        if own is None:
            yield f"{path}: in no part of scripts/source_rules.py's table"
            continue
        folder = path.rsplit("/", 1)[0] if "/" in path else ""
        for inc in INCLUDE.findall(files[path]):
            # A bare name is the including file's folder (contract/rules.h includes "attention.h").
            target = inc if "/" in inc else f"{folder}/{inc}"
            theirs = part_of(target)
            if theirs is None or theirs == own:
                if theirs is None and "/" in inc and inc.split("/")[0] in {p.split("/")[0] for _, ps in PARTS for p in ps}:
                    yield f"{path}: includes {inc}, in no part of the table"
                continue
            if theirs not in USES[own]:
                yield f"{path}: includes {inc} (part {theirs}), which part {own} may not use"


TYPE_DEF = re.compile(r"^[ \t]*(?:struct|class|union|enum(?:[ \t]+(?:class|struct))?)[ \t]+(?:\[\[[^\]]*\]\][ \t]*)?"
                      r"(?:alignas\([^)]*\)[ \t]*)?([A-Za-z_]\w*)[ \t]*(?:final[ \t]*)?(?::[^;{()]*)?\{", re.M)
ALIAS = re.compile(r"^using[ \t]+([A-Za-z_]\w*)[ \t]*=", re.M)


def typed(path):
    return SOURCE.search(path) and not path.startswith("examples/") and "vendor" not in path.split("/")


def type_repeats(files):
    """files: {path: text}. Yields a line for each type name defined more than once, with every place."""
    places = {}
    for path in sorted(files):
        if not typed(path):
            continue
        text = files[path]
        for rx in (TYPE_DEF, ALIAS):
            for m in rx.finditer(text):
                places.setdefault(m.group(1), []).append(f"{path}:{text.count(chr(10), 0, m.start(1)) + 1}")
    for name in sorted(places):
        if len(places[name]) > 1:
            yield f"type {name} is defined {len(places[name])} times: {', '.join(places[name])}"


def tree(root):
    try:  # the tracked files; a tree without git (an unpacked tarball): every file outside build folders
        out = subprocess.check_output(["git", "-C", root, "ls-files"], text=True, stderr=subprocess.DEVNULL).split("\n")
    except (OSError, subprocess.CalledProcessError):
        out = []
        for top, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
            out += [os.path.relpath(os.path.join(top, n), root) for n in names]
    files = {}
    for p in out:
        if p and SOURCE.search(p):
            with open(f"{root}/{p}", encoding="utf-8", errors="replace") as f:
                files[p] = f.read()
    return files


def self_test():
    good = {
        "contract/attention.h": "#include <cstdint>\n",
        "contract/rules.h": '#include "attention.h"\n',
        "reference/certified.cpp": '#include "contract/attention.h"\n#include "reference/parallel.hpp"\n',
        "reports/merge.cpp": '#include "reports/fuzz_report.hpp"\n',
        "verdict/verdict.cpp": '#include "kernels/registry.hpp"\n#include "reference/gpu/oracle_select.hpp"\n',
        "properties/runner.cpp": '#include "verdict/verdict.hpp"\n',
        "reference/tests/t.cpp": '#include "kernels/cpu/naive.hpp"\n',  # tests are not checked
        "reference/bench/b.cpp": '#include "reports/compare.hpp"\n',  # nor a folder's benchmarks
    }
    planted = [  # each breaks the rule once
        ("reference/certified.cpp", '#include "kernels/registry.hpp"\n'),  # the reference uses a system under test
        ("reports/merge.cpp", '#include "fuzz/campaign.hpp"\n'),           # reports/ leans on fuzz/
        ("contract/attention.h", '#include "contract/tensor.hpp"\n'),        # ... not a breach: both contract
        ("plugin/loader.cpp", '#include "properties/runner.hpp"\n'),  # the plugin needs no runner
        ("contract/rules.h", '#include "kernels/registry.hpp"\n'),  # the contract on the registry
        ("kernels/hostile.hpp", '#include "registry.hpp"\n'),  # a bare name is its folder's: the harness on the registry
        ("io/safetensors.cpp", '#include "kernels/nothing.hpp"\n'),  # a project path in no part
        ("reference/exact.cpp", '#include "kernels/cpu/naive.hpp"\n'),
        ("verdict/verdict.cpp", '#include "properties/laws.hpp"\n'),  # the layer below the laws on them
        ("reference/bounds.cpp", '#include "verdict/verdict.hpp"\n'),  # the reference on a kernel's run
    ]
    failures = 0
    # The type-name rule: each planted file repeats a name of `types` once, or (the last two) does not.
    types = {
        "contract/attention.h": "namespace fc {\nstruct Problem {\n  int d;\n};\nenum class Mask : int { None };\n}\n",
        "reference/matrix.hpp": "using Mat = int;\n",
    }
    planted_types = [
        ("reports/report.cpp", "namespace {\nstruct Problem {\n};\n}\n", True),  # a file-local type
        ("properties/runner.cpp", "void f() {\n  struct Mask { int x; };\n}\n", True),  # a function's local type
        ("kernels/tests/t.cpp", "class Problem final : public Base {\n};\n", True),  # tests are checked
        ("reference/bounds_model.hpp", "using Mat = double;\n", True),  # a second alias
        ("reference/certified.cpp", "struct Problem;\nvoid g() {\n  using Mat = float;\n}\n", False),
        ("examples/plugin_cpu/a.c", "struct Problem {\n};\n", False),  # examples are programs of their own
    ]
    if list(type_repeats(types)):
        print("self-test: types without a repeat were flagged:", list(type_repeats(types)))
        failures += 1
    for path, text, expect in planted_types:
        found = list(type_repeats({**types, path: text}))
        if bool(found) != expect:
            print(f"self-test: {path} with {text!r}: expected {'a repeat' if expect else 'none'}, got {found}")
            failures += 1
    if list(breaches(good)):
        print("self-test: a tree that keeps the rule was flagged:", list(breaches(good)))
        failures += 1
    for path, text in planted:
        t = dict(good)
        t[path] = text
        found = list(breaches(t))
        expect = path != "contract/attention.h"
        if bool(found) != expect:
            print(f"self-test: {path} with {text.strip()!r}: expected {'a breach' if expect else 'none'}, got {found}")
            failures += 1
    print("self-test:", "ok" if not failures else f"{failures} wrong")
    return 1 if failures else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    files = tree(root)
    found = list(breaches(files)) + list(type_repeats(files))
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
