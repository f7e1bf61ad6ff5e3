#!/usr/bin/env bash
# On the H200 (binaries from scripts/device.sh carry-audit): the GPU audit (the CUDA kernels over the default
# sweep's F16/BF16 cases and the GPU cases to N = 131072; CI audits the CPU kernels) and the
# accumulation audit to N = 65536 (the CUDA kernels beside cpu_tiled and the 3-pass baseline, the
# same algorithm rounding to nearest), 16 cases in flight, packed into one tar under $OUT (a run
# returns at most 8 files). AUDIT_LIMIT and ACC_LIMIT (seconds, default 400 and 380) cap the two runs;
# ACC_LIMIT=0 skips the accumulation audit. AUDIT_SHARD=i/n runs shard i of the audit (`flashcheck merge`
# joins the shards' reports): with the long cases checked on every row (the GPU oracle and error model)
# the whole GPU audit takes longer than one device call. AUDIT_KERNELS="k1 k2" audits those kernels
# instead of every CUDA kernel.
set -uo pipefail
source "$(dirname "$0")/env.sh"  # root, out, .carry/ unpacked, LD_LIBRARY_PATH
fc=$root/.carry/tests/flashcheck
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
echo "commit $(cat "$root/.carry/COMMIT")" | tee -a "$out/device.txt"
cd "$out"
# every CUDA kernel of the registry, or AUDIT_KERNELS (names, space-separated)
gpu=$(for k in ${AUDIT_KERNELS:-$(cuda_kernels)}; do printf -- "--kernel %s " "$k"; done)
[ -n "$gpu" ] || { echo "no CUDA kernel in $fc kernels (is it carried?)" >&2; exit 2; }
for run in "audit ${AUDIT_LIMIT:-400} --dtype F16,BF16 $gpu ${AUDIT_SHARD:+--shard $AUDIT_SHARD}" \
  "accumulation ${ACC_LIMIT:-380} --accumulation $gpu --kernel cpu_tiled --kernel cpu_naive"; do
  set -- $run
  name=$1 limit=$2; shift 2
  [ "$limit" = 0 ] && { mkdir -p "$name"; touch "$name.log" "$name.err"; continue; }
  t0=$SECONDS
  timeout "$limit" "$fc" audit "$@" --jobs 16 --out "$name" --junit "$name/junit.xml" > "$name.log" 2> "$name.err"
  echo "$name rc=$? $((SECONDS - t0)) s" | tee -a "$out/device.txt"
  tail -20 "$name.log"
done
tar czf reports.tar.gz audit accumulation audit.log accumulation.log audit.err accumulation.err
rm -rf audit accumulation audit.log accumulation.log audit.err accumulation.err
ls -la "$out"
