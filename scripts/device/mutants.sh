#!/usr/bin/env bash
# The CUDA mutants and the GPU-sized cases on the H200 machine, on binaries staged here by
#   scripts/device.sh carry cuda_mutants_test shape_histogram     (flashcheck and laws_gpu_test are carried always)
# and run there as run(command="bash scripts/device.sh mutants [STEP ...]", carry=[".carry-z"]).
# Steps (default: kills; one or two per call, a call has 10 minutes; `seeds` split over calls):
#   kills     each CUDA mutant killed by the default `flashcheck check --kernel M --jobs 16` (exit 1; one
#             mutant at a time, its laws side by side) and the kill table (the laws that fail on each)
#   controls  large_offsets' witness (it kills cuda_mutant_tiled_offset32, reference does not), the
#             correct kernels hold large_offsets, padded_scratch's witness (cuda_mutant_tiled_dq_acc_pad32)
#             and the correct kernels under it, the output guards' witness, the base kernels pass
#             every law at the mutants' builds
#   sanitize  compute-sanitizer racecheck and memcheck on the CUDA kernels with a backward (a few reference
#             cases each), and racecheck on the mutants that plant a race (it may or may not see them)
#   shapes    the shape histogram of the cases `check --kernel cuda_wgmma` draws (and cuda_tiled's),
#             then that check itself, timed (100 cases per law, seed 1)
#   seeds     every law on the correct CUDA kernels (laws_gpu_test) at seeds $SEEDS (default 1..20),
#             $SEED_CASES cases per law (default 100), one process per (seed, law), $SEED_JOBS at a
#             time (default 16), each limited to $SEED_LIMIT seconds (default 590)
# Everything lands in $OUT/cudamut.tar.gz plus $OUT/cudamut_summary.txt.
set -uo pipefail
source "$(dirname "$0")/env.sh"  # root, out, .carry/ unpacked, LD_LIBRARY_PATH
bin=$root/.carry/tests
fc=$bin/flashcheck
work=$out/cudamut
mkdir -p "$work"
summary=()
step() {  # step NAME SECONDS CMD...: the log under $work; rc and time summarised
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" > "$work/$name.log" 2>&1
  local rc=$?
  summary+=("$name rc=$rc $((SECONDS - t0))s")
  tail -3 "$work/$name.log"
  return $rc
}
for b in flashcheck cuda_mutants_test laws_gpu_test shape_histogram; do
  [ -x "$bin/$b" ] || { echo "$b not carried: run scripts/device.sh carry cuda_mutants_test shape_histogram"; exit 2; }
done
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee "$work/device.txt"
echo "commit $(cat "$root/.carry/COMMIT" 2>/dev/null); $(nproc) host threads" | tee -a "$work/device.txt"
mutants=$("$fc" kernels 2>/dev/null | grep -o 'cuda_mutant_[a-z0-9_]*' | sort -u)
[ -n "$mutants" ] || mutants=$("$bin/cuda_mutants_test" --list-test-names-only | grep -o 'cuda_mutant_[a-z0-9_]*' | sort -u)

