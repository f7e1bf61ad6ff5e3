#!/usr/bin/env bash
# The plugin path on the H200: the external-kernel audit (examples/python/audit_external.py) and the
# plugin's GPU test (kernels/plugin/tests/plugin_gpu_test.cpp), in two halves.
#   here:    examples/python/h200_audit.sh carry
#            builds libflashcheck.so, the CLI, the GPU test and the CUDA example plugins for sm_90a and
#            packs them, with the shared libraries the device may lack, into .carry-external/ (git-ignored)
#   device:  bash examples/python/h200_audit.sh run [--quick] [audit_external.py options]
#            bash examples/python/h200_audit.sh gputest
#            (the run tool with carry=[".carry-external"]); everything lands in $OUT/external.tar.gz
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=$root/.carry-external/bundle.tar.gz
mode=${1:-}
shift || true

carry() {
  local build=${BUILD_DIR:-$root/build-h200} stage=$root/.carry-external/stage
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
      -DFLASHCHECK_CUDA=ON
  fi
  cmake --build "$build" -j "${JOBS:-2}" --target flashcheck flashcheck_capi plugin_gpu_test plugin_cuda_none \
    plugin_cuda_illegal
  rm -rf "$stage" && mkdir -p "$stage/lib" "$stage/bin" "$stage/plugins"
  cp "$build/capi/libflashcheck.so" "$stage/lib/"
  cp "$build/cli/flashcheck" "$build/kernels/plugin/tests/plugin_gpu_test" "$stage/bin/"
  cp "$build"/kernels/plugin/tests/libplugin_cuda_*.so "$stage/plugins/"
  strip "$stage"/lib/* "$stage"/bin/*
  # Debian's shared libraries the binaries use, but not the C/C++ runtime the device has anyway.
  ldd "$stage/lib/libflashcheck.so" "$stage/bin/flashcheck" | awk '/=> \// { print $3 }' | sort -u |
    while read -r lib; do
      case $(basename "$lib") in
        libc.so* | libm.so* | libgcc_s* | libstdc++* | ld-linux* | libpthread* | libdl* | librt*) ;;
        *) cp -L "$lib" "$stage/lib/" ;;
      esac
    done
  git -C "$root" rev-parse --short HEAD > "$stage/COMMIT"
  tar czf "$bundle" -C "$stage" .
  rm -rf "$stage"
  du -h "$bundle"
}

unpack() {
  work=$root/.carry-external/unpacked
  rm -rf "$work" && mkdir -p "$work" && tar xzf "$bundle" -C "$work"
  out=${OUT:-$root/reports/out}
  mkdir -p "$out/external"
  export LD_LIBRARY_PATH=$work/lib:${LD_LIBRARY_PATH:-}
  export FLASHCHECK_LIBRARY=$work/lib/libflashcheck.so FLASHCHECK_BIN=$work/bin/flashcheck
  export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
  { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "commit $(cat "$work/COMMIT")"
    python3 -c 'import sys, importlib; print("python", sys.version.split()[0]); [print(m, getattr(importlib.import_module(m), "__version__", "?")) for m in ("torch", "jax", "triton")]' 2>&1 || true
  } | tee "$out/external/device.txt"
}

pack() {  # at most 8 files come back from a device run: one tar
  tar czf "$out/external.tar.gz" -C "$out" external && rm -rf "$out/external"
}

case $mode in
  carry) carry ;;
  run)
    unpack
    rc=0
    python3 "$root/examples/python/audit_external.py" --out "$out/external" --flashcheck "$FLASHCHECK_BIN" "$@" || rc=$?
    pack
    exit $rc
    ;;
  gputest)
    unpack
    rc=0
    FC_PLUGIN_DIR=$work/plugins "$work/bin/plugin_gpu_test" 2>&1 | tee "$out/external/plugin_gpu_test.log" || rc=$?
    pack
    exit $rc
    ;;
  *) echo "usage: examples/python/h200_audit.sh carry | run [--quick] [options] | gputest" >&2; exit 2 ;;
esac
