#!/usr/bin/env bash
# Build the device-side binaries here (Boost/Eigen are not on the device) and stage them in .carry/
# (git-ignored) for scripts/device.sh bench: libfcbench.so, the GPU test executables, flashcheck, COMMIT, all
# packed into .carry-z/bundle.tar.xz (the binaries share most of their bytes: xz's 64 MiB window packs
# 240 MB of them into 8 MB); scripts/device/env.sh unpacks it on the device.
#   scripts/device.sh carry [extra test target ...]     then, on the GPU machine with .carry-z/ carried:
#                                              bash scripts/device.sh bench tests laws sanitize check perf memory
# Environment: BUILD_DIR (default build-h200), ARCHS (default 90a-real: the H200 only, half the fatbin
# of the CI build), JOBS (default 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-h200}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${ARCHS:-90a-real}"
fi
targets=(fcbench cuda_tiled_test cuda_naive_test laws_gpu_test flashcheck "$@")
cmake --build "$build" --target "${targets[@]}" -j "${JOBS:-2}"
mkdir -p "$root/.carry/tests" "$root/.carry/lib"
cp "$build/bench/libfcbench.so" "$root/.carry/" && strip "$root/.carry/libfcbench.so"
for t in "${targets[@]:1}"; do
  exe=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  cp "$exe" "$root/.carry/tests/" && strip "$root/.carry/tests/$t"
done
# The shared libraries the device image lacks (it has CUDA and Python, not fmt, MPFR or GMP).
for exe in "$root"/.carry/tests/* "$root/.carry/libfcbench.so"; do
  for lib in $(ldd "$exe" | awk '/libfmt|libmpfr|libgmp/ {print $3}'); do cp -L "$lib" "$root/.carry/lib/"; done
done
git -C "$root" rev-parse --short HEAD > "$root/.carry/COMMIT"
[ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ] && echo "+ uncommitted changes" >> "$root/.carry/COMMIT"
mkdir -p "$root/.carry-z"
rm -f "$root/.carry-z/bundle.tar.gz" && tar cf - -C "$root" .carry | xz -9 -T2 > "$root/.carry-z/bundle.tar.xz"
du -sh "$root/.carry" "$root/.carry-z"