for s in ${*:-kills}; do
  case $s in
    kills)
      table=$work/kill_table.txt
      echo "mutant | killed | laws that fail | seconds" > "$table"
      # One mutant at a time, its laws on 16 processes: cuda_mutants_test's "check kills" walks the laws
      # one by one, and with long rows in every law the two mutants that only large_offsets and
      # padded_scratch kill sit behind minutes of laws they pass.
      kill_one() {
        local m=$1 t0=$SECONDS rc
        timeout 240 "$fc" check --kernel "$m" --jobs 16 --seed 1 > "$work/kill_$m.log" 2>&1
        rc=$?
        law=$(awk '$1 == "FAIL" {print $2}' "$work/kill_$m.log" | paste -sd, -)
        echo "$m | $([ $rc = 1 ] && [ -n "$law" ] && echo yes || echo "NO (rc $rc)") | ${law:--} | $((SECONDS - t0))" > "$work/kill_$m.row"
      }
      # About a minute each (every law runs to its end): KILL_MUTANTS (names, space-separated) splits the
      # twelve over two calls.
      for m in ${KILL_MUTANTS:-$mutants}; do kill_one "$m"; done
      cat "$work"/kill_*.row | sort >> "$table" && rm -f "$work"/kill_*.row
      summary+=("kills: $(grep -c '| yes |' "$table") of $(echo ${KILL_MUTANTS:-$mutants} | wc -w) killed")
      step registered 60 "$bin/cuda_mutants_test" "every CUDA mutant is registered, marked a mutant and has a kill test"
      cat "$table"
      ;;
    controls)
      # A comma in a Catch test filter means "or": escaped, so that the one test runs.
      step witness_large_offsets 200 "$bin/cuda_mutants_test" "large_offsets kills cuda_mutant_tiled_offset32\\, which reference does not"
      step witness_padded_scratch 150 "$bin/cuda_mutants_test" "padded_scratch kills cuda_mutant_tiled_dq_acc_pad32 and neither reference nor large_offsets does"
      step correct_padded_scratch 150 "$bin/cuda_mutants_test" "the correct CUDA kernels hold padded_scratch"
      step witness_guards 60 "$bin/cuda_mutants_test" "the output guards name the element cuda_mutant_tiled_store_past_end writes past o"
      step correct_large_offsets 150 "$bin/cuda_mutants_test" "the correct CUDA kernels hold large_offsets"
      step base_kernels 400 "$bin/cuda_mutants_test" "the mutants' base kernels pass every law at the mutants' builds"
      ;;
    sanitize)
      cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
      for k in $(cuda_kernels backward); do
        for tool in racecheck memcheck; do
          step "${tool}_$k" 280 "$cs" --tool "$tool" --error-exitcode 99 "$fc" check --kernel "$k" --law reference \
            --cases 4 --seed 1
        done
      done
      for m in cuda_mutant_tiled_no_sync cuda_mutant_wgmma_skip_k_full cuda_mutant_wgmma_ds_sync_scope; do
        step "racecheck_$m" 200 "$cs" --tool racecheck --error-exitcode 99 "$fc" check --kernel "$m" --law reference \
          --cases 4 --seed 1
      done
      for f in "$work"/racecheck_*.log "$work"/memcheck_*.log; do
        summary+=("$(basename "$f" .log): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' "$f" | tail -1)")
      done
      ;;
    shapes)
      for k in cuda_wgmma cuda_tiled; do
        step "shapes_$k" 120 "$bin/shape_histogram" "$k" 100 1
        cat "$work/shapes_$k.log"
      done
      step check_cuda_wgmma 590 "$fc" check --kernel cuda_wgmma --cases 100 --seed 1
      grep -E 'holds|fails|n/a|FAIL' "$work/check_cuda_wgmma.log" | head -40
      ;;
    seeds)
      # One process per (seed, law), $SEED_JOBS at a time (default 16): the oracle runs on the host's
      # cores while the GPU serves them all. seeds.tsv: seed, law, exit status, seconds.
      "$bin/laws_gpu_test" --list-test-names-only 2>/dev/null | grep -v '^$' > "$work/laws.txt"
      t0=$SECONDS
      for seed in ${SEEDS:-$(seq 1 20)}; do
        n=0
        while IFS= read -r name; do
          n=$((n + 1))
          (
            t=$SECONDS
            timeout "${SEED_LIMIT:-590}" env FC_SEED="$seed" FC_CASES="${SEED_CASES:-100}" FC_THREADS=2 \
              "$bin/laws_gpu_test" "${name//,/\\,}" -r compact > "$work/seed_${seed}_law$n.log" 2>&1
            printf '%s\t%s\t%s\t%s\n' "$seed" "$name" "$?" "$((SECONDS - t))" >> "$work/seeds.tsv"
          ) &
          while [ "$(jobs -rp | wc -l)" -ge "${SEED_JOBS:-16}" ]; do wait -n; done
        done < "$work/laws.txt"
      done
      wait
      summary+=("seeds ${SEEDS:-1..20}, ${SEED_CASES:-100} cases per law, $((SECONDS - t0))s: \
$(wc -l < "$work/seeds.tsv") (seed, law) runs, $(awk -F'\t' '$3 != 0' "$work/seeds.tsv" | wc -l) failed")
      awk -F'\t' '$3 != 0' "$work/seeds.tsv"
      ;;
    *) echo "unknown step $s (kills controls sanitize shapes seeds)"; exit 2 ;;
  esac
done
printf '%s\n' "${summary[@]}" | tee "$out/cudamut_summary.txt"
tar czf "$out/cudamut.tar.gz" -C "$out" cudamut
