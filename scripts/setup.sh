#!/usr/bin/env bash
# flashcheck set-up, the only entry point a fresh machine needs:
#   scripts/setup.sh audit   install what is missing, build, run `flashcheck audit` (the main job)
#   scripts/setup.sh test    install what is missing, build, run the whole test suite; then CI's second
#                            build (clang, ASan + UBSan, Catch2 v3, the fuzz corpora) and its CPU tests
#   scripts/setup.sh build   install what is missing and build
#   scripts/setup.sh deps    install what is missing (what `pip install .` needs to build, too)
# Debian 12, Debian 13 and Ubuntu 24.04 (with the universe component). Idempotent: packages already
# present are not reinstalled; build directories are reused.
# Environment: BUILD_DIR (main build, default build/), JOBS (default nproc), CTEST_ARGS (extra ctest
# arguments for the main build's tests), FLASHCHECK_WERROR (ON: warnings are errors in the main build,
# host and nvcc; CI sets it).
set -euo pipefail

mode=${1:-test}
shift || true
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
sanitize_build=$root/build-asan-ubsan  # the asan-ubsan preset's binaryDir (CMakePresets.json)
jobs=${JOBS:-$(nproc)}
case "$mode" in audit | test | build | deps) ;; *)
  echo "usage: scripts/setup.sh audit|test|build|deps [args...]" >&2
  exit 2
  ;;
esac

distro_id=unknown distro_version="" distro_codename=""
if [ -r /etc/os-release ]; then
  # shellcheck disable=SC1091
  distro_id=$(. /etc/os-release && echo "${ID:-unknown}")
  distro_version=$(. /etc/os-release && echo "${VERSION_ID:-}")
  distro_codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
fi
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive

# --- packages -------------------------------------------------------------------------------------
# One entry per need; "a|b" lists the names it has across Debian 12, Debian 13 and Ubuntu 24.04, the
# first the distribution offers is installed. Catch2 is v2 on Debian 12 and v3 elsewhere (both work).
# ccache and lld only make the builds faster (cmake/FlashcheckBuildSpeed.cmake); the compiler cache is
# ~/.cache/ccache, so a second clone on the same machine compiles little.
packages=(g++ cmake ninja-build pkg-config librapidcheck-dev "catch2|libcatch2-dev" libeigen3-dev libboost-dev
          libmpfr-dev libgmp-dev libcli11-dev nlohmann-json3-dev libfmt-dev libdlpack-dev python3 python3-pytest
          python3-numpy python3-setuptools python3-wheel ccache lld)
# clang and its sanitizer runtimes build the second build; the suite renders report.html in headless
# Chromium and decodes its screenshot (zlib); the wheel's test installs it into a fresh virtual
# environment (venv), and the CI recipes' test reads the GitHub Actions workflow (PyYAML).
if [ "$mode" = test ]; then
  packages+=(clang "libclang-rt-dev|libclang-rt-18-dev|libclang-rt-14-dev" "chromium|chromium-browser" zlib1g-dev
             python3-venv python3-yaml)
fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
offered() { [ -n "$(apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: //p' | grep -v '(none)')" ]; }

missing=() updated=0
for need in "${packages[@]}"; do
  IFS='|' read -ra names <<<"$need"
  found=""
  for p in "${names[@]}"; do installed "$p" && found=$p && break; done
  [ -n "$found" ] && continue
  if [ $updated = 0 ]; then
    $sudo apt-get update -qq
    updated=1
  fi
  for p in "${names[@]}"; do offered "$p" && found=$p && break; done
  if [ -z "$found" ]; then
    echo "setup: no package offers ${names[*]} on $distro_id $distro_version" \
      "(Ubuntu: enable the universe component)" >&2
    exit 1
  fi
  missing+=("$found")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ "$mode" = deps ] && exit 0

