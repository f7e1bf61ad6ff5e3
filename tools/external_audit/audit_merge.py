"""The external audit's runs joined: one kernel's laws run one process each (audit_external.py's
LAW_SPLIT) read as one law run, and several lanes' results.json (audit_external.py --only, one lane per
GPU) as one, rendered by audit_summary.py.

    python3 tools/external_audit/audit_merge.py --out DIR LANE_A/results.json LANE_B/results.json
    python3 tools/external_audit/audit_merge.py --override --fresh --out DIR A/results.json B/results.json C/results.json
        (C reran some of A's or B's kernels: C's runs and files replace theirs)
"""
import json
import os
import shutil
import sys

import audit_summary

LANE_FILES = ("kernels", "check", "regressions")  # what results/h200/external keeps of a run (logs stay out)


def merge_law_runs(parts, order):
    """One kernel's law runs made one process per law ({law: run}) read as one law run: the laws in
    `order`, the worst exit (a timeout or a crash over a failure over 0), the processes' seconds summed,
    complete only when every law's run finished."""
    laws = [x for law in order if law in parts for x in parts[law].get("laws", [])]
    laws += [x for law, run in parts.items() if law not in order for x in run.get("laws", [])]
    exits = [run.get("exit") for run in parts.values()]
    bad = [e for e in exits if e not in (0, 1)]
    merged = {"command": "one process per law: " + (next(iter(parts.values())).get("command", "") if parts else ""),
              "exit": bad[0] if bad else (1 if 1 in exits else 0),
              "seconds": round(sum(run.get("seconds") or 0 for run in parts.values()), 1),
              "limit_s": max((run.get("limit_s") or 0 for run in parts.values()), default=0),
              "laws": laws, "complete": all(run.get("complete", True) for run in parts.values()),
              "processes": len(parts)}
    tails = ["%s: %s" % (law, " / ".join(run.get("log_tail") or [run.get("note", "")]))
             for law, run in parts.items() if run.get("exit") not in (0, 1)]
    if tails:
        merged["log_tail"] = tails
    return merged


def owners(datas, override=False):
    """{kernel: index of the lane whose run of it counts}: a kernel in two lanes is refused (ValueError)
    unless `override`, where the later lane's run replaces the earlier one (a rerun of a few kernels)."""
    owner = {}
    for i, data in enumerate(datas):
        for r in data["kernels"]:
            if r["name"] in owner and not override:
                raise ValueError("kernel %s is in more than one lane (--override: the later lane's run counts)"
                                 % r["name"])
            owner[r["name"]] = i
    return owner


def merge_results(datas, override=False):
    """Several lanes' results.json (audit_external.py --only, one per GPU) as one: the kernels in the order
    of the lanes given (a replaced kernel keeps its first place), a kernel run in two lanes refused
    (ValueError) unless `override`; the wall is the longest lane's."""
    owner, kernels, seen = owners(datas, override), [], set()
    for data in datas:
        for r in data["kernels"]:
            if r["name"] not in seen:
                seen.add(r["name"])
                kernels.append(next(x for x in datas[owner[r["name"]]]["kernels"] if x["name"] == r["name"]))
    first = datas[0]
    if any(d.get("seed") != first.get("seed") or d.get("cases_per_law") != first.get("cases_per_law") for d in datas):
        raise ValueError("the lanes ran with different seeds or case counts")
    scope = {}
    for d in datas:
        scope.update(d.get("scope", {}))
    return {"command": " ; ".join(d["command"] for d in datas), "seed": first["seed"],
            "cases_per_law": first["cases_per_law"], "scope": scope,
            "budget_s": max(d["budget_s"] for d in datas), "seconds": max(d["seconds"] for d in datas),
            "baseline": next((d["baseline"] for d in datas if d.get("baseline")), None),
            "lanes": len(datas), "kernels": kernels}


def main(argv=None):
    """python3 audit_merge.py --out DIR LANE/results.json...: the lanes merged into DIR/results.json and
    DIR/summary.md, with the lanes' kernels/, check/ and regressions/ copied into DIR (DIR/device.txt: the
    lanes' device.txt lines, each once)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__.split(":")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--override", action="store_true",
                    help="a kernel in several lanes: the last lane's run counts (its files replace the others')")
    ap.add_argument("--fresh", action="store_true",
                    help="remove DIR's kernels/, check/ and regressions/ first (other files in DIR stay)")
    ap.add_argument("results", nargs="+")
    a = ap.parse_args(argv)
    datas = []
    for path in a.results:
        with open(path) as f:
            datas.append(json.load(f))
    try:
        data = merge_results(datas, a.override)
    except ValueError as exc:
        print("audit_merge: %s" % exc, file=sys.stderr)
        return 2
    owner = owners(datas, a.override)
    lanes = [os.path.dirname(os.path.abspath(path)) for path in a.results]
    if a.fresh:
        for sub in LANE_FILES:
            if os.path.abspath(a.out) not in lanes:
                shutil.rmtree(os.path.join(a.out, sub), ignore_errors=True)
    os.makedirs(a.out, exist_ok=True)
    for i, lane in enumerate(lanes):  # the lanes' per-kernel files beside the merged summary
        def others(_, names, i=i):  # a replaced kernel's files (NAME.json, NAME.LAW.json, NAME/) stay out
            return [n for n in names if owner.get(n.split(".")[0], i) != i]
        for sub in LANE_FILES:
            if os.path.isdir(os.path.join(lane, sub)) and lane != os.path.abspath(a.out):
                shutil.copytree(os.path.join(lane, sub), os.path.join(a.out, sub), dirs_exist_ok=True, ignore=others)
    lines = []
    for path in a.results:
        lines += [x for x in audit_summary._lines(os.path.join(os.path.dirname(path), "device.txt")) if x not in lines]
    if lines:
        with open(os.path.join(a.out, "device.txt"), "w") as f:
            f.write("".join(x + "\n" for x in lines))
    for name, text in (("results.json", json.dumps(data, indent=1) + "\n"), ("summary.md", audit_summary.render(data, a.out))):
        with open(os.path.join(a.out, name + ".tmp"), "w") as f:
            f.write(text)
        os.replace(os.path.join(a.out, name + ".tmp"), os.path.join(a.out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
