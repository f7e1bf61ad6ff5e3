#!/usr/bin/env bash
# Build the device-side binaries here (Boost/Eigen are not on the device) and stage them in .carry/
# (git-ignored) for the device run: libfcbench.so, GPU test executables, COMMIT. They are also packed
# into .carry-z/bundle.tar.gz (the binaries share most of their bytes: about 90 MB packs into 19 MB,
# under the 64 MiB a call may carry); the device scripts unpack it when it is there.
#   bench/carry.sh [extra test target ...]     then: run(command="bash bench/run_h200.sh tests sanitize ...",
#                                                        carry=[".carry-z"])
# Environment: BUILD_DIR (default build-h200), ARCHS (default 90a-real: the H200 only, half the fatbin
# of the CI build, so more binaries fit the 64 MiB a call may carry), JOBS (default 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-h200}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${ARCHS:-90a-real}"
fi
targets=(fcbench cuda_tiled_test cuda_naive_test "$@")
cmake --build "$build" --target "${targets[@]}" -j "${JOBS:-2}"
mkdir -p "$root/.carry/tests" "$root/.carry/lib"
cp "$build/bench/libfcbench.so" "$root/.carry/" && strip "$root/.carry/libfcbench.so"
for t in "${targets[@]:1}"; do
  exe=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  cp "$exe" "$root/.carry/tests/" && strip "$root/.carry/tests/$t"
done
git -C "$root" rev-parse --short HEAD > "$root/.carry/COMMIT"
[ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ] && echo "+ uncommitted changes" >> "$root/.carry/COMMIT"
mkdir -p "$root/.carry-z"
tar czf "$root/.carry-z/bundle.tar.gz" -C "$root" .carry
du -sh "$root/.carry" "$root/.carry-z"
