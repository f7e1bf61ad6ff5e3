"""The external audit's runs joined: one kernel's laws run one process each (audit_external.py's
LAW_SPLIT) read as one law run, and several lanes' results.json (audit_external.py --only, one lane per
GPU) as one, rendered by audit_summary.py.

    python3 examples/python/audit_merge.py --out DIR LANE_A/results.json LANE_B/results.json
"""
import json
import os
import shutil

import audit_summary

LANE_FILES = ("kernels", "check", "regressions")  # what reports/h200/external keeps of a run (logs stay out)


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


def merge_results(datas):
    """Several lanes' results.json (audit_external.py --only, one per GPU) as one: the kernels in the order
    of the lanes given, a kernel run in two lanes refused (ValueError); the wall is the longest lane's."""
    kernels, seen = [], set()
    for data in datas:
        for r in data["kernels"]:
            if r["name"] in seen:
                raise ValueError("kernel %s is in more than one lane" % r["name"])
            seen.add(r["name"])
            kernels.append(r)
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
    """python3 audit_summary.py --out DIR LANE/results.json...: the lanes merged into DIR/results.json and
    DIR/summary.md, with the lanes' kernels/, check/ and regressions/ copied into DIR (DIR/device.txt: the
    lanes' device.txt lines, each once)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__.split(":")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("results", nargs="+")
    a = ap.parse_args(argv)
    datas = []
    for path in a.results:
        with open(path) as f:
            datas.append(json.load(f))
    data = merge_results(datas)
    os.makedirs(a.out, exist_ok=True)
    for path in a.results:  # the lanes' per-kernel files (distinct names) beside the merged summary
        lane = os.path.dirname(os.path.abspath(path))
        for sub in LANE_FILES:
            if os.path.isdir(os.path.join(lane, sub)) and lane != os.path.abspath(a.out):
                shutil.copytree(os.path.join(lane, sub), os.path.join(a.out, sub), dirs_exist_ok=True)
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
    import sys

    sys.exit(main())
