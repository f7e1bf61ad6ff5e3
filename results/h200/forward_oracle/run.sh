#!/usr/bin/env bash
# One H200 call, after `BUILD_DIR=$PWD/build bash scripts/device.sh carry gpu_oracle_test` here (libfcbench.so
# left out of the bundle, the previous build's gpu_oracle_test added as .carry/tests/gpu_oracle_test_before):
#   run(command="bash results/h200/forward_oracle/run.sh", carry=[".carry-z"])
# The GPU oracle's forward with warp-reduced row statistics: the digest of its bits on the fixed
# problems from the build before and after (the same lines), its tests, the time of one BF16
# forward+backward from both builds, then the gpu-labelled tests.
set -u
[ -d .carry ] || tar xzf .carry-z/bundle.tar.gz
export LD_LIBRARY_PATH=$PWD/.carry/lib
t=.carry/tests
timeout 60 $t/gpu_oracle_test_before "[.digest]" > "$OUT/digest_before.txt" 2>&1
timeout 60 $t/gpu_oracle_test "[.digest]" > "$OUT/digest_after.txt" 2>&1
grep -v "^Filters\|^Randomness\|^=\|^All tests\|^$\|assertion" "$OUT/digest_before.txt" > "$OUT/d1"
grep -v "^Filters\|^Randomness\|^=\|^All tests\|^$\|assertion" "$OUT/digest_after.txt" > "$OUT/d2"
echo "digest lines: $(wc -l < "$OUT/d1") before, $(wc -l < "$OUT/d2") after"
if cmp -s "$OUT/d1" "$OUT/d2"; then echo "digest: the same"; else echo "digest: DIFFERS"; diff "$OUT/d1" "$OUT/d2" | head; fi
rm -f "$OUT/d1" "$OUT/d2"
timeout 200 $t/gpu_oracle_test "[gpu]" > "$OUT/gpu_oracle_test.txt" 2>&1
echo "gpu_oracle_test exit $?"; grep -B3 -A12 FAILED "$OUT/gpu_oracle_test.txt" | head -40; tail -2 "$OUT/gpu_oracle_test.txt"
for shape in 1,16,8192,128 4,16,16384,128; do
  for b in gpu_oracle_test_before gpu_oracle_test; do
    FC_GPU_TIME_SHAPE=$shape timeout 120 $t/$b "[.time]" 2>&1 | grep "fwd+bwd" | sed "s/^/$b $shape: /"
  done
done | tee "$OUT/time.txt"
timeout 240 bash scripts/device.sh bench tests > "$OUT/bench.txt" 2>&1
echo "bench tests exit $?"; tail -5 "$OUT/bench.txt"
