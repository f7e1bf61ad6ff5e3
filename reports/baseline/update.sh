#!/usr/bin/env bash
# Regenerates reports/baseline/quick.json, the report CI's gate holds the quick audit to
# (report_cli_test): run it after changing a kernel, a bound or the sweep on purpose, and commit the
# result with the change. usage: reports/baseline/update.sh [path/to/flashcheck]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/cli/flashcheck}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" audit --quick --kernel cpu_naive --kernel cpu_tiled --seed 1 --out "$tmp" > /dev/null
cp "$tmp/report.json" "$root/reports/baseline/quick.json"
# The glibc it was made on: report_cli_test compares bytes only on the same one (libm's last bits).
getconf GNU_LIBC_VERSION > "$root/reports/baseline/platform.txt"
echo "wrote reports/baseline/quick.json ($(grep -c '"kernel"' "$root/reports/baseline/quick.json") cells and rows)"
