#!/usr/bin/env bash
# The GPU runner: every step that needs the device, on binaries built elsewhere by scripts/device.sh carry
# (the device has no Boost, Eigen or Catch2 headers), unpacked from .carry-z/ into .carry/.
#   scripts/device.sh bench STEP...      from the repository root on the GPU machine; results under $OUT
# Steps:
#   tests      the gpu-labelled test binaries carried (laws_gpu_test with FC_SEED=1, cuda_tiled_test,
#              cuda_naive_test): every law and the kernels' own tests on every CUDA kernel
#   laws       flashcheck check --kernel K --seed 7 for each CUDA kernel with a backward, and flashcheck audit --quick
#   sanitize   compute-sanitizer memcheck and racecheck on cuda_tiled_test "[sanitize]"
#   check      bench_sdpa.py --jobs check: relative errors vs float64 attention, beside torch flash's
#   perf       bench_sdpa.py --jobs perf: TFLOP/s beside PyTorch SDPA (flash, cuDNN); perf-quick: N = 4096
#   memory     bench_sdpa.py --jobs memory: extra device memory vs N
#   ab         perf of .carry/libfcbench.so and of .carry/base/libfcbench.so (an older build, its COMMIT
#              beside it), each in its own pass beside torch; options in AB_OPTS (default --wgmma-only
#              --ns 4096,16384); bench/ab_compare.py RUN.json prints them side by side
# Output: $OUT/<YYYY-MM-DD-HHMM>_<commit>.json, the run (bench/report.py collect: the command, each step's exit
# status, time and summary, the JSON results), and $OUT/logs.tar.gz (every log; not for git). Copy
# the JSON into results/h200/runs/ and regenerate BENCH.md with bench/report.py render.
set -uo pipefail
# shellcheck source=scripts/device/env.sh
source "$(dirname "$0")/env.sh"  # root, out, .carry/ unpacked, LD_LIBRARY_PATH
work=$(mktemp -d)  # logs and step results; only the run JSON and the log archive go to $out
export PYTHONUNBUFFERED=1
FC_COMMIT=$(head -n1 "$root/.carry/COMMIT" 2>/dev/null || echo unknown)
export FC_COMMIT
bin=$root/.carry/tests
lib=$root/.carry/libfcbench.so
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$work/device.txt" 2>&1

# step NAME SECONDS CMD...: run CMD with a time limit, its output in $work/NAME.log; one line in
# $work/steps.tsv (name, exit status, seconds). A step whose carried binary (the first argument under
# .carry/) is missing did not run, and says so.
step() {
  local name=$1 secs=$2 exe="" a
  shift 2
  for a in "$@"; do case $a in "$root"/.carry/*) exe=$a && break ;; esac; done  # the carried binary, if any
  if [ -n "$exe" ] && [ ! -e "$exe" ]; then
    printf '%s\tnot carried\t0\n' "$name" >> "$work/steps.tsv"
    return
  fi
  local t0=$SECONDS
  timeout "$secs" "$@" > "$work/$name.log" 2>&1
  printf '%s\t%s\t%s\n' "$name" "$?" "$((SECONDS - t0))" >> "$work/steps.tsv"
  echo "$name: rc=$(tail -n1 "$work/steps.tsv" | cut -f2), $((SECONDS - t0)) s"
}

sdpa=(python3 "$root/bench/bench_sdpa.py" --lib "$lib")

for s in "$@"; do
  case $s in
    tests)
      # One process per law (its test case on every CUDA kernel), eight at a time: the oracle runs on
      # the host's cores while the GPU serves them all. laws.tsv maps laws_gpu_N to the law's test.
      "$bin/laws_gpu_test" --list-test-names-only 2>/dev/null | grep -v '^$' | nl -w1 -s$'\t' > "$work/laws.tsv"
      while IFS=$'\t' read -r i name; do
        step "laws_gpu_$i" 540 env FC_SEED=1 FC_THREADS=2 "$bin/laws_gpu_test" "${name//,/\\,}" -r compact &
        while [ "$(jobs -rp | wc -l)" -ge 8 ]; do wait -n; done
      done < "$work/laws.tsv"
      wait
      step cuda_tiled_test 120 "$bin/cuda_tiled_test" -r compact
      step cuda_naive_test 60 "$bin/cuda_naive_test" -r compact ;;
    laws)
      for k in $(cuda_kernels backward); do step "check_$k" 400 "$bin/flashcheck" check --kernel "$k" --seed 7; done
      step audit 180 "$bin/flashcheck" audit --quick --out "$work/audit" ;;
    sanitize)
      for tool in memcheck racecheck; do
        step "sanitize_$tool" 300 compute-sanitizer --tool "$tool" --error-exitcode 3 "$bin/cuda_tiled_test" "[sanitize]"
      done ;;
    check) step check 540 "${sdpa[@]}" --jobs check --out "$work/check.json" ;;
    perf) step perf 540 "${sdpa[@]}" --jobs perf --out "$work/perf.json" ;;
    perf-quick) step perf 540 "${sdpa[@]}" --jobs perf --quick --out "$work/perf.json" ;;
    memory) step memory 540 "${sdpa[@]}" --jobs memory --out "$work/memory.json" ;;
    ab)
      # shellcheck disable=SC2086
      step perf 540 "${sdpa[@]}" --jobs perf ${AB_OPTS:---wgmma-only --ns 4096,16384} --out "$work/perf.json"
      # shellcheck disable=SC2086
      FC_COMMIT="base $(head -n1 "$root/.carry/base/COMMIT" 2>/dev/null || echo unknown)" \
        step perf_base 540 python3 "$root/bench/bench_sdpa.py" --lib "$root/.carry/base/libfcbench.so" --jobs perf \
        ${AB_OPTS:---wgmma-only --ns 4096,16384} --out "$work/perf_base.json" ;;
    *)
      echo "scripts/device.sh bench: unknown step $s (tests laws sanitize check perf perf-quick memory ab)" >&2
      exit 2 ;;
  esac
done

run=$(python3 "$root/bench/report.py" collect "$work" --command "scripts/device.sh bench $*" --out "$out")
tar czf "$out/logs.tar.gz" -C "$work" .
echo "run: $run"
