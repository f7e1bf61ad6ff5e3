#!/bin/bash
# Submit a sharded flashcheck audit to Slurm: SHARDS array tasks (audit.sbatch) and their merge
# (merge.sbatch), which starts when every task has ended.
#   OUT=/shared/flashcheck-run AUDIT_ARGS="--plugin /shared/libmy_kernel.so --seed 1" SHARDS=16 \
#     [BASELINE=ci/flashcheck-baseline.json] [FLASHCHECK=/path/to/flashcheck] examples/ci/slurm/submit.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${OUT:?}" "${AUDIT_ARGS:?}" "${SHARDS:?}"
mkdir -p "$OUT"
export OUT AUDIT_ARGS SHARDS
array=$(sbatch --parsable --export=ALL --array="0-$((SHARDS - 1))" "$here/audit.sbatch")
sbatch --parsable --export=ALL --dependency="afterany:${array%%;*}" "$here/merge.sbatch"
