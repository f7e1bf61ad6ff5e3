#!/usr/bin/env bash
# FlexAttention with mask tensors and block masks under `reference`, the GPU oracle forced (one H200
# call, after `BUILD_DIR=$PWD/build bash scripts/device.sh carry-external` here):
#   run(command="bash results/h200/masked_oracle/flex.sh", carry=[".carry-external"]), and with
#   FC_FLEX_KERNEL_OPTIONS='{"num_stages": 1}' before it (Triton configs that fit shared memory)
set -u
root=$PWD
x=$(mktemp -d) && tar xzf .carry-external/bundle.tar.gz -C "$x"
export LD_LIBRARY_PATH=$x/lib FLASHCHECK_LIBRARY=$x/lib/libflashcheck.so FLASHCHECK_BIN=$x/bin/flashcheck
export PYTHONPATH=$root/python PYTHONUNBUFFERED=1
cd examples/python
FC_FLEX_KERNEL_OPTIONS=${FC_FLEX_KERNEL_OPTIONS-} FC_FLEX_DTYPES=BF16 FC_FLEX_HEAD_DIMS=64 timeout 400 python3 -m flashcheck check flex_attention:flex_masked \
  --law reference --oracle gpu --cases 10 --seed 1 --no-progress > "$OUT/flex_masked_reference_gpu.txt" 2>&1
echo "flex_masked reference --oracle gpu exit $?"; head -3 "$OUT/flex_masked_reference_gpu.txt" | cut -c1-400
