#!/usr/bin/env bash
# The plugin path on the H200: the external-kernel audit (tools/external_audit/audit_external.py), the
# bridge's GPU tests (python/tests/test_torch.py) and the plugin's GPU test
# (plugin/tests/plugin_gpu_test.cpp), in two halves.
#   here:    scripts/device.sh carry-external
#            builds libflashcheck.so, the CLI, the GPU test and the CUDA test plugins for sm_90a
#            (BUILD_DIR, default build-h200, shared with scripts/device.sh carry) and packs them, with the
#            shared libraries the device may lack and Debian's pytest (used only where the device has
#            none), into .carry-external/bundle.tar.gz (git-ignored; ~10-20 MB)
#   device:  bash scripts/device.sh external STEP... [-- audit_external.py options]
#            STEPs: tests (plugin_gpu_test + the bridge's torch tests; plugin-tests and python-tests
#            each half alone), audit (every external kernel),
#            with carry=[".carry-external"]; everything lands in $OUT/external.tar.gz (summary.md,
#            results.json, kernels/*.json, check/, audit/, logs/, regressions/), packed even when a run
#            is cut short: `audit` alone takes at most AUDIT_WALL (510) s, its own budget AUDIT_BUDGET (470) s
#            and `tests` PLUGIN_TEST_WALL (300) s for plugin_gpu_test, PY_TEST_WALL (480) s for the bridge's tests
#            (PY_TEST_K: a pytest -k expression, to split them over two GPUs)
#   lanes:   IMPLS=name,name (the audit's run names) narrows `audit` to those kernels and OUT=DIR gives each
#            invocation its own output, so invocations run side by side, one per GPU:
#              OUT=$OUT/a IMPLS=... CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 bash scripts/device.sh external audit &
#              OUT=$OUT/b IMPLS=... CUDA_VISIBLE_DEVICES=1 taskset -c 16-31 bash scripts/device.sh external audit &
#            then, here: tools/external_audit/audit_merge.py --out DIR a/external/results.json b/external/results.json
#            (docs/external-audit.md). AUDIT_JOBS (16) runs at once per invocation.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=$root/.carry-external/bundle.tar.gz

