#!/usr/bin/env bash
# The long libFuzzer run (docs/fuzzing.md) on a many-core machine, on the harnesses of the
# sanitizer build (clang, -fsanitize=fuzzer,address,undefined; the sanitizer runtimes and libFuzzer
# are linked in statically, libstdc++ and the system libraries come from the machine).
#   bash scripts/device.sh carry-fuzz            here: build the harnesses (asan-ubsan preset) and stage
#                                                them with the shared libraries the GPU machine lacks
#                                                (MPFR, GMP, fmt) in .carry-fuzz/ (git-ignored)
#   bash scripts/device.sh libfuzzer SECONDS [HARNESS...]
#                                                there: each harness (default all three) in turn, with
#                                                -jobs=16 -workers=16 for SECONDS each, from the committed
#                                                corpus; logs, new inputs, crashes and final stats packed
#                                                into $OUT/libfuzzer.tar.gz; executions per harness printed
# Environment (run): JOBS (default 16).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
harnesses=(fuzz_safetensors fuzz_case fuzz_kernels)
corpus_of() { echo "$root/fuzz/corpus/${1#fuzz_}"; }

case ${1:-} in
  carry)
    set -e
    build=$root/build-asan-ubsan
    [ -f "$build/CMakeCache.txt" ] || { echo "configure the asan-ubsan preset first (scripts/setup.sh test)"; exit 2; }
    cmake --build "$build" --target "${harnesses[@]}" -j "${BUILD_JOBS:-2}"
    rm -rf "$root/.carry-fuzz" && mkdir -p "$root/.carry-fuzz/lib"
    for h in "${harnesses[@]}"; do
      cp "$build/fuzz/$h" "$root/.carry-fuzz/"
      for lib in $(ldd "$build/fuzz/$h" | awk '/libfmt|libmpfr|libgmp/ {print $3}'); do
        cp -L "$lib" "$root/.carry-fuzz/lib/"
      done
    done
    git -C "$root" rev-parse --short HEAD > "$root/.carry-fuzz/COMMIT"
    du -sh "$root/.carry-fuzz"
    ldd "$root/.carry-fuzz/${harnesses[0]}" | grep -v -E 'linux-vdso|ld-linux'
    ;;
  run)
    seconds=${2:?usage: scripts/device.sh libfuzzer SECONDS [HARNESS...]}
    shift 2
    (($#)) && harnesses=("$@")
    out=${OUT:-$root/reports/out}
    work=$out/libfuzzer
    mkdir -p "$work"
    export LD_LIBRARY_PATH=$root/.carry-fuzz/lib:${LD_LIBRARY_PATH:-}
    jobs=${JOBS:-16}
    {
      echo "commit $(cat "$root/.carry-fuzz/COMMIT" 2>/dev/null); $(nproc) host threads; $jobs jobs; $seconds s each"
    } | tee "$work/summary.txt"
    for h in "${harnesses[@]}"; do
      bin=$root/.carry-fuzz/$h
      [ -x "$bin" ] || { echo "$h not carried: run 'bash scripts/device.sh carry-fuzz' here first" | tee -a "$work/summary.txt"; continue; }
      mkdir -p "$work/$h/new" "$work/$h/artifacts"
      t0=$SECONDS
      # Each job fuzzes for the whole time box (-max_total_time); -workers runs them side by side.
      (cd "$work/$h" && timeout $((seconds + 60)) "$bin" -jobs="$jobs" -workers="$jobs" -max_total_time="$seconds" \
        -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$work/$h/artifacts/" \
        "$work/$h/new" "$(corpus_of "$h")" > "$work/$h/driver.log" 2>&1)
      rc=$?
      execs=$(cat "$work/$h"/fuzz-*.log 2>/dev/null | awk '/stat::number_of_executed_units/ {s += $2} END {print s + 0}')
      crashes=$(find "$work/$h/artifacts" -type f | wc -l)
      echo "$h: $execs executions in $((SECONDS - t0)) s ($jobs jobs), $crashes artifacts, rc $rc, $(find "$work/$h/new" -type f | wc -l) new inputs" |
        tee -a "$work/summary.txt"
    done
    tar czf "$out/libfuzzer.tar.gz" -C "$out" libfuzzer
    cp "$work/summary.txt" "$out/libfuzzer_summary.txt"
    rm -rf "$work"
    ;;
  *)
    sed -n '2,14p' "$0"
    exit 2
    ;;
esac
