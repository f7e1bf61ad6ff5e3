#!/usr/bin/env bash
# On the H200 (binaries from reports/gpu/stage.sh): the GPU audit (every kernel, the default sweep
# with the GPU cases to N = 16384) and the accumulation audit (to N = 65536), 16 cases in flight,
# each audit's outputs packed into one tar under $OUT (a run returns at most 8 files).
set -uo pipefail
source "$(dirname "$0")/../../bench/device_env.sh"  # root, out, .carry/ unpacked, LD_LIBRARY_PATH
fc=$root/.carry/tests/flashcheck
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
echo "commit $(cat "$root/.carry/COMMIT")" | tee -a "$out/device.txt"
cd "$out"
for run in "audit" "accumulation --accumulation"; do
  set -- $run
  name=$1; shift
  t0=$SECONDS
  timeout 280 "$fc" audit "$@" --jobs 16 --out "$name" --junit "$name/junit.xml" > "$name.log" 2> "$name.err"
  echo "$name rc=$? $((SECONDS - t0)) s" | tee -a "$out/device.txt"
  tail -20 "$name.log"
done
tar czf reports.tar.gz audit accumulation audit.log accumulation.log audit.err accumulation.err
rm -rf audit accumulation audit.log accumulation.log audit.err accumulation.err
ls -la "$out"