carry() {
  set -e
  local build=${BUILD_DIR:-$root/build-h200} stage=$root/.carry-external/stage
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
      -DFLASHCHECK_CUDA=ON
  fi
  cmake --build "$build" -j "${JOBS:-2}" --target flashcheck flashcheck_capi plugin_gpu_test plugin_cuda_none \
    plugin_cuda_illegal
  rm -rf "$stage" && mkdir -p "$stage/lib" "$stage/bin" "$stage/plugins" "$stage/pylib"
  cp "$build/capi/libflashcheck.so" "$stage/lib/"
  cp "$build/cli/flashcheck" "$build/plugin/tests/plugin_gpu_test" "$stage/bin/"
  cp "$build"/plugin/tests/libplugin_cuda_*.so "$stage/plugins/"
  strip "$stage"/lib/* "$stage"/bin/* "$stage"/plugins/*
  # Debian's shared libraries the binaries use, but not the C/C++ runtime the device has anyway.
  ldd "$stage/lib/libflashcheck.so" "$stage/bin/flashcheck" "$stage/bin/plugin_gpu_test" |
    awk '/=> \// { print $3 }' | sort -u | while read -r lib; do
      case $(basename "$lib") in
        libc.so* | libm.so* | libgcc_s* | libstdc++* | ld-linux* | libpthread* | libdl* | librt* | libcuda.so*) ;;
        *) cp -L "$lib" "$stage/lib/" ;;
      esac
    done
  # pytest and what it imports (pure Python), for a device Python without it.
  local dist=/usr/lib/python3/dist-packages
  for m in pytest _pytest pluggy iniconfig packaging attr py py.py; do
    [ -e "$dist/$m" ] && cp -r "$dist/$m" "$stage/pylib/"
  done
  find "$stage/pylib" -name __pycache__ -prune -exec rm -rf {} +
  git -C "$root" rev-parse --short HEAD > "$stage/COMMIT"
  [ -z "$(git -C "$root" status --porcelain --untracked-files=no)" ] || echo "+ uncommitted changes" >> "$stage/COMMIT"
  tar czf "$bundle" -C "$stage" .
  rm -rf "$stage"
  du -h "$bundle"
}

unpack() {
  # A directory of its own (outside OUT, whose files come back): lanes run side by side.
  work=$(mktemp -d "$root/.carry-external/unpacked.XXXXXX") && tar xzf "$bundle" -C "$work" || exit 2
  trap 'rm -rf "$work"' EXIT
  out=${OUT:-$root/reports/out}
  mkdir -p "$out/external"
  export LD_LIBRARY_PATH=$work/lib:${LD_LIBRARY_PATH:-}
  export FLASHCHECK_LIBRARY=$work/lib/libflashcheck.so FLASHCHECK_BIN=$work/bin/flashcheck PYTHONUNBUFFERED=1
  export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
  python3 -c "import pytest" 2>/dev/null || export PYTHONPATH=$PYTHONPATH:$work/pylib
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    echo "commit $(cat "$work/COMMIT")"
    python3 -c 'import sys, importlib
print("python", sys.version.split()[0])
for m in ("torch", "jax", "triton", "numpy", "pytest"):
    try:
        print(m, getattr(importlib.import_module(m), "__version__", "?"))
    except Exception as e:
        print(m, "absent:", type(e).__name__, e)' 2>&1
  } | tee "$out/external/device.txt"
}

[ "${1:-}" = carry ] && { carry; exit; }
steps=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do steps+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
[ ${#steps[@]} -gt 0 ] || { echo "usage: scripts/device.sh carry-external | scripts/device.sh external STEP... [-- audit options] (STEP: tests, plugin-tests, python-tests, audit)" >&2; exit 2; }
unpack
rc=0
for step in "${steps[@]}"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    tests | plugin-tests)
      # -d yes: each case's time as it finishes, so a case that hangs is the one after the last line.
      FC_PLUGIN_DIR=$work/plugins timeout "${PLUGIN_TEST_WALL:-300}" "$work/bin/plugin_gpu_test" -d yes > "$out/external/plugin_gpu_test.log" 2>&1
      echo "plugin_gpu_test exit $?" | tee -a "$out/external/tests.txt"
      ;;&
    tests | python-tests)
      # -v: one line per test as it ends, so a run cut short still names what passed, failed and hung.
      (cd "$root/python/tests" && timeout "${PY_TEST_WALL:-480}" python3 run_gpu.py -v -rA --tb=short --durations=0 \
        ${PY_TEST_K:+-k "$PY_TEST_K"}) \
        > "$out/external/python_gpu_tests.log" 2>&1
      echo "python_bridge_gpu exit $?" | tee -a "$out/external/tests.txt"
      tail -5 "$out/external/python_gpu_tests.log"
      ;;
    tests | plugin-tests) ;;
    audit)
      # The audit keeps to its own --budget (default 470 s) and writes its results as they come; the
      # outer limit only guards against the orchestrator itself hanging, so the tar below always runs.
      # IMPLS (comma-separated run names) narrows the audit to one lane's kernels (audit_external.py --only).
      timeout -k 5 "${AUDIT_WALL:-510}" python3 "$root/tools/external_audit/audit_external.py" --out "$out/external" \
        --flashcheck "$FLASHCHECK_BIN" --budget "${AUDIT_BUDGET:-470}" --jobs "${AUDIT_JOBS:-16}" "$@" \
        > "$out/external/audit.log" 2>&1 || rc=$?
      tail -25 "$out/external/audit.log"
      ;;
    *) echo "unknown step $step" >&2; rc=2 ;;
  esac
done
tar czf "$out/external.tar.gz" -C "$out" external && rm -rf "$out/external"
exit $rc
