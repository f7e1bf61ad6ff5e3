#!/usr/bin/env bash
# The sm_90a device code of every kernel function of kernels/cuda/*.cu, one file per function, for
# comparing two versions of the sources (a refactor that must not change the device code):
#   scripts/sass_dump.sh OUT_DIR [SOURCE_ROOT]      then: diff -r before/code after/code
# Each .cu is compiled alone to a cubin with the build's flags (nvcc -cubin -arch=sm_90a -O3 -DNDEBUG
# --expt-relaxed-constexpr -lineinfo -std=c++17). Per function, code/ holds its SASS (cuobjdump -sass)
# when the toolkit has cuobjdump, else the bytes of its .text section (the SASS itself), and beside
# them its .nv.info (registers, barriers, parameters) and shared-memory sections. Names are the mangled
# function names with nvcc's per-file anonymous-namespace tags removed. Environment: NVCC (default
# /usr/local/cuda/bin/nvcc), JOBS (parallel compiles, default 2).
set -euo pipefail
out=$1
src=${2:-$(cd "$(dirname "$0")/.." && pwd)}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
mkdir -p "$out/cubin" "$out/code"
compile() {
  local cu=$1
  "$nvcc" -I"$src" -isystem="$(dirname "$nvcc")/../include" -O3 -DNDEBUG -arch=sm_90a -cubin -Xcompiler=-fPIC \
    --expt-relaxed-constexpr -lineinfo -std=c++17 -x cu "$cu" -o "$out/cubin/$(basename "$cu" .cu).cubin"
}
export -f compile
export nvcc src out
ls "$src"/kernels/cuda/*.cu | xargs -P "${JOBS:-2}" -I{} bash -c 'compile {}'
python3 - "$out" "$(dirname "$nvcc")/cuobjdump" <<'PY'
import os, re, struct, subprocess, sys
out, cuobjdump = sys.argv[1], sys.argv[2]
norm = lambda name: re.sub(r"_GLOBAL__N__[0-9A-Za-z]+_[0-9A-Za-z_]*?_[0-9a-f]{8}|_GLOBAL__N__[0-9a-f]+", "", name)
for cubin in sorted(os.listdir(os.path.join(out, "cubin"))):
    data = open(os.path.join(out, "cubin", cubin), "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = secs[shstrndx]
    name_of = lambda s: data[strtab[4] + s[0]:data.index(b"\0", strtab[4] + s[0])].decode()
    for s in secs:
        name = name_of(s)
        if re.match(r"\.(text|nv\.info|nv\.shared|nv\.constant0)\.", name) and s[1] != 8:  # 8: NOBITS
            open(os.path.join(out, "code", norm(name).lstrip(".")), "wb").write(data[s[4]:s[4] + s[5]])
        elif re.match(r"\.nv\.shared\.", name):
            open(os.path.join(out, "code", norm(name).lstrip(".")), "w").write(f"{s[5]} bytes\n")
PY
ls "$out/code" | wc -l
