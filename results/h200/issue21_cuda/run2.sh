#!/usr/bin/env bash
# Helper D's second device run: the padded_scratch witness (named without a comma this time), and
# consecutive_calls on the correct CUDA kernels at seeds 1..20 (the atomic d_q path under a bitwise law).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out" "$here/logs"
cd "$here" && tar xzf bundle.tar.gz
export LD_LIBRARY_PATH=$here/.carry/lib:${LD_LIBRARY_PATH:-}
bin=$here/.carry/tests
fc=$bin/flashcheck
mkdir -p /tmp/noregs
cat .carry/COMMIT > "$out/device.txt"
T0=$SECONDS
LIMIT=${LIMIT:-150}
left() { echo $((LIMIT - (SECONDS - T0))); }
seed_run() {  # seed_run KERNEL LAW SEED
  local k=$1 law=$2 s=$3 t=$SECONDS
  [ "$(left)" -lt 3 ] && { printf '%s\t%s\t%s\tskipped\t0\t\n' "$k" "$law" "$s" >> "$out/seeds2.tsv"; return; }
  timeout "$(left)" "$fc" check --kernel "$k" --law "$law" --seed "$s" --no-progress --regressions /tmp/noregs \
    > "logs/${k}_${law}_$s.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$k" "$law" "$s" "$rc" "$((SECONDS - t))" \
    "$(grep -m1 -A1 -E 'FAIL' "logs/${k}_${law}_$s.log" | tail -1 | cut -c1-300)" >> "$out/seeds2.tsv"
}
( t=$SECONDS; timeout 100 "$bin/cuda_mutants_test" \
    "padded_scratch kills cuda_mutant_tiled_dq_acc_pad32 and neither reference nor large_offsets does" > logs/pad32_witness.log 2>&1
  printf 'pad32_witness\t%s\t%s\n' "$?" "$((SECONDS - t))" >> "$out/steps2.tsv" ) &
for k in cuda_tiled cuda_wgmma; do
  ( for s in 1 3 5 7 9 11 13 15 17 19; do seed_run "$k" consecutive_calls "$s"; done ) &
  ( for s in 2 4 6 8 10 12 14 16 18 20; do seed_run "$k" consecutive_calls "$s"; done ) &
done
wait
{ echo "total $((SECONDS - T0)) s"; cat "$out/steps2.tsv"; tail -40 logs/pad32_witness.log | grep -E "passed|failed|FAILED|with expansion" ;
  awk -F'\t' '{r[$1 " " $2 " rc=" $4]++} END {for (x in r) print x, r[x]}' "$out/seeds2.tsv" | sort; } | tee "$out/summary2.txt"
tar czf "$out/logs2.tar.gz" logs
