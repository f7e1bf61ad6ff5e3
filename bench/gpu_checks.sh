#!/usr/bin/env bash
# One device call that runs the GPU verdicts on binaries staged by bench/carry.sh (built here with
# `bench/carry.sh laws_gpu_test flashcheck`): the gpu-labelled tests, the property suite on each CUDA
# kernel through `flashcheck check`, `flashcheck audit`, and compute-sanitizer memcheck / racecheck.
# A binary not carried (the 64 MiB limit) is reported, not run. Logs under $OUT; a summary last.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"  # root, out, .carry/ unpacked, LD_LIBRARY_PATH
bin=$root/.carry/tests
summary=()
step() {  # step NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  local exe="" a
  for a in "$@"; do case $a in */*) exe=$a; break ;; esac; done  # the carried binary: the first path
  if [ -n "$exe" ] && [ ! -x "$exe" ]; then summary+=("$name not carried ($(basename "$exe"))"); return; fi
  local t0=$SECONDS
  timeout "$secs" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  summary+=("$name rc=$rc $((SECONDS - t0))s")
  tail -6 "$out/$name.log"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
echo "commit $(cat "$root/.carry/COMMIT" 2>/dev/null)"
step laws_gpu_test 90 env FC_SEED=1 "$bin/laws_gpu_test" -r compact
step cuda_naive_test 40 "$bin/cuda_naive_test" -r compact
step cuda_tiled_test 60 "$bin/cuda_tiled_test" -r compact
step audit 120 "$bin/flashcheck" audit --quick --out "$out/audit"  # the full GPU audit: reports/gpu/audit_h200.sh
step check_cuda_tiled 40 "$bin/flashcheck" check --kernel cuda_tiled --seed 7
step check_cuda_wgmma 40 "$bin/flashcheck" check --kernel cuda_wgmma --seed 7
for tool in memcheck racecheck; do  # the [sanitize] case: one causal GQA problem, every config, both kernels
  step "sanitize_$tool" 170 compute-sanitizer --tool "$tool" --error-exitcode 3 "$bin/cuda_tiled_test" "[sanitize]"
done
printf '%s\n' "${summary[@]}"
