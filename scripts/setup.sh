#!/usr/bin/env bash
# flashcheck set-up, the only entry point a fresh machine needs:
#   scripts/setup.sh audit   install what is missing, build, run `flashcheck audit` (the main job)
#   scripts/setup.sh test    install what is missing, build, run the whole test suite
#   scripts/setup.sh build   install what is missing and build
# Idempotent: packages already present are not reinstalled; the build directory is reused.
# Environment: BUILD_DIR (default build), JOBS (default nproc), CTEST_ARGS (extra ctest arguments).
set -euo pipefail

mode=${1:-test}
shift || true
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc)}

packages=(g++ cmake ninja-build pkg-config librapidcheck-dev catch2 libeigen3-dev libboost-dev
          libmpfr-dev libgmp-dev libcli11-dev nlohmann-json3-dev libfmt-dev libdlpack-dev python3)
# The test suite renders report.html in headless Chromium and decodes its screenshot (zlib).
if [ "$mode" = test ]; then packages+=(chromium zlib1g-dev); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -j "$jobs"

case "$mode" in
  build) ;;
  audit) exec "$build/cli/flashcheck" audit "$@" ;;
  test)
    # shellcheck disable=SC2086
    exec ctest --test-dir "$build" --output-on-failure -j "$jobs" ${CTEST_ARGS:-} "$@" ;;
  *) echo "usage: scripts/setup.sh audit|test|build [args...]" >&2; exit 2 ;;
esac
