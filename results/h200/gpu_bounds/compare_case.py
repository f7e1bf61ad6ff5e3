# Issue 25's compare shape on the device: b, h, N, d (default 4, 16, 16384, 128), BF16, no mask. Writes
# the inputs (q, k, v, d_o) and torch's flash SDPA outputs (o, d_q, d_k, d_v) as safetensors for
# `flashcheck compare`, then times torch's float64 attention (math backend) of the same shape,
# forward + backward, head by head (the whole problem's S in float64 would not fit the GPU).
import json, math, struct, sys, time
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

b, h, n, d = (int(x) for x in (sys.argv[1:5] if len(sys.argv) >= 5 else (4, 16, 16384, 128)))
out = sys.argv[5] if len(sys.argv) >= 6 else "."
scale = 1 / math.sqrt(d)
torch.manual_seed(0)
dev = "cuda"
q, k, v, do = (torch.randn(b, h, n, d, device=dev).to(torch.bfloat16) for _ in range(4))


def write(path, tensors, metadata):
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().cpu().view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for raw in blobs:
            f.write(raw)


qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    o = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, scale=scale)
    o.backward(do)
write(f"{out}/in.safetensors", {"q": q, "k": k, "v": v, "d_o": do}, {"mask": "none", "scale": repr(scale)})
write(f"{out}/out.safetensors", {"o": o.detach(), "d_q": qg.grad, "d_k": kg.grad, "d_v": vg.grad}, {})
del qg, kg, vg, o
torch.cuda.synchronize()
q64, k64, v64, do64 = (x.double() for x in (q, k, v, do))
with sdpa_kernel(SDPBackend.MATH):
    for rep in range(2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for bi in range(b):
            for hi in range(h):
                qh, kh, vh = (x[bi:bi + 1, hi:hi + 1].clone().requires_grad_(True) for x in (q64, k64, v64))
                oh = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, scale=scale)
                oh.backward(do64[bi:bi + 1, hi:hi + 1])
        torch.cuda.synchronize()
        print(f"torch float64 math SDPA b {b} h {h} N {n} d {d}, forward+backward head by head (rep {rep}): "
              f"{time.perf_counter() - t0:.3f} s", flush=True)
