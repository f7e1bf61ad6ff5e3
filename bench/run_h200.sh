#!/usr/bin/env bash
# One device call: GPU tests, compute-sanitizer, and the benchmark, all under $OUT.
# Binaries are built on the dev machine by bench/carry.sh (no Boost/Eigen on the device), in .carry/:
#   .carry/libfcbench.so  .carry/tests/*_test  (.carry/lib/: shared libraries a carried binary lacks there)
# Usage: bench/run_h200.sh [tests] [sanitize] [check] [perf|perf-quick] [memory]
# The device returns at most 8 files: with more steps, write elsewhere and pack, e.g.
#   o=$OUT; OUT=/tmp/o bash bench/run_h200.sh tests sanitize check perf memory; tar czf $o/out.tgz -C /tmp/o .
set -uo pipefail
source "$(dirname "$0")/device_env.sh"  # root, out, .carry/ unpacked, LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
export FC_COMMIT=$(cat "$root/.carry/COMMIT" 2>/dev/null || echo unknown)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv | tee "$out/device.txt"
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case "$step" in
    tests)
      for t in "$root"/.carry/tests/*_test; do
        echo "--- $(basename "$t")"
        "$t" -r compact > "$out/$(basename "$t").log" 2>&1
        echo "exit=$?"
        tail -40 "$out/$(basename "$t").log"
      done 2>&1 | tee "$out/tests.txt" ;;
    sanitize)
      t=$root/.carry/tests/cuda_tiled_test
      for tool in memcheck racecheck; do
        compute-sanitizer --tool $tool --error-exitcode 3 "$t" "[sanitize]" 2>&1 | tail -15
        echo "$tool rc=${PIPESTATUS[0]}"
      done 2>&1 | tee "$out/sanitize.txt" ;;
    check) python3 "$root/bench/bench_sdpa.py" --lib "$root/.carry/libfcbench.so" --jobs check --out "$out/check.json" 2>&1 | tail -5 ;;
    perf) python3 "$root/bench/bench_sdpa.py" --lib "$root/.carry/libfcbench.so" --jobs perf --out "$out/perf.json" 2>&1 ;;
    perf-quick) python3 "$root/bench/bench_sdpa.py" --lib "$root/.carry/libfcbench.so" --jobs perf --quick --out "$out/perf.json" 2>&1 ;;
    memory) python3 "$root/bench/bench_sdpa.py" --lib "$root/.carry/libfcbench.so" --jobs memory --out "$out/memory.json" 2>&1 ;;
  esac
done
