#!/usr/bin/env bash
# The error model on the GPU (reference/gpu/bounds_gpu.cu). Binaries built here:
#   BUILD_DIR=$PWD/build bash scripts/device.sh carry gpu_bounds_test gpu_oracle_test
#   run(command="bash results/h200/gpu_bounds/run.sh 1", carry=[".carry-z"]): gpu_bounds_test, its timing
#   run(command="bash results/h200/gpu_bounds/run.sh 2", carry=[".carry-z"]): compare of issue 25's shape
#       (SHAPE="b h N d", default 4 16 16384 128; BF16, torch's flash SDPA outputs; COMPARE_ARGS: more
#       options; REPS: compare's runs, default 2; FLASHCHECK: another carried build, default
#       .carry/tests/flashcheck) beside torch's float64 attention; run.json's stages_s
#   run(command="bash results/h200/gpu_bounds/run.sh 3", carry=[".carry-z"]): long audit cases checked on
#       every row (the certificate and the bound on the GPU), one at a time, timed (CASES: which)
# Steps 2 and 3 mean something only after step 1 passed: `run.sh 1 && run.sh 2 && run.sh 3` in one call.
set -uo pipefail
COMPARE_ARGS=${COMPARE_ARGS:-}
source scripts/device/env.sh
status=0
t=$root/.carry/tests
w=$out/run
mkdir -p "$w"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$w/device.txt"
echo "commit $(cat "$root/.carry/COMMIT"); cores $(nproc)" | tee -a "$w/device.txt"
case ${1:-1} in
  1)
    timeout 300 "$t/gpu_bounds_test" "[gpu]" > "$w/gpu_bounds_test.txt" 2>&1
    status=$?
    echo "gpu_bounds_test [gpu] rc=$status" | tee -a "$w/summary.txt"
    tail -5 "$w/gpu_bounds_test.txt"
    for shape in ${SHAPES:-1,16,8192,128}; do
      FC_GPU_TIME_SHAPE=$shape timeout 200 "$t/gpu_bounds_test" "[.time]" 2>&1 | grep -E "fwd\+bwd|tiles?:|cores:|oracle:|passed|failed" |
        tee -a "$w/summary.txt"
    done
    ;;
  2)
    shape=${SHAPE:-4 16 16384 128}
    python3 results/h200/gpu_bounds/compare_case.py $shape "$w" 2>&1 | tee -a "$w/summary.txt"
    ls -la "$w"/*.safetensors
    for i in $(seq "${REPS:-2}"); do
      s=$(date +%s%N)
      "${FLASHCHECK:-$t/flashcheck}" compare --inputs "$w/in.safetensors" --outputs "$w/out.safetensors" --name torch_flash \
        --out "$w/compare$i" $COMPARE_ARGS > "$w/compare$i.log" 2>&1
      rc=$?
      echo "flashcheck compare $COMPARE_ARGS (b h N d: $shape) BF16 fwd+bwd (run $i) rc=$rc $((($(date +%s%N) - s) / 1000000)) ms" |
        tee -a "$w/summary.txt"
      grep -A8 stages_s "$w/compare$i/run.json" | tee -a "$w/summary.txt"
    done
    rm -f "$w"/*.safetensors "$w"/compare*/report.html
    ;;
  3)
    for c in ${CASES:-BF16/normal/n16384 BF16/causal_bottom_right/n131072 F16/normal/n131072}; do
      s=$(date +%s%N)
      "$t/flashcheck" audit --kernel cuda_wgmma --case "$c" --jobs 16 --out "$w/$(echo "$c" | tr / _)" \
        > "$w/$(echo "$c" | tr / _).log" 2>&1
      rc=$?
      echo "audit --kernel cuda_wgmma --case $c rc=$rc $((($(date +%s%N) - s) / 1000000)) ms" | tee -a "$w/summary.txt"
      grep -E "^\| (F16|BF16)/" "$w/$(echo "$c" | tr / _)/report.md" | tee -a "$w/summary.txt"
    done
    rm -f "$w"/*/report.html
    ;;
esac
tar czf "$out/step${1:-1}.tar.gz" -C "$w" . && rm -rf "$w"
ls -la "$out"
exit $status
