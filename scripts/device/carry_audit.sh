#!/usr/bin/env bash
# Builds flashcheck with the CUDA kernels (sm_90a) here and stages it for the H200 in .carry/ with the
# shared libraries the device image may lack (fmt, mpfr, gmp), packed into .carry-z/bundle.tar.xz
# like scripts/device.sh carry's bundle. Then, on the device:
#   run(command="bash scripts/device.sh audit", carry=[".carry-z"], kind="nvidia-h200", timeout_s=600)
# Environment: BUILD_DIR (default build-h200), JOBS (default 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-h200}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real
fi
cmake --build "$build" --target flashcheck -j "${JOBS:-2}"
rm -rf "$root/.carry" && mkdir -p "$root/.carry/tests" "$root/.carry/lib"
cp "$build/cli/flashcheck" "$root/.carry/tests/" && strip "$root/.carry/tests/flashcheck"
for lib in $(ldd "$build/cli/flashcheck" | awk '/libfmt|libmpfr|libgmp/ {print $3}'); do cp -L "$lib" "$root/.carry/lib/"; done
git -C "$root" rev-parse --short HEAD > "$root/.carry/COMMIT"
mkdir -p "$root/.carry-z"
rm -f "$root/.carry-z/bundle.tar.gz" && tar cf - -C "$root" .carry | xz -9 -T2 > "$root/.carry-z/bundle.tar.xz"
du -sh "$root/.carry-z"
