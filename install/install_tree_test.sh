#!/usr/bin/env bash
# The install tree as a user meets it: `cmake --install` the build into a scratch prefix, build
# examples/plugin_cpu against it with find_package(flashcheck), check the example through the
# installed CLI and its flashcheck_add_check test, kill a planted bug, and import the installed
# Python package (which must find the installed library by itself).
#   install_tree_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fc_install_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
cmake -S "$src/examples/plugin_cpu" -B "$tmp/good" "${gen[@]}" -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/good.log"
cmake --build "$tmp/good" >> "$tmp/good.log"
cmake -S "$src/examples/plugin_cpu" -B "$tmp/bad" "${gen[@]}" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_C_FLAGS=-DFC_FAULT=CAUSAL > "$tmp/bad.log"
cmake --build "$tmp/bad" >> "$tmp/bad.log"

fc=$tmp/prefix/bin/flashcheck
echo "== the example's own test (flashcheck_add_check: every law through the installed CLI)"
(cd "$tmp/good" && ctest --output-on-failure | tail -3)
echo "== the planted bug (causal masks off by one) must be killed"
set +e
"$fc" check --plugin "$tmp/bad/libattention_cpu.so" --seed 1 --law reference > "$tmp/bad.out"
code=$?
set -e
tail -4 "$tmp/bad.out"
[ "$code" = 1 ] || { echo "install_tree_test: the planted bug survived (exit $code)"; exit 1; }
grep -q "minimal counterexample" "$tmp/bad.out"
if [ -n "${FC_INSTALL_TEST_NO_PYTHON:-}" ]; then
  echo "install_tree_test: ok (the Python package not imported: sanitized build)"
  exit 0
fi
echo "== the installed Python package"
pydir=$(find "$tmp/prefix" -type d -name flashcheck -path "*-packages/*" | head -1)
[ -n "$pydir" ] || { echo "install_tree_test: no Python package installed"; exit 1; }
(cd "$tmp" && env -u FLASHCHECK_LIBRARY PYTHONPATH="$(dirname "$pydir")" python3 -c \
  'import flashcheck; print(flashcheck.version(), flashcheck.library_path())') | tee "$tmp/py.out"
grep -q "$tmp/prefix" "$tmp/py.out"
ls "$(dirname "$pydir")"/flashcheck-*.dist-info/entry_points.txt > /dev/null
echo "install_tree_test: ok"
