#!/usr/bin/env bash
# One H200 call, after `BUILD_DIR=$PWD/build bash scripts/device.sh carry gpu_oracle_test` and
# `BUILD_DIR=$PWD/build bash scripts/device.sh carry-external` here:
#   run(command="bash results/h200/paged_oracle/run.sh", carry=[".carry-z", ".carry-external"])
# The gpu-labelled tests, the GPU oracle's tests (paged and padded cases among them) and its digest,
# then examples/python/torch_paged.py through the Python bridge: every law, the reference law with the
# GPU oracle forced, and the planted int16 page index under the paged law.
set -u
root=$PWD
bash scripts/device.sh bench tests > "$OUT/bench.txt" 2>&1
echo "bench tests exit $?"
grep -E "exit|passed|failed" "$OUT/bench.txt" | tail -8
export LD_LIBRARY_PATH=$root/.carry/lib
timeout 150 .carry/tests/gpu_oracle_test "[gpu]" > "$OUT/gpu_oracle_test.txt" 2>&1
echo "gpu_oracle_test exit $?"; tail -3 "$OUT/gpu_oracle_test.txt"
timeout 60 .carry/tests/gpu_oracle_test "[.digest]" > "$OUT/digest.txt" 2>&1
x=$(mktemp -d) && tar xzf .carry-external/bundle.tar.gz -C "$x"
export LD_LIBRARY_PATH=$x/lib:$LD_LIBRARY_PATH FLASHCHECK_LIBRARY=$x/lib/libflashcheck.so FLASHCHECK_BIN=$x/bin/flashcheck
export PYTHONPATH=$root/python PYTHONUNBUFFERED=1
cd examples/python
timeout 120 python3 -m flashcheck check torch_paged:paged --law reference --oracle gpu --cases 60 --seed 1 \
  --no-progress > "$OUT/reference_gpu.txt" 2>&1
echo "reference --oracle gpu exit $?"; tail -4 "$OUT/reference_gpu.txt"
timeout 90 python3 -m flashcheck check torch_paged:paged_int16 --law paged --cases 40 --seed 1 --no-progress \
  > "$OUT/int16.txt" 2>&1
echo "paged_int16 exit $?"; grep -E "FAIL|PASS|paged" "$OUT/int16.txt" | head -6
timeout 200 python3 -m flashcheck check torch_paged:paged --cases 20 --seed 1 --no-progress \
  --json-out "$OUT/paged.json" > "$OUT/paged.txt" 2>&1
echo "check exit $?"; tail -12 "$OUT/paged.txt"
