#!/usr/bin/env bash
# Issue 22's "behaviour unchanged" on the GPU, at the commit in .carry/COMMIT (binaries built here by
#   BUILD_DIR=$PWD/build bash scripts/device.sh carry cuda_mutants_test shape_histogram):
#   step 1 (one call): every gpu-labelled test (bench tests) beside the CUDA mutants' kill table (mutants kills,
#     as scripts/device/mutants.sh had it at a717002: cuda_mutants_test "check kills M", KILL_JOBS at a time;
#     it now runs the default check per mutant, about a minute each, so the twelve no longer fit this call)
#   step 2 (one call): check --kernel K --cases 100 --seed 1 --jobs 16 on each CUDA kernel with a backward, alone, timed;
#     then fuzz --seconds 20 (16 threads, batches in flight) on each CUDA kernel and on cpu_tiled
# run(command="bash results/h100/restructure/run.sh 1", carry=[".carry-z"]), then "... 2".
set -uo pipefail
source scripts/device/env.sh
fc=$root/.carry/tests/flashcheck
tmp=$(mktemp -d)
w=$tmp/w  # packed into $OUT/run.tar.gz at the end (a call returns few files)
mkdir -p "$w"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$w/device.txt"
echo "commit $(cat "$root/.carry/COMMIT"); cores $(nproc)" | tee -a "$w/device.txt"
case ${1:-1} in
  1)
    (OUT=$w/bench bash scripts/device.sh bench tests > "$w/bench.log" 2>&1) &
    KILL_JOBS=4 OUT=$w/mut bash scripts/device.sh mutants kills > "$w/mutants.log" 2>&1
    wait
    { cat "$w/mut/cudamut_summary.txt" "$w/mut/cudamut/kill_table.txt"
      python3 -c 'import json, sys; [print(s) for s in json.load(open(sys.argv[1])).get("steps", [])]' "$w"/bench/*.json
    } 2>&1 | tee -a "$w/summary.txt"
    ;;
  2)
    for k in $(cuda_kernels backward); do
      t0=$(date +%s.%N)
      timeout 200 "$fc" check --kernel "$k" --cases 100 --seed 1 --jobs 16 --json-out "$w/check_$k.json" > "$w/check_$k.txt" 2> "$w/check_$k.err"
      echo "check $k rc=$? $(python3 -c "import time; print(f'{time.time() - $t0:.1f}')") s; $(tail -1 "$w/check_$k.txt")" | tee -a "$w/summary.txt"
    done
    for k in $(cuda_kernels) cpu_tiled; do
      bs=1024; [ "$k" = cpu_tiled ] && bs=256
      timeout 60 "$fc" fuzz --kernel "$k" --seconds 20 --batch $bs > "$w/fuzz_$k.txt" 2>&1
      echo "fuzz $k --batch $bs rc=$? $(tail -1 "$w/fuzz_$k.txt")" | tee -a "$w/summary.txt"
    done
    ;;
esac
cp "$w/summary.txt" "$out/" 2>/dev/null
tar czf "$out/run.tar.gz" -C "$tmp" w
