"""One-off probes of library behaviour behind open findings: each trial in its own process with a time-out."""
import json, subprocess, sys, time

TRIALS = []
for d in (8, 48, 64, 72, 80, 88, 128):
    TRIALS.append(("varlen", dict(d=d, lq=[21], lk=[1], bwd=True)))
TRIALS += [("varlen", dict(d=64, lq=[1], lk=[0], bwd=True)), ("varlen", dict(d=64, lq=[1], lk=[0], bwd=False)),
           ("varlen", dict(d=64, lq=[21, 19], lk=[1, 0], bwd=True)), ("varlen", dict(d=64, lq=[21, 19], lk=[1, 0], bwd=False)),
           ("varlen", dict(d=64, lq=[0, 5], lk=[3, 4], bwd=True))]
for d in (1, 2, 8, 9, 15, 16, 17, 31, 32, 40, 64):
    TRIALS.append(("xla", dict(d=d, n=1, dt="float16")))
TRIALS += [("xla", dict(d=9, n=4, dt="float16")), ("xla", dict(d=9, n=1, dt="bfloat16")), ("xla", dict(d=9, n=1, dt="float32"))]

def varlen(d, lq, lk, bwd):
    import torch
    from torch.nn.attention import varlen as V
    torch.manual_seed(0)
    tq, tk = sum(lq), sum(lk)
    q = torch.randn(tq, 1, d, device="cuda", dtype=torch.float16, requires_grad=bwd)
    k = torch.randn(max(tk, 0), 1, d, device="cuda", dtype=torch.float16, requires_grad=bwd)
    v = torch.randn(max(tk, 0), 1, d, device="cuda", dtype=torch.float16, requires_grad=bwd)
    cq = torch.tensor([0] + list(__import__("itertools").accumulate(lq)), dtype=torch.int32, device="cuda")
    ck = torch.tensor([0] + list(__import__("itertools").accumulate(lk)), dtype=torch.int32, device="cuda")
    o = V.varlen_attn(q, k, v, cq, ck, max(lq), max(lk), window_size=(-1, -1))
    torch.cuda.synchronize()
    out = {"o_finite": bool(torch.isfinite(o).all())}
    if bwd:
        o.backward(torch.ones_like(o))
        torch.cuda.synchronize()
        out["dq_finite"] = bool(torch.isfinite(q.grad).all())
    return out

def xla(d, n, dt):
    import jax, jax.numpy as jnp
    q = jnp.zeros((1, n, 1, d), dtype=dt)
    o = jax.nn.dot_product_attention(q, q, q, implementation="xla")
    o.block_until_ready()
    return {"ok": True}

if len(sys.argv) > 1:
    kind, args = sys.argv[1], json.loads(sys.argv[2])
    t = time.time()
    try:
        r = globals()[kind](**args)
        print(json.dumps({"result": r, "s": round(time.time() - t, 2)}))
    except Exception as e:
        print(json.dumps({"error": ("%s: %s" % (type(e).__name__, e))[:300], "s": round(time.time() - t, 2)}))
    sys.exit(0)
for kind, args in TRIALS:
    t = time.time()
    try:
        p = subprocess.run([sys.executable, __file__, kind, json.dumps(args)], capture_output=True, text=True, timeout=40)
        line = (p.stdout.strip().splitlines() or ["(no output) rc=%d %s" % (p.returncode, p.stderr[-300:])])[-1]
    except subprocess.TimeoutExpired:
        line = "TIMEOUT 40 s"
    print(kind, json.dumps(args), "->", line, "wall %.1f" % (time.time() - t), flush=True)
