#!/usr/bin/env bash
# Issue 25's fuzz target (10^6 checked cases a minute) on the CUDA kernels, after the host-side changes
# of this folder's README, against the previous build in the same call; then compute-sanitizer on the
# CUDA calls' per-thread streams and memory pool. Binaries built here:
#   BUILD_DIR=$PWD/build bash scripts/device.sh carry, with a717002's flashcheck added to the bundle as
#   .carry/tests/flashcheck_before
#   run(command="bash results/h200/fuzz_host/run.sh 1", carry=[".carry-z"]), then "... 2" (compute-sanitizer
#   memcheck, then the gpu-labelled tests).
set -uo pipefail
source scripts/device/env.sh
t=$root/.carry/tests
tmp=$(mktemp -d)
w=$tmp/w  # packed into $OUT/run.tar.gz at the end (a call returns few files)
mkdir -p "$w"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$w/device.txt"
echo "commit $(cat "$root/.carry/COMMIT"); cores $(nproc)" | tee -a "$w/device.txt"
case ${1:-1} in
  1)
    # 60 s campaigns, 16 threads (every host thread), a batch of 1024 cases in flight on each; the two
    # builds alternate so that a drift of the machine shows in both.
    for k in cuda_tiled cuda_wgmma; do
      for b in flashcheck_before flashcheck; do
        timeout 120 "$t/$b" fuzz --kernel "$k" --seconds 60 --batch 1024 > "$w/fuzz_${k}_$b.txt" 2>&1
        echo "fuzz $k ($b) rc=$? $(tail -1 "$w/fuzz_${k}_$b.txt")" | tee -a "$w/summary.txt"
      done
    done
    # Whether the host's cores bound it: the same campaign on half the threads.
    timeout 80 "$t/flashcheck" fuzz --kernel cuda_wgmma --seconds 30 --batch 1024 --threads 8 > "$w/fuzz_cuda_wgmma_threads8.txt" 2>&1
    echo "fuzz cuda_wgmma --threads 8 rc=$? $(tail -1 "$w/fuzz_cuda_wgmma_threads8.txt")" | tee -a "$w/summary.txt"
    ;;
  2)
    # compute-sanitizer memcheck: the sanitizer's case, and eight host threads calling at once.
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$t/cuda_tiled_test" "[sanitize]" \
      > "$w/memcheck_sanitize.txt" 2>&1
    echo "memcheck [sanitize] rc=$? $(tail -2 "$w/memcheck_sanitize.txt" | tr '\n' ' ')" | tee -a "$w/summary.txt"
    timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$t/cuda_tiled_test" \
      "CUDA calls from several host threads at once return the bits of calls made one at a time" \
      > "$w/memcheck_threads.txt" 2>&1
    echo "memcheck threads rc=$? $(tail -2 "$w/memcheck_threads.txt" | tr '\n' ' ')" | tee -a "$w/summary.txt"
    OUT=$w/bench timeout 300 bash scripts/device.sh bench tests > "$w/bench.log" 2>&1
    echo "bench tests rc=$?" | tee -a "$w/summary.txt"
    python3 -c 'import json, sys; [print(s) for s in json.load(open(sys.argv[1])).get("steps", [])]' "$w"/bench/*.json \
      2>&1 | tee -a "$w/summary.txt"
    ;;
esac
cp "$w/summary.txt" "$out/summary_${1:-1}.txt" 2>/dev/null
tar czf "$out/run${1:-1}.tar.gz" -C "$tmp" w
