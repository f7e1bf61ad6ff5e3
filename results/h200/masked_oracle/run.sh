#!/usr/bin/env bash
# One H200 call, after `BUILD_DIR=$PWD/build bash scripts/device.sh carry gpu_oracle_test` (libfcbench.so
# left out of the bundle) and `BUILD_DIR=$PWD/build bash scripts/device.sh carry-external` here:
#   run(command="bash results/h200/masked_oracle/run.sh", carry=[".carry-z", ".carry-external"])
# The gpu-labelled tests, the GPU oracle's tests (ALiBi, sinks, mask tensors and block masks among
# them) and its digest, then FlexAttention with mask tensors and block masks and torch_paged through
# the Python bridge under `reference` with the GPU oracle forced.
set -u
root=$PWD
bash scripts/device.sh bench tests > "$OUT/bench.txt" 2>&1
echo "bench tests exit $?"
export LD_LIBRARY_PATH=$root/.carry/lib
timeout 180 .carry/tests/gpu_oracle_test "[gpu]" > "$OUT/gpu_oracle_test.txt" 2>&1
echo "gpu_oracle_test exit $?"; grep -B3 -A12 FAILED "$OUT/gpu_oracle_test.txt" | head -60; tail -3 "$OUT/gpu_oracle_test.txt"
timeout 60 .carry/tests/gpu_oracle_test "[.digest]" > "$OUT/digest.txt" 2>&1
x=$(mktemp -d) && tar xzf .carry-external/bundle.tar.gz -C "$x"
export LD_LIBRARY_PATH=$x/lib:$LD_LIBRARY_PATH FLASHCHECK_LIBRARY=$x/lib/libflashcheck.so FLASHCHECK_BIN=$x/bin/flashcheck
export PYTHONPATH=$root/python PYTHONUNBUFFERED=1
cd examples/python
timeout 60 python3 -m flashcheck check torch_paged:paged --law reference --oracle gpu --cases 40 --seed 2 \
  --no-progress > "$OUT/paged_reference_gpu.txt" 2>&1
echo "torch_paged reference --oracle gpu exit $?"; grep -E "PASS|FAIL|\?" "$OUT/paged_reference_gpu.txt"
FC_FLEX_DTYPES=BF16 FC_FLEX_HEAD_DIMS=64 timeout 240 python3 -m flashcheck check flex_attention:flex_masked \
  --law reference --oracle gpu --cases 10 --seed 1 --no-progress > "$OUT/flex_masked_reference_gpu.txt" 2>&1
echo "flex_masked reference --oracle gpu exit $?"; tail -15 "$OUT/flex_masked_reference_gpu.txt"
