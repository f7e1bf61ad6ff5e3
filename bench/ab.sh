#!/usr/bin/env bash
# A/B of two builds of libfcbench in one device call, each timed beside torch flash and cuDNN in its
# own pass (ratios are within a pass; the two passes share the machine and the inputs):
#   here:   .carry/base/: libfcbench.so (stripped) and COMMIT of the old build; bash bench/carry.sh (the new)
#   device: run(command="bash bench/ab.sh [bench_sdpa.py perf options]", carry=[".carry-z"])
#   then:   python3 bench/ab_compare.py OUT/perf_new.json OUT/perf_base.json
# Options default to: --wgmma-only --ns 4096,16384.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"  # root, out, .carry/ unpacked, LD_LIBRARY_PATH
opts=("$@")
[ ${#opts[@]} -eq 0 ] && opts=(--wgmma-only --ns 4096,16384)
for v in new base; do
  lib=$root/.carry/libfcbench.so
  commit=$root/.carry/COMMIT
  [ "$v" = base ] && lib=$root/.carry/base/libfcbench.so commit=$root/.carry/base/COMMIT
  export FC_COMMIT="$v $(cat "$commit" 2>/dev/null || echo unknown)"
  python3 "$root/bench/bench_sdpa.py" --lib "$lib" --jobs perf "${opts[@]}" --out "$out/perf_$v.json" > "$out/perf_$v.log" 2>&1
  echo "$v rc=$?"
done
python3 "$root/bench/ab_compare.py" "$out/perf_new.json" "$out/perf_base.json"
