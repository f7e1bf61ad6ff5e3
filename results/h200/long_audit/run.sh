#!/usr/bin/env bash
# Issue 25's audit to N = 131072 on the CUDA kernels: the GPU audit's sweep with the long cases (N =
# 16384 ... 131072, the last 1024 rows' o, lse and d_q), then one N = 131072 case alone beside torch's
# float64 attention (math backend) of the problem its oracle certifies (those 1024 rows on all 131072
# keys; the whole problem's S alone would take 137 GB in float64). Binaries built here:
#   BUILD_DIR=$PWD/build bash scripts/device.sh carry
#   run(command="bash results/h200/long_audit/run.sh 1", carry=[".carry-z"]): the gpu-labelled tests
#   run(command="bash results/h200/long_audit/run.sh 2", carry=[".carry-z"]): the audit and the timing
#   run(command="bash results/h200/long_audit/run.sh 3", carry=[".carry-z",
#       "build/plugin/tests/libplugin_cuda_none.so"]): the CUDA example plugin (examples/plugin_cuda,
#       forward only) on long cases, and the one case of step 2 again
set -uo pipefail
source scripts/device/env.sh
t=$root/.carry/tests
w=$out/run
mkdir -p "$w"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$w/device.txt"
echo "commit $(cat "$root/.carry/COMMIT"); cores $(nproc)" | tee -a "$w/device.txt"
# torch's float64 attention (math backend), forward + backward, on the problem an N = 131072 case
# certifies: three repetitions (the first includes CUDA's start).
torch_f64() {
  python3 - <<'EOF' 2>&1 | tee -a "$w/summary.txt"
import time, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
torch.manual_seed(0)
dev = "cuda"
q = torch.randn(1, 1, 1024, 64, dtype=torch.float64, device=dev, requires_grad=True)
k = torch.randn(1, 1, 131072, 64, dtype=torch.float64, device=dev, requires_grad=True)
v = torch.randn(1, 1, 131072, 64, dtype=torch.float64, device=dev, requires_grad=True)
do = torch.randn(1, 1, 1024, 64, dtype=torch.float64, device=dev)
with sdpa_kernel(SDPBackend.MATH):
    for rep in range(3):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=False)
        o.backward(do)
        torch.cuda.synchronize()
        print(f"torch float64 math SDPA, b 1 h 1 n_q 1024 n_k 131072 d 64, forward+backward (rep {rep}): "
              f"{time.perf_counter() - t0:.3f} s")
EOF
}
case ${1:-1} in
  1)
    OUT=$w/bench timeout 560 bash scripts/device.sh bench tests > "$w/bench.log" 2>&1
    echo "bench tests rc=$?" | tee -a "$w/summary.txt"
    tail -30 "$w/bench.log"
    ;;
  2)
    OUT=$w/audit ACC_LIMIT=0 AUDIT_LIMIT=400 bash scripts/device.sh audit > "$w/audit_job.log" 2>&1
    echo "audit job: $(grep '^audit rc' "$w/audit/device.txt")" | tee -a "$w/summary.txt"
    # One case alone, twice (the first run loads the binary and warms the device), then torch.
    for i in 1 2; do
      s=$SECONDS
      "$t/flashcheck" audit --kernel cuda_wgmma --case BF16/normal/n131072 --jobs 16 --out "$w/one$i" > "$w/one$i.log" 2>&1
      echo "audit --kernel cuda_wgmma --case BF16/normal/n131072 (run $i) rc=$? $((SECONDS - s)) s" | tee -a "$w/summary.txt"
    done
    torch_f64
    ;;
  3)
    s=$SECONDS
    "$t/flashcheck" audit --plugin build/plugin/tests/libplugin_cuda_none.so --case F16/normal/n131072 \
      --case F16/causal_bottom_right/n131072 --case BF16/outliers/n131072 --case BF16/normal/n65536 --jobs 16 \
      --out "$w/plugin" > "$w/plugin.log" 2>&1
    echo "audit --plugin libplugin_cuda_none.so (4 long cases) rc=$? $((SECONDS - s)) s" | tee -a "$w/summary.txt"
    grep -E "^\| (F16|BF16)/" "$w/plugin/report.md" | tee -a "$w/summary.txt"
    rm -f "$w/plugin/report.html"
    s=$SECONDS
    "$t/flashcheck" audit --kernel cuda_wgmma --case BF16/normal/n131072 --jobs 16 --out "$w/one" > "$w/one.log" 2>&1
    echo "audit --kernel cuda_wgmma --case BF16/normal/n131072 rc=$? $((SECONDS - s)) s" | tee -a "$w/summary.txt"
    torch_f64
    ;;
esac
tar czf "$out/step${1:-1}.tar.gz" -C "$w" . && rm -rf "$w"
ls -la "$out"
