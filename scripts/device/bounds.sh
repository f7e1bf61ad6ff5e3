#!/usr/bin/env bash
# The error model on the H200 (docs/error-model.md, "On the H200"): the GPU probe of its
# assumptions and the tightness / long-row soundness of the CUDA kernels' bounds.
#   here:   bash scripts/device.sh carry-bounds
#           (scripts/device.sh carry builds bounds_tightness and tc_probe_gpu_test for sm_90a into .carry/, with the
#           shared libraries they need that the device lacks, packed into .carry-z/)
#   there:  run(command="bash scripts/device.sh bounds", carry=[".carry-z"])
# `run` writes $OUT/bounds.tar.gz: probe.log (tc_probe_gpu_test: ex2.approx / log2f ulps, mma.sync
# against the tensor-core model), tight_<kernel>_<dtype>_<regime>.md (1000 cases each, normal and
# outliers), long_<kernel>_<dtype>.md (the long_row regime, rows up to 65536 keys, 40 cases each),
# each with its .err (any "UNSOUND" line there is a correct kernel outside its bound), and summary.txt.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
case "${1:-}" in
  build)
    set -e
    bash "$root/scripts/device/carry.sh" bounds_tightness tc_probe_gpu_test
    exe=$(find "${BUILD_DIR:-$root/build-h200}" -type f -name bounds_tightness -perm -u+x | head -1)
    for lib in $(ldd "$exe" | awk '/libfmt|libmpfr|libgmp/ {print $3}'); do cp -L "$lib" "$root/.carry/lib/"; done
    rm -f "$root/.carry-z/bundle.tar.gz" && tar cf - -C "$root" .carry | xz -9 -T2 > "$root/.carry-z/bundle.tar.xz"
    du -sh "$root/.carry-z"
    ;;
  run)
    source "$root/scripts/device/env.sh"  # root, out, .carry/ unpacked, LD_LIBRARY_PATH
    bin=$root/.carry/tests
    res=$out/bounds
    mkdir -p "$res"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$res/device.txt"
    echo "commit $(cat "$root/.carry/COMMIT" 2>/dev/null)" | tee -a "$res/device.txt"
    timeout 120 "$bin/tc_probe_gpu_test" -s -r compact > "$res/probe.log" 2>&1
    echo "probe rc=$?" >> "$res/summary.txt"
    # Tightness: one process per kernel x dtype x regime, 8 at a time (the oracle runs on the CPU).
    jobs_=()
    for k in $(cuda_kernels backward); do
      for t in F16 BF16; do
        for r in normal outliers; do
          f=$res/tight_${k}_${t}_${r}
          timeout 420 "$bin/bounds_tightness" --kernel "$k" --dtype "$t" --regime "$r" --cases 1000 > "$f.md" 2> "$f.err" &
          jobs_+=($!)
        done
        f=$res/long_${k}_${t}
        timeout 420 "$bin/bounds_tightness" --kernel "$k" --dtype "$t" --regime long_row --long-n 65536 --cases 40 \
          > "$f.md" 2> "$f.err" &
        jobs_+=($!)
      done
    done
    for p in "${jobs_[@]}"; do wait "$p"; echo "pid $p rc=$?" >> "$res/summary.txt"; done
    tables=("$res"/tight_*.md)  # the header of any one of them
    { head -2 "${tables[0]}"; for f in "$res"/tight_*.md "$res"/long_*.md; do tail -n +3 "$f"; done; } \
      > "$res/table.md"
    grep -h UNSOUND "$res"/*.err | head -20 >> "$res/summary.txt"
    cat "$res/table.md" "$res/summary.txt"
    tar czf "$out/bounds.tar.gz" -C "$out" bounds
    ;;
  *)
    echo "usage: scripts/device.sh carry-bounds | bounds" >&2
    exit 2
    ;;
esac
