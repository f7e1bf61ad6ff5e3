#!/usr/bin/env bash
# Regenerates the committed results that a CPU machine makes (results/README.md):
#   scripts/results.sh baseline [FLASHCHECK]      results/baseline/quick.json, the report CI's gate holds
#                                                 the quick audit to (report_cli_test): run it after
#                                                 changing a kernel, a bound or the sweep on purpose, and
#                                                 commit the result with the change
#   scripts/results.sh kill-matrix [FLASHCHECK]   results/cpu/kill_matrix.md and .json: every law on every
#                                                 CPU mutant (`flashcheck check --kill-matrix`)
#   scripts/results.sh html DIR [FLASHCHECK]      DIR/report.html and DIR/report.md from DIR/report.json
#                                                 (`flashcheck render`; report.html is not committed)
# FLASHCHECK defaults to build/cli/flashcheck.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
job=${1:-}
[ $# -gt 0 ] && shift
case $job in
  baseline)
    bin=${1:-$root/build/cli/flashcheck}
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$bin" audit --quick --kernel cpu_naive --kernel cpu_tiled --seed 1 --out "$tmp" > /dev/null
    cp "$tmp/report.json" "$root/results/baseline/quick.json"
    # The glibc it was made on: report_cli_test compares bytes only on the same one (libm's last bits).
    getconf GNU_LIBC_VERSION > "$root/results/baseline/platform.txt"
    echo "wrote results/baseline/quick.json ($(grep -c '"kernel"' "$root/results/baseline/quick.json") cells and rows)"
    ;;
  kill-matrix)
    bin=${1:-$root/build/cli/flashcheck}
    dir=$root/results/cpu
    # Exit 1 means a mutant survived or a correct kernel was killed: the matrix is still written.
    rc=0
    "$bin" check --kill-matrix > "$dir/kill_matrix.md.tmp" 2> /dev/null || rc=$?
    "$bin" check --kill-matrix --json > "$dir/kill_matrix.json.tmp" 2> /dev/null || rc=$?
    [ "$rc" -le 1 ] || { rm -f "$dir"/kill_matrix.*.tmp; echo "flashcheck check --kill-matrix: exit $rc" >&2; exit "$rc"; }
    {
      echo "# The CPU mutants' kill matrix"
      echo
      echo "Every law (docs/laws.md) on every CPU mutant, written by \`scripts/results.sh kill-matrix\` at"
      echo "commit $(git -C "$root" rev-parse --short HEAD)."
      echo
      cat "$dir/kill_matrix.md.tmp"
    } > "$dir/kill_matrix.md"
    mv "$dir/kill_matrix.json.tmp" "$dir/kill_matrix.json"
    rm -f "$dir/kill_matrix.md.tmp"
    echo "wrote results/cpu/kill_matrix.md and kill_matrix.json (exit $rc)"
    exit "$rc"
    ;;
  html)
    dir=${1:-}
    if [ -z "$dir" ] || [ ! -f "$dir/report.json" ]; then usage; fi
    bin=${2:-$root/build/cli/flashcheck}
    "$bin" render "$dir/report.json" --out "$dir"
    ;;
  *) usage ;;
esac
