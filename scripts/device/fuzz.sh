#!/usr/bin/env bash
# The fuzz campaign on the H200 machine, on binaries staged by `scripts/device.sh carry flashcheck` (built here
# with CUDA for sm_90a): throughput at small shapes on each CUDA kernel and on the CPU reference kernel
# with every host core, the big-shape mode (n up to 131072, q past 2^31 elements), and with `x2`
# the two-GPU job array whose merged report must equal the one-GPU run's byte for byte.
#   bash scripts/device.sh fuzz [small] [big] [x2]        (default: small big; x2 needs the 2-GPU machine)
#   FUZZ_SECONDS=T sets each small-shape campaign's length (default 60).
#   X2_CASES=N sets the x2 job array's case count (default 262144).
#   BIG_KERNELS="K ..." and BIG_SECONDS=T: the big mode's kernels (default cuda_wgmma cuda_tiled) and
#   the time after which it starts no case (default 200; each kernel's step is killed at T + 130 s).
# Everything lands in $OUT/fuzz.tar.gz (reports, failing cases, logs) plus $OUT/fuzz_summary.txt.
set -uo pipefail
source "$(dirname "$0")/env.sh"  # root, out, .carry/ unpacked, LD_LIBRARY_PATH
fc=$root/.carry/tests/flashcheck
work=$out/fuzz
mkdir -p "$work"
summary=()
step() {  # step NAME SECONDS CMD...: the log under $work, the last lines shown, rc and time summarised
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" > "$work/$name.log" 2>&1
  local rc=$?
  summary+=("$name rc=$rc $((SECONDS - t0))s: $(grep -E 'cases/min|--big:' "$work/$name.log" | tail -1)")
  tail -4 "$work/$name.log"
}
[ -x "$fc" ] || { echo "flashcheck not carried: run scripts/device.sh carry flashcheck here first"; exit 2; }
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee "$work/device.txt"
echo "commit $(cat "$root/.carry/COMMIT" 2>/dev/null); $(nproc) host threads" | tee -a "$work/device.txt"
modes=${*:-small big}
secs=${FUZZ_SECONDS:-60}  # each small-shape campaign's length
for mode in $modes; do
  case $mode in
    small)
      # Throughput: every host thread judges; cases of one shape share a launch (--batch).
      step cpu_tiled_threads $((secs + 40)) "$fc" fuzz --kernel cpu_tiled --seconds "$secs" --out "$work/cpu_tiled"
      for k in $(cuda_kernels); do
        step "$k" $((secs + 40)) "$fc" fuzz --kernel "$k" --seconds "$secs" --batch 1024 --out "$work/$k"
      done
      ;;
    big)
      # Past 2^31 elements of q (and of k, v for some cases): 32-bit offsets overflow there.
      # --seconds starts no case after BIG_SECONDS; each finished case rewrites fuzz.json.
      for k in ${BIG_KERNELS:-cuda_wgmma cuda_tiled}; do
        step "big_$k" $((${BIG_SECONDS:-200} + 130)) "$fc" fuzz --kernel "$k" --big --cases 8 \
          --seconds "${BIG_SECONDS:-200}" --rows 48 --out "$work/big_$k"
      done
      ;;
    x2)
      # A job array of two shards, one GPU each, merged; then the same cases on one GPU.
      for i in 0 1; do
        CUDA_VISIBLE_DEVICES=$i timeout 200 "$fc" fuzz --kernel cuda_wgmma --cases "${X2_CASES:-262144}" --batch 1024 \
          --shard "$i/2" --out "$work/shard$i" > "$work/shard$i.log" 2>&1 &
      done
      wait
      step x2_one_gpu 300 env CUDA_VISIBLE_DEVICES=0 "$fc" fuzz --kernel cuda_wgmma --cases "${X2_CASES:-262144}" --batch 1024 \
        --out "$work/one_gpu"
      step x2_merge 60 "$fc" merge --out "$work/merged" "$work/shard0/fuzz.json" "$work/shard1/fuzz.json"
      if cmp "$work/merged/report.json" "$work/one_gpu/fuzz.json"; then
        summary+=("x2: merged shards == one GPU (byte for byte)")
      else
        summary+=("x2: merged shards DIFFER from one GPU")
      fi
      summary+=("x2 shards: $(grep -h 'cases/min' "$work"/shard?.log | tr '\n' ' ')")
      ;;
    *) echo "unknown mode $mode"; exit 2 ;;
  esac
done
printf '%s\n' "${summary[@]}" | tee "$out/fuzz_summary.txt"
tar czf "$out/fuzz.tar.gz" -C "$out" fuzz && rm -rf "$work"
