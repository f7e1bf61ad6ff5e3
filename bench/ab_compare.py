#!/usr/bin/env python3
"""Side by side: the two perf passes of a `scripts/device.sh bench ab` run (perf: the new build, perf_base: the
old one), fwd+bwd first.   bench/ab_compare.py RUN.json"""
import json
import sys


def rows(perf):
    return {(r["dtype"], r["d"], r["n"], r["causal"]): r for r in perf}


def main():
    run = json.load(open(sys.argv[1]))
    new, base = rows(run["perf"]), rows(run["perf_base"])
    print(f"new {run['meta'].get('commit')}, base {run['meta'].get('base_commit')}")
    print("| dtype | d | N | causal | new fwd+bwd TF | vs flash | base fwd+bwd TF | vs flash | new / base | new fwd TF | base fwd TF | deterministic new / base |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key, x in new.items():
        y = base.get(key)
        if y is None:
            continue
        print(f"| {key[0]} | {key[1]} | {key[2]} | {'yes' if key[3] else 'no'} | {x['ours_fwdbwd']:.0f} | "
              f"{x['ratio_fwdbwd_vs_flash']:.2f}× | {y['ours_fwdbwd']:.0f} | {y['ratio_fwdbwd_vs_flash']:.2f}× | "
              f"{x['ours_fwdbwd'] / y['ours_fwdbwd']:.3f} | {x['ours_fwd']:.0f} | {y['ours_fwd']:.0f} | "
              f"{x['ours_fwdbwd_deterministic']:.0f} / {y['ours_fwdbwd_deterministic']:.0f} |")


if __name__ == "__main__":
    main()
