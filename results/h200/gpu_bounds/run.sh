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
#   run(command="bash results/h200/gpu_bounds/run.sh 4", carry=[".carry-z"]): the device passes profiled
#       (ncu --set full at b 1, h 4, N 2048, d 128: the oracle's three kernels, then the error model's
#       set of five tiles), from a gpu_bounds_test built with -lineinfo and carried as
#       .carry/tests/gpu_bounds_test_li (cmake -S . -B build-li ... -DCMAKE_CUDA_FLAGS=-lineinfo; ninja -C
#       build-li gpu_bounds_test; strip -o .carry/tests/gpu_bounds_test_li build-li/.../gpu_bounds_test;
#       re-pack .carry-z), with the details and the per-line source counters as text
#   run(command="BEFORE=.carry/tests/gpu_bounds_test_a bash results/h200/gpu_bounds/run.sh 5", ...): the
#       [.time] step of two carried builds alternated in one call (SHAPES as in step 1), for an A/B
# Steps 2 to 5 mean something only after step 1 passed: `run.sh 1 && run.sh 2 && run.sh 3` in one call.
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
  4)
    # lineinfo holds the build's absolute source paths: the checkout is linked there when it is elsewhere.
    src=$(cd "$root" && pwd)
    [ -e /work/main ] || { mkdir -p /work && ln -s "$src" /work/main; }
    ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
    # The [.time] step launches the oracle twice (tensor cores, then CUDA cores: forward_rows each), then
    # the error model's one tile (three launches) and its five tiles (four): skip 5 of the model's names.
    FC_GPU_TIME_SHAPE=1,4,2048,128 timeout 200 "$ncu" --set full --import-source yes \
      -k regex:"forward_rows|dq_rows|dkv_keys" --launch-count 3 -o "$w/oracle" "$t/gpu_bounds_test_li" "[.time]" \
      > "$w/oracle_run.txt" 2>&1
    echo "ncu oracle rc=$?" | tee -a "$w/summary.txt"
    FC_GPU_TIME_SHAPE=1,4,2048,128 timeout 200 "$ncu" --set full --import-source yes \
      -k regex:"forward_rows|backward_rows|backward_keys" --launch-skip 5 --launch-count 4 -o "$w/model" \
      "$t/gpu_bounds_test_li" "[.time]" > "$w/model_run.txt" 2>&1
    echo "ncu model rc=$?" | tee -a "$w/summary.txt"
    for r in oracle model; do
      "$ncu" --import "$w/$r.ncu-rep" --page details > "$w/${r}_details.txt" 2>&1
      "$ncu" --import "$w/$r.ncu-rep" --page source --csv --print-source cuda > "$w/${r}_source.csv" 2>&1
      grep -E "^  [a-z_]+.*\(|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible" \
        "$w/${r}_details.txt" | tee -a "$w/summary.txt"
    done
    ;;
  5)
    for i in 1 2; do
      for bin in "$BEFORE" "$t/gpu_bounds_test"; do
        for shape in ${SHAPES:-1,16,8192,128}; do
          echo "== $bin, run $i" | tee -a "$w/summary.txt"
          FC_GPU_TIME_SHAPE=$shape timeout 100 "$bin" "[.time]" 2>&1 |
            grep -E "fwd\+bwd|tiles?:|cores:|oracle:|passed|failed" | tee -a "$w/summary.txt"
        done
      done
    done
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
# ncu's reports apart (they may pass what a call brings back)
if ls "$w"/*.ncu-rep > /dev/null 2>&1; then tar czf "$out/step${1:-1}_reports.tar.gz" -C "$w" $(cd "$w" && ls *.ncu-rep); fi
tar czf "$out/step${1:-1}.tar.gz" -C "$w" --exclude='*.ncu-rep' . && rm -rf "$w"
ls -la "$out"
exit $status
