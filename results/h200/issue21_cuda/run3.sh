#!/usr/bin/env bash
# Helper D's third device run, after the CUDA rows declare atomic_backward: consecutive_calls and
# determinism on the correct CUDA kernels at seeds 1..20, and the default check (every law, seed 1)
# on cuda_mutant_tiled_dq_acc_pad32 (cuda_mutants_test "check kills ...").
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
LIMIT=${LIMIT:-160}
left() { echo $((LIMIT - (SECONDS - T0))); }
seed_run() {  # seed_run KERNEL LAW SEED
  local k=$1 law=$2 s=$3 t=$SECONDS
  [ "$(left)" -lt 3 ] && { printf '%s\t%s\t%s\tskipped\t0\t\n' "$k" "$law" "$s" >> "$out/seeds3.tsv"; return; }
  timeout "$(left)" "$fc" check --kernel "$k" --law "$law" --seed "$s" --no-progress --regressions /tmp/noregs \
    > "logs/${k}_${law}_$s.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$k" "$law" "$s" "$rc" "$((SECONDS - t))" \
    "$(grep -m1 -A1 -E 'FAIL' "logs/${k}_${law}_$s.log" | tail -1 | cut -c1-300)" >> "$out/seeds3.tsv"
}
( t=$SECONDS; timeout "$(left)" "$bin/cuda_mutants_test" "check kills cuda_mutant_tiled_dq_acc_pad32" > logs/kills_pad32.log 2>&1
  printf 'kills_pad32\t%s\t%s\n' "$?" "$((SECONDS - t))" >> "$out/steps3.tsv" ) &
for k in cuda_tiled cuda_wgmma; do
  for law in consecutive_calls determinism; do
    ( for s in 1 3 5 7 9 11 13 15 17 19; do seed_run "$k" "$law" "$s"; done ) &
    ( for s in 2 4 6 8 10 12 14 16 18 20; do seed_run "$k" "$law" "$s"; done ) &
  done
done
wait
{ echo "total $((SECONDS - T0)) s"; cat "$out/steps3.tsv"; grep -h "killed by" logs/kills_pad32.log | cut -c1-300;
  awk -F'\t' '{r[$1 " " $2 " rc=" $4]++} END {for (x in r) print x, r[x]}' "$out/seeds3.tsv" | sort; } | tee "$out/summary3.txt"
tar czf "$out/logs3.tar.gz" logs
