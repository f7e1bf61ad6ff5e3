#!/usr/bin/env bash
# The install tree and the build tree as a user meets them: `cmake --install` the build into a scratch
# prefix, build examples/plugin_cpu against it with find_package(flashcheck), check the example through
# the installed CLI and its flashcheck_add_check test, kill a planted bug, and import the installed
# Python package (which must find the installed library by itself); build examples/plugin_cpu against
# the build tree (-Dflashcheck_DIR=BUILD_DIR, no install) and run its test there too; with nvcc, build
# examples/plugin_cuda against both (it runs on a GPU only: built, not run); build examples/plugin_cpp
# (a C++ host kernel) against the build tree, check it, and kill its planted bug.
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

echo "== examples/plugin_cpu against the build tree (find_package from $build)"
cmake -S "$src/examples/plugin_cpu" -B "$tmp/tree" "${gen[@]}" -Dflashcheck_DIR="$build" > "$tmp/tree.log"
cmake --build "$tmp/tree" >> "$tmp/tree.log"
grep -q "$build/cli/flashcheck" "$tmp/tree/CTestTestfile.cmake" ||
  { echo "install_tree_test: the build tree's flashcheck::cli is not $build/cli/flashcheck"; exit 1; }
(cd "$tmp/tree" && ctest --output-on-failure | tail -1)
echo "== examples/plugin_cpp (a C++ host kernel) against the build tree: passes; its planted bug is killed"
cmake -S "$src/examples/plugin_cpp" -B "$tmp/cpp" "${gen[@]}" -Dflashcheck_DIR="$build" > "$tmp/cpp.log"
cmake --build "$tmp/cpp" >> "$tmp/cpp.log"
(cd "$tmp/cpp" && ctest --output-on-failure | tail -1)
cmake -S "$src/examples/plugin_cpp" -B "$tmp/cpp-bad" "${gen[@]}" -Dflashcheck_DIR="$build" \
  -DCMAKE_CXX_FLAGS=-DFC_FAULT_RESCALE > "$tmp/cpp-bad.log"
cmake --build "$tmp/cpp-bad" >> "$tmp/cpp-bad.log"
set +e
"$build/cli/flashcheck" check --plugin "$tmp/cpp-bad/libattention_host.so" --seed 1 --law reference > "$tmp/cpp-bad.out"
code=$?
set -e
tail -2 "$tmp/cpp-bad.out"
[ "$code" = 1 ] || { echo "install_tree_test: the C++ example's planted bug survived (exit $code)"; exit 1; }
nvcc=${CUDACXX:-$(command -v nvcc || true)}
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -n "$nvcc" ]; then
  for where in "install:-DCMAKE_PREFIX_PATH=$tmp/prefix" "build:-Dflashcheck_DIR=$build"; do
    echo "== examples/plugin_cuda against the ${where%%:*} tree (nvcc $nvcc; built, not run)"
    cmake -S "$src/examples/plugin_cuda" -B "$tmp/cuda-${where%%:*}" "${gen[@]}" "${where#*:}" \
      -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=80 > "$tmp/cuda.log" 2>&1 || { cat "$tmp/cuda.log"; exit 1; }
    cmake --build "$tmp/cuda-${where%%:*}" >> "$tmp/cuda.log" 2>&1 || { cat "$tmp/cuda.log"; exit 1; }
    ls "$tmp/cuda-${where%%:*}/libattention_cuda.so" > /dev/null
  done
else
  echo "== examples/plugin_cuda: no nvcc, not built"
fi

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
