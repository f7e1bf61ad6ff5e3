# Sourced by the device scripts (scripts/device.sh bench, scripts/device.sh fuzz, scripts/device.sh audit): the repository root, the output
# folder ($OUT on the device), the carried binaries unpacked into .carry/ (scripts/device.sh carry packs them
# into .carry-z/), and the shared libraries a carried binary lacks there.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$root/reports/out}
mkdir -p "$out"
# Unpacked once per bundle: scripts started side by side (one per GPU) share it, under a lock, and a
# warm machine's older .carry/ is replaced when the bundle differs.
bundle=$(ls "$root"/.carry-z/bundle.tar.xz "$root"/.carry-z/bundle.tar.gz 2>/dev/null | head -1)
if [ -n "$bundle" ]; then
  (
    flock 9
    sum=$(md5sum < "$bundle")
    if [ "$(cat "$root/.carry/.bundle" 2>/dev/null)" != "$sum" ]; then
      tar xf "$bundle" -C "$root" && echo "$sum" > "$root/.carry/.bundle"
    fi
  ) 9> "$root/.carry-z.lock"
fi
export LD_LIBRARY_PATH=$root/.carry/lib:${LD_LIBRARY_PATH:-}
# The registry's CUDA kernels (mutants aside), in its order, from the carried flashcheck: the jobs
# iterate these rather than naming kernels. `cuda_kernels backward`: those with a backward (the
# FlashAttention kernels; cuda_naive, without one, is the same-precision baseline). Prints nothing
# where flashcheck is not carried.
cuda_kernels() {
  [ -x "$root/.carry/tests/flashcheck" ] || return 0
  "$root/.carry/tests/flashcheck" kernels --json | python3 -c '
import json, sys
backward_only = sys.argv[1:] == ["backward"]
for k in json.load(sys.stdin)["kernels"]:
    if k["device"] == "cuda" and not k["mutant"] and (k["backward"] or not backward_only):
        print(k["name"])' "$@"
}
