#!/usr/bin/env bash
# One H200 call, after `BUILD_DIR=$PWD/build bash scripts/device.sh carry gpu_oracle_test` (libfcbench.so
# left out of the bundle) and `BUILD_DIR=$PWD/build bash scripts/device.sh carry-external` here:
#   run(command="bash results/h200/softcap_oracle/run.sh", carry=[".carry-z", ".carry-external"])
# The GPU oracle's tests (softcap among them: the fixed cases, the random masked problems, the device's
# tanh against MPFR), FlexAttention's softcap score_mod under `reference` with the GPU oracle forced,
# then the gpu-labelled tests.
set -u
root=$PWD
[ -d .carry ] || tar xzf .carry-z/bundle.tar.gz
export LD_LIBRARY_PATH=$root/.carry/lib
timeout 200 .carry/tests/gpu_oracle_test "[gpu]" > "$OUT/gpu_oracle_test.txt" 2>&1
echo "gpu_oracle_test exit $?"; grep -B3 -A12 FAILED "$OUT/gpu_oracle_test.txt" | head -60
grep -E "softcap|tanh|covered" "$OUT/gpu_oracle_test.txt" | head -20; tail -3 "$OUT/gpu_oracle_test.txt"
x=$(mktemp -d) && tar xzf .carry-external/bundle.tar.gz -C "$x"
(
  export LD_LIBRARY_PATH=$x/lib:$LD_LIBRARY_PATH FLASHCHECK_LIBRARY=$x/lib/libflashcheck.so FLASHCHECK_BIN=$x/bin/flashcheck
  export PYTHONPATH=$root/python PYTHONUNBUFFERED=1
  cd examples/python
  FC_FLEX_DTYPES=BF16 FC_FLEX_HEAD_DIMS=64 timeout 130 python3 -m flashcheck check flex_attention:flex_softcap \
    --law reference --oracle gpu --cases 20 --seed 1 --no-progress > "$OUT/flex_softcap_reference_gpu.txt" 2>&1
  echo "flex_softcap reference --oracle gpu exit $?"; grep -E "PASS|FAIL|\?|error" "$OUT/flex_softcap_reference_gpu.txt" | cut -c1-300
)
timeout 240 bash scripts/device.sh bench tests > "$OUT/bench.txt" 2>&1
echo "bench tests exit $?"; tail -5 "$OUT/bench.txt"
