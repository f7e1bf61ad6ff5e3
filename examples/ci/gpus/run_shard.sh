#!/bin/sh
# One shard of examples/ci/gpus: run_shard.sh FLASHCHECK I/N OUT [audit arguments...], on the GPU ctest
# gave the test (CTEST_RESOURCE_GROUP_0_GPUS=id:N,slots:1). A failing cell is the merge's verdict
# (exit 0 once report.json is written); a usage error fails the shard.
set -u
fc=$1 shard=$2 out=$3
shift 3
gpu=$(printf '%s\n' "${CTEST_RESOURCE_GROUP_0_GPUS:-}" | sed -n 's/^id:\([^,]*\),.*/\1/p')
if [ -z "$gpu" ]; then
  echo "run_shard.sh: no GPU from ctest (run ctest with --resource-spec-file)" >&2
  exit 2
fi
rm -rf "$out"
CUDA_VISIBLE_DEVICES=$gpu "$fc" audit "$@" --shard "$shard" --out "$out"
status=$?
echo "shard $shard on GPU $gpu: exit $status"
if [ -f "$out/report.json" ]; then exit 0; fi
exit "$status"