# --- the main build -------------------------------------------------------------------------------
werror=()
[ -n "${FLASHCHECK_WERROR:-}" ] && werror=(-DFLASHCHECK_WERROR="$FLASHCHECK_WERROR")
# Debian's python3 is the one this script gives pytest and NumPy: the Python bridge's tests run with it
# even where another python3 (pyenv, a virtual environment) comes first on PATH.
python=()
[ -x /usr/bin/python3 ] && python=(-DPython3_EXECUTABLE=/usr/bin/python3)
cmake --preset release -B "$build" "${werror[@]}" "${python[@]}" >/dev/null
cmake --build "$build" -j "$jobs"

case "$mode" in
  build) exit 0 ;;
  audit) exec "$build/cli/flashcheck" audit "$@" ;;
esac
# shellcheck disable=SC2086
ctest --test-dir "$build" --output-on-failure -j "$jobs" ${CTEST_ARGS:-} "$@"

# --- CI's second build: clang, ASan + UBSan, Catch2 v3, libFuzzer corpora ------------------------
# Catch2 v3 is the system's where the distribution ships it; on Debian 12 (v2) it is Debian 13's
# package, fetched with apt from the archive this machine already uses (the trixie suite, in a
# private apt state: the system's sources and package database are untouched) and unpacked into a
# prefix. tests/catch2_runtime_compat.cpp bridges its newer toolchain.
catch2_v3_prefix() {
  local v
  v=$(dpkg-query -W -f='${db:Status-Abbrev}${Version}\n' catch2 libcatch2-dev 2>/dev/null | sed -n 's/^ii *//p' | head -n1 || true)
  [[ $v == 3.* ]] && return 0  # the system's Catch2 is v3
  local prefix=$sanitize_build/catch2-v3
  if [ ! -f "$prefix/usr/lib/cmake/Catch2/Catch2Config.cmake" ]; then
    local apt_dir=$sanitize_build/catch2-v3-apt uri
    uri=$(apt-get indextargets --format '$(REPO_URI) $(CODENAME)' "Identifier: Packages" |
      awk -v c="$distro_codename" '$2 == c { print $1; exit }')
    if [ "$distro_id" != debian ] || [ -z "$uri" ]; then
      echo "setup: Catch2 v3 is neither installed nor fetchable here (Debian 13's package is fetched on Debian)" >&2
      return 1
    fi
    rm -rf "$apt_dir" && mkdir -p "$apt_dir"/{lists/partial,archives/partial,sources}
    : >"$apt_dir/status"
    printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: %s\n' "$uri" \
      /usr/share/keyrings/debian-archive-keyring.gpg >"$apt_dir/sources/trixie.sources"
    local apt=(-qq -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$apt_dir/sources"
      -o Dir::State::Lists="$apt_dir/lists" -o Dir::State::status="$apt_dir/status"
      -o Dir::Cache="$apt_dir" -o Dir::Cache::archives="$apt_dir/archives" -o APT::Sandbox::User="$(id -un)"
      -o Acquire::Languages=none)
    apt-get "${apt[@]}" update >&2
    (cd "$apt_dir" && apt-get "${apt[@]}" download libcatch2-dev) >&2
    rm -rf "$prefix" && dpkg-deb -x "$apt_dir"/libcatch2-dev_*.deb "$prefix"
    rm -rf "$apt_dir"
  fi
  echo "$prefix/usr"
}
prefix=$(catch2_v3_prefix)
CMAKE_PREFIX_PATH=$prefix${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH} \
  cmake --preset asan-ubsan >/dev/null
cmake --build --preset asan-ubsan -j "$jobs"
# Labels `long` (the 20-seed runs), `tooling` and `mutants` (the kill matrix) stay with the main build,
# and so do the tests tagged [volume], which the preset's FC_SKIP_TAGS skips (the asan-ubsan test
# preset says which tests and why: docs/DECISIONS.md); every other CPU test runs here too.
ctest --preset asan-ubsan -j "$jobs"
