# Sourced by the device scripts (bench/device.sh, fuzz/h200.sh, reports/gpu/audit_h200.sh): the repository root, the output
# folder ($OUT on the device), the carried binaries unpacked into .carry/ (bench/carry.sh packs them
# into .carry-z/), and the shared libraries a carried binary lacks there.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$root/reports/out}
mkdir -p "$out"
if [ -f "$root/.carry-z/bundle.tar.gz" ]; then tar xzf "$root/.carry-z/bundle.tar.gz" -C "$root"; fi
export LD_LIBRARY_PATH=$root/.carry/lib:${LD_LIBRARY_PATH:-}
