#!/usr/bin/env bash
# One device call: GPU tests of the CUDA kernels, check on cuda_wgmma/cuda_tiled with long rows in every
# law, fuzz throughput, then the CUDA mutants (each must fail check). Outputs packed after each step.
source scripts/device/env.sh
b=$root/.carry/tests; fc=$b/flashcheck; w=$out/w; mkdir -p $w
pack() { tar czf $out/run.tar.gz -C $out w; }
log() { echo "$*" | tee -a $w/summary.txt; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $w/device.txt; echo "commit $(cat $root/.carry/COMMIT); cores $(nproc)" | tee -a $w/device.txt
t=$SECONDS; timeout 100 $b/cuda_tiled_test -r compact > $w/cuda_tiled_test.txt 2>&1; log "cuda_tiled_test rc=$? $((SECONDS-t)) s"; tail -2 $w/cuda_tiled_test.txt
t=$SECONDS; timeout 60 $b/cuda_naive_test -r compact > $w/cuda_naive_test.txt 2>&1; log "cuda_naive_test rc=$? $((SECONDS-t)) s"; tail -2 $w/cuda_naive_test.txt
pack
for k in cuda_wgmma cuda_tiled; do
  t0=$(date +%s.%N)
  timeout 110 $fc check --kernel $k --cases 100 --seed 1 --jobs 16 --json-out $w/check_${k}_j16.json > $w/check_${k}_j16.txt 2> $w/check_${k}_j16.err
  log "check_${k}_j16 rc=$? $(python3 -c "import time; print(f'{time.time() - $t0:.1f}')") s"; tail -1 $w/check_${k}_j16.txt
  pack
done
for k in cpu_tiled cuda_wgmma cuda_tiled; do
  bs=1024; [ $k = cpu_tiled ] && bs=256
  timeout 50 $fc fuzz --kernel $k --seconds 20 --batch $bs > $w/fuzz_$k.txt 2>&1; log "fuzz $k rc=$? $(tail -1 $w/fuzz_$k.txt)"
done
pack
for m in $($fc kernels --json | python3 -c "import json,sys; print(' '.join(k['name'] for k in json.load(sys.stdin)['kernels'] if k['device']=='cuda' and k['mutant']))"); do
  t=$SECONDS; timeout 40 $fc check --kernel $m --jobs 16 --cases 100 > $w/mut_$m.txt 2>&1; rc=$?
  log "mutant $m rc=$rc $((SECONDS-t)) s $(grep -c FAIL $w/mut_$m.txt) laws FAIL"; pack
done
