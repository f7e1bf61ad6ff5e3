"""Why does SDPA's flash check decline invisible_keys's cases? Tally can_use_flash_attention's warnings."""
import atexit, collections, sys, warnings
import torch
import torch_sdpa

_orig = torch.backends.cuda.can_use_flash_attention
tally, shapes = collections.Counter(), collections.Counter()

def _dbg(params, debug=False):
    ok = _orig(params, False)
    q, k = params.query, params.key
    shapes[(ok, tuple(q.shape) , tuple(k.shape), params.is_causal)] += 1
    if not ok:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            _orig(params, True)
        for x in w:
            tally[str(x.message).split(".")[0][:160]] += 1
    return ok

torch.backends.cuda.can_use_flash_attention = _dbg

@atexit.register
def _report():
    print("DIAG reasons:", file=sys.stderr)
    for m, n in tally.most_common():
        print("DIAG  %4d %s" % (n, m), file=sys.stderr)
    print("DIAG shapes (ok, q, k, causal):", file=sys.stderr)
    for s, n in shapes.most_common(40):
        print("DIAG  %4d %s" % (n, s), file=sys.stderr)

flash = torch_sdpa.flash
