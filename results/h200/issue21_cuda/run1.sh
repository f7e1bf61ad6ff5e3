#!/usr/bin/env bash
# Helper D's device run (issue 21: padded scratch, output guards, producer race), one call. Unpacks the
# bundle beside this script and runs, concurrently, each group writing one line per run to seeds.tsv
# (group, kernel, law, seed, rc, seconds, first FAIL line) or steps.tsv (name, rc, seconds):
#   witness  cuda_mutants_test: the guards name the element, padded_scratch kills pad32 (reference and
#            large_offsets do not), the correct kernels hold padded_scratch; then `check kills` for
#            both new mutants (the default check, every law, seed 1)
#   pad32    flashcheck check --kernel cuda_mutant_tiled_dq_acc_pad32 --law padded_scratch, seeds 1..20
#   past_end flashcheck check --kernel cuda_mutant_tiled_store_past_end --law reference, seeds 1..20
#   stream   flashcheck check --plugin plugin_cuda_{other_stream,none} --law reference --cases 30, seeds 1..20
#   laws     laws_gpu_test, every law on the correct CUDA kernels (seed 1), 6 at a time; cuda_tiled_test
#   correct  flashcheck check --kernel cuda_{tiled,wgmma} --law padded_scratch, seeds 1..20
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out" "$here/logs"
cd "$here" && tar xzf bundle.tar.gz
export LD_LIBRARY_PATH=$here/.carry/lib:${LD_LIBRARY_PATH:-}
bin=$here/.carry/tests
fc=$bin/flashcheck
export FLASHCHECK_BIN=$fc FC_PLUGIN_DIR=$here/.carry/plugins
mkdir -p /tmp/noregs
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; cat .carry/COMMIT; } > "$out/device.txt" 2>&1
cat "$out/device.txt"
T0=$SECONDS
LIMIT=${LIMIT:-470}
left() { echo $((LIMIT - (SECONDS - T0))); }
step() {  # step NAME SECONDS CMD...
  local name=$1 secs=$2 t=$SECONDS; shift 2
  [ "$(left)" -lt 5 ] && { printf '%s\tskipped\t0\n' "$name" >> "$out/steps.tsv"; return; }
  [ "$secs" -gt "$(left)" ] && secs=$(left)
  timeout "$secs" "$@" > "logs/$name.log" 2>&1
  printf '%s\t%s\t%s\n' "$name" "$?" "$((SECONDS - t))" >> "$out/steps.tsv"
}
seed_run() {  # seed_run GROUP KERNEL-ARGS LAW SEED CASES
  local g=$1 kargs=$2 law=$3 s=$4 cases=$5 t=$SECONDS name
  name=$(echo "$kargs" | sed 's|.*/||; s|--kernel ||; s|--plugin ||')
  [ "$(left)" -lt 5 ] && { printf '%s\t%s\t%s\t%s\tskipped\t0\t\n' "$g" "$name" "$law" "$s" >> "$out/seeds.tsv"; return; }
  # shellcheck disable=SC2086
  timeout "$(left)" "$fc" check $kargs --law "$law" --seed "$s" --cases "$cases" --no-progress --regressions /tmp/noregs \
    > "logs/${g}_${name}_$s.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$g" "$name" "$law" "$s" "$rc" "$((SECONDS - t))" \
    "$(grep -m1 -E 'FAIL|threw|wrote' "logs/${g}_${name}_$s.log" | cut -c1-300)" >> "$out/seeds.tsv"
}
(
  step guard_witness 60 "$bin/cuda_mutants_test" "the output guards name the element cuda_mutant_tiled_store_past_end writes past o"
  step pad32_witness 150 "$bin/cuda_mutants_test" "padded_scratch kills cuda_mutant_tiled_dq_acc_pad32, which reference and large_offsets do not"
  step correct_padded 150 "$bin/cuda_mutants_test" "the correct CUDA kernels hold padded_scratch"
  step kills_past_end 120 "$bin/cuda_mutants_test" "check kills cuda_mutant_tiled_store_past_end"
  step kills_pad32 300 "$bin/cuda_mutants_test" "check kills cuda_mutant_tiled_dq_acc_pad32"
  step registered 60 "$bin/cuda_mutants_test" "every CUDA mutant is registered, marked a mutant and has a kill test"
) &
( for s in $(seq 1 20); do seed_run pad32 "--kernel cuda_mutant_tiled_dq_acc_pad32" padded_scratch "$s" 100; done ) &
( for s in $(seq 1 20); do seed_run past_end "--kernel cuda_mutant_tiled_store_past_end" reference "$s" 100; done
  for s in $(seq 1 20); do seed_run correct "--kernel cuda_tiled" padded_scratch "$s" 100; done ) &
( for s in $(seq 1 20); do
    seed_run stream "--plugin $FC_PLUGIN_DIR/libplugin_cuda_other_stream.so" reference "$s" 30
    seed_run stream "--plugin $FC_PLUGIN_DIR/libplugin_cuda_none.so" reference "$s" 30
  done
  for s in $(seq 1 20); do seed_run correct "--kernel cuda_wgmma" padded_scratch "$s" 100; done ) &
(
  "$bin/laws_gpu_test" --list-test-names-only 2>/dev/null | grep -v '^$' > logs/laws.txt
  n=0
  while IFS= read -r name; do
    n=$((n + 1))
    step "laws_gpu_$n" 400 env FC_SEED=1 FC_THREADS=2 "$bin/laws_gpu_test" "${name//,/\\,}" -r compact &
    while [ "$(jobs -rp | wc -l)" -ge 6 ]; do wait -n; done
  done < logs/laws.txt
  wait
  step cuda_tiled_test 120 "$bin/cuda_tiled_test" -r compact
) &
wait
cp logs/laws.txt "$out/laws.txt" 2>/dev/null
{
  echo "total $((SECONDS - T0)) s"
  for g in pad32 past_end stream correct; do
    awk -F'\t' -v g="$g" '$1 == g {k[$2] = k[$2] + 1; r[$2 " rc=" $5]++} END {for (x in r) print g, x, r[x]}' "$out/seeds.tsv" | sort
  done
  awk -F'\t' '$2 != 0 {print "step", $1, "rc=" $2, $3 "s"}' "$out/steps.tsv"
  echo "steps passed: $(awk -F'\t' '$2 == 0' "$out/steps.tsv" | wc -l) of $(wc -l < "$out/steps.tsv")"
} | tee "$out/summary.txt"
tar czf "$out/logs.tar.gz" logs
