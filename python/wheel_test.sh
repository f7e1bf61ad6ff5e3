#!/usr/bin/env bash
# `pip wheel` + `pip install` as a user meets them: the wheel is built offline (--no-build-isolation,
# setuptools and wheel from the distribution) from the files setup.py packages, reusing this build's
# libflashcheck.so and CLI (FLASHCHECK_BUILD_DIR: CI compiles once), installed into a fresh virtual
# environment, and used with no FLASHCHECK_LIBRARY, no PYTHONPATH and an empty LD_LIBRARY_PATH:
# `import flashcheck`, `python -m flashcheck check MODULE:KERNEL` (a correct kernel passes, a planted
# bug fails), the pytest fixture (through the entry point), the `flashcheck` console script, the
# bundled libraries resolved from the wheel's own folder, and a library that cannot load as one line.
#   wheel_test.sh BUILD_DIR SOURCE_DIR [PYTHON]
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd) py=${3:-python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fc_wheel_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset FLASHCHECK_LIBRARY PYTHONPATH FLASHCHECK_BIN
fail() { echo "wheel_test: $*" >&2; exit 1; }

# What setup.py reads, and nothing else (with FLASHCHECK_BUILD_DIR no CMake configure runs).
mkdir -p "$tmp/src/docs" "$tmp/src/python"
cp "$src/setup.py" "$src/pyproject.toml" "$src/CMakeLists.txt" "$tmp/src/"
cp "$src/docs/python.md" "$tmp/src/docs/"
cp -r "$src/python/flashcheck" "$tmp/src/python/"
find "$tmp/src" -name __pycache__ -prune -exec rm -rf {} +

"$py" -m venv --system-site-packages "$tmp/venv"  # numpy and pytest from the distribution
vpy=$tmp/venv/bin/python
FLASHCHECK_BUILD_DIR=$build "$vpy" -m pip wheel -q --no-build-isolation --no-deps -w "$tmp/wheel" "$tmp/src" \
  > "$tmp/wheel.log" 2>&1 || { cat "$tmp/wheel.log"; fail "pip wheel failed"; }
whl=$(ls "$tmp"/wheel/flashcheck-*.whl)
echo "== $(basename "$whl")"
case $(basename "$whl") in *-py3-none-linux_*.whl) ;; *) fail "not a py3-none-linux wheel: $whl" ;; esac
"$vpy" -m pip install -q --no-index --no-deps "$whl"
pkg=$("$vpy" -c 'import flashcheck, os; print(os.path.dirname(flashcheck.__file__))')
case $pkg in "$tmp/venv/"*) ;; *) fail "flashcheck imported from $pkg, not the venv" ;; esac

echo "== the wheel's libraries: RPATH \$ORIGIN, everything but glibc resolved inside the wheel"
for f in "$pkg/lib/libflashcheck.so" "$pkg/bin/flashcheck"; do
  # shellcheck disable=SC2016  # $ORIGIN is literal
  if [ "${f##*/}" = flashcheck ]; then want='$ORIGIN/../lib'; else want='$ORIGIN'; fi
  rp=$(readelf -d "$f" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p')
  [ "$rp" = "$want" ] || fail "${f#"$pkg"/}: RPATH '$rp', expected '$want'"
  LD_LIBRARY_PATH='' ldd "$f" > "$tmp/ldd.out"
  ! grep -q "not found" "$tmp/ldd.out" || fail "${f#"$pkg"/}: $(grep "not found" "$tmp/ldd.out")"
  outside=$(awk '$2 == "=>" && $3 ~ /^\// { print $1 " " $3 }' "$tmp/ldd.out" |
    grep -Ev '^(linux-vdso|ld-linux[^ ]*|libc|libm|libdl|libpthread|librt|libresolv|libutil)\.so' |
    while read -r name path; do
      case $(realpath "$path") in "$pkg/lib/"*) ;; *) echo "$name $path" ;; esac
    done)
  [ -z "$outside" ] || fail "${f#"$pkg"/} loads from outside the wheel: $outside"
done
ls "$pkg/lib"

cd "$tmp"  # nothing of the source tree on the path
run() { env LD_LIBRARY_PATH='' "$@"; }
echo "== import flashcheck"
run "$vpy" -c 'import flashcheck; print(flashcheck.version()); print(flashcheck.library_path())' | tee py.out
grep -q "^$pkg/lib/libflashcheck.so$" py.out || fail "the library is not the wheel's"

echo "== python -m flashcheck check MODULE:KERNEL"
cp "$src/python/tests/py_kernels.py" mymodule.py
run "$vpy" -m flashcheck check mymodule:correct --law reference --cases 20 --seed 3 > good.out 2>&1 ||
  { cat good.out; fail "the correct kernel failed"; }
tail -1 good.out
set +e
run "$vpy" -m flashcheck check mymodule:planted_bug --law reference --cases 20 --seed 2 > bad.out 2>&1
code=$?
set -e
[ "$code" = 1 ] || { cat bad.out; fail "the planted bug survived (exit $code)"; }
grep -q "minimal counterexample" bad.out || fail "no counterexample for the planted bug"
echo "planted bug: exit 1, shrunk"

echo "== the flashcheck_check fixture (the pytest11 entry point)"
cat > test_mine.py <<'EOF'
import mymodule


def test_correct(flashcheck_check):
    flashcheck_check(mymodule.correct, law="reference", cases=10)


def test_planted_bug_fails(flashcheck_check):
    import pytest

    with pytest.raises(pytest.fail.Exception):
        flashcheck_check(mymodule.planted_bug, law="reference", cases=20, seed=2)
EOF
run "$vpy" -m pytest -q -p no:cacheprovider test_mine.py > pytest.out 2>&1 || { cat pytest.out; fail "pytest failed"; }
tail -1 pytest.out

echo "== the flashcheck console script"
run "$tmp/venv/bin/flashcheck" kernels > kernels.out || fail "flashcheck kernels failed"
grep -q cpu_tiled kernels.out || fail "flashcheck kernels does not list cpu_tiled"
echo "flashcheck kernels: $(wc -l < kernels.out) lines"

echo "== a library that does not load: one line, exit 2"
echo "not an ELF file" > broken.so
set +e
FLASHCHECK_LIBRARY=$tmp/broken.so "$vpy" -m flashcheck version > broken.out 2>&1
code=$?
set -e
cat broken.out
if [ "$code" != 2 ] || [ "$(wc -l < broken.out)" != 1 ] || ! grep -q "^flashcheck: cannot load $tmp/broken.so" broken.out; then
  fail "a broken library gave exit $code and $(wc -l < broken.out) lines"
fi
echo "wheel_test: ok"
