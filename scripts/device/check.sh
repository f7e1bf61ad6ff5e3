#!/usr/bin/env bash
# On the H200 (binaries from scripts/device.sh carry-audit): `flashcheck check` on each CUDA kernel of
# the registry at 100 cases a law and CHECK_SEED (default 1), once for each --jobs value given
# (default: 16 1), each under CHECK_LIMIT seconds (default 280). Per run, under $OUT: the report
# (check_KERNEL_jJOBS.txt), its JSON (.json), stderr (.err) and its exit code and wall time in
# device.txt. CHECK_KERNELS (comma-separated) narrows the kernels (set and empty: none); CHECK_PLUGINS (comma-separated
# paths under .carry/plugins/) adds plugins, each checked the same way (check_plugin_NAME_jJOBS).
set -uo pipefail
source "$(dirname "$0")/env.sh"  # root, out, .carry/ unpacked, LD_LIBRARY_PATH
fc=$root/.carry/tests/flashcheck
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
echo "commit $(cat "$root/.carry/COMMIT"); host cores $(nproc)" | tee -a "$out/device.txt"
kernels=${CHECK_KERNELS-$(cuda_kernels | paste -sd, -)}  # set and empty: plugins only
plugins=${CHECK_PLUGINS:-}
[ -n "$kernels$plugins" ] || { echo "no CUDA kernel in $fc kernels (is it carried?)" >&2; exit 2; }
subjects=()
for k in ${kernels//,/ }; do subjects+=("$k:--kernel $k"); done
for p in ${plugins//,/ }; do subjects+=("plugin_$(basename "$p" .so):--plugin $root/.carry/plugins/$p"); done
for s in "${subjects[@]}"; do
  for j in ${@:-16 1}; do
    name=check_${s%%:*}_j$j
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    timeout "${CHECK_LIMIT:-280}" "$fc" check ${s#*:} --cases 100 --seed "${CHECK_SEED:-1}" --jobs "$j" \
      --json-out "$out/$name.json" > "$out/$name.txt" 2> "$out/$name.err"
    rc=$?
    echo "$name rc=$rc $(python3 -c "import time; print(f'{time.time() - $t0:.1f}')") s" | tee -a "$out/device.txt"
    tail -2 "$out/$name.txt"
  done
done
