"""The external audit's results read back (a law run's JSON, or the laws its log printed when it was cut
short; an audit's report.json) and rendered as OUT/summary.md. No number is written here that a run did
not produce: every figure comes from the results passed in, except the FlashAttention-3 paper's table."""
import json
import math
import os
import re

# FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608) measures the RMSE of O against an FP64 reference
# on q, k, v ~ N(0, 1) + N(0, 100) * Bernoulli(0.001) (section 4.3, Table 3); the section states no
# sequence length or head dimension, so its figures set ratios beside ours, not values to meet.
FA3_NOTE = ("FlashAttention-3 (arXiv:2407.08608, §4.3, Table 3) measures the RMSE of O against an FP64 reference "
            "on N(0,1) + N(0,100)·Bernoulli(0.001) inputs, the distribution of the audit's `outliers` cases: "
            "3.2e-4 for a standard FP16 attention (softmax kept in FP16), 1.9e-4 for FlashAttention-2 and "
            "FlashAttention-3 in FP16 (1.7x lower, the softmax kept in FP32). It names no sequence length or "
            "head dim for the table, so compare ratios: the `outliers` rows above are this run's own "
            "measurement of the same quantity.")
# What a failure of a known kind means (docs/external-audit.md argues each): (law, text in its message, note,
# the kernels it is about: a name prefix). A note states the mechanism; every fact about the case in it
# ({dtype}, {n_q}, {n_k}, {d}, {mask}, and {dims}, {strides}, {algorithm} where the message names them)
# is filled in from the shrunk case itself (case_fields), never written here.
NOTES = [
    ("nan_blast", "a key no poisoned row sees changed",
     "dense backward: dK = dS^T Q (dV = P^T dO) multiplies a masked pair's dS = 0 (P = 0) by the poisoned q "
     "(d_o), 0 * NaN = NaN; flashcheck's contract excludes masked pairs (docs/external-audit.md); here "
     "{dtype}, n_q = {n_q}, n_k = {n_k}, d = {d}, {mask}"),
    ("", "misaligned address",
     "the library accepted these strides (its own support check says yes) and faulted: its bug"),
    ("", "not correctly aligned", "a limit the library documents: the adapter should decline this case"),
    ("", "no kernel found to launch", "a limit the library documents: the adapter should decline this case"),
    ("window_invisible", "", "a dense forward: P V runs over every key, and a masked key's P = 0 times its NaN v is "
     "NaN (jax.nn also masks with a large negative logit, not -inf: a row that sees no key gets the mean of every v, "
     "where the contract says 0); the same reading as nan_blast's (docs/external-audit.md)", "jax_xla"),
    ("", "Only DLPack tensors with trivial",
     "JAX imports compact tensors only, and this call received a tensor of dimensions {dims} with strides "
     "{strides} (the case: {dtype}, d = {d}): a layout the adapter's supports() should have been asked "
     "about, and declined, before the call (examples/python/jax_attention.py, docs/plugins.md)"),
    ("", "Unsupported dot precision algorithm",
     "XLA refuses a dot precision algorithm ({algorithm}) it chose itself, on {dtype} with n_q = {n_q}, "
     "n_k = {n_k}, d = {d}: the library's error on a shape the contract allows"),
    ("", "Unsupported sequence length",
     "jax.nn's cuDNN backward (check_is_flash_attention) takes even lengths only: the adapter pads odd "
     "ones (examples/python/jax_attention.py)"),
    ("determinism", "",
     "a backward that accumulates d_q with atomics (FlashAttention-2, cutlass) is documented to be "
     "non-deterministic by default; the plugin ABI passes no request for a deterministic variant", "sdpa_"),
    ("varlen_split", "bits expected", "a library without packed varlen (JAX) runs the batch padded to its longest sequence with "
     "sequence lengths: a padded row's sums run over more (masked, zero) terms than its own run's, and may round "
     "differently (the case: {dtype}, d = {d})", "jax_"),
    ("zero_length", "bits expected", "a library without packed varlen (JAX) runs the batch padded to its longest sequence "
     "with sequence lengths: an inserted sequence changes that grid, so a row's sums run over other (masked, zero) "
     "terms and may round differently (the case: {dtype}, d = {d})", "jax_"),
]
_STATUS = re.compile(r"^  (PASS|FAIL|INCONCLUSIVE|n/a)\s+(\S+)\s+(.*?)(?: \((\d+) cases?(?:[:,;][^()]*)?\))?$")


def read_check(json_path, log_path):
    """{"laws": [...], "complete": bool}: the JSON when the run finished, else the laws its log printed."""
    try:
        with open(json_path) as f:
            data = json.load(f)
        return {"laws": data.get("laws", []), "complete": True}
    except (OSError, ValueError):
        pass
    laws, law = [], None
    for line in _lines(log_path):
        m = _STATUS.match(line)
        if m:
            status = {"PASS": "pass", "FAIL": "fail", "INCONCLUSIVE": "inconclusive"}.get(m.group(1), "n/a")
            law = {"id": m.group(2), "status": status, "sentence": m.group(3), "cases": int(m.group(4) or 0),
                   "message": "", "counterexample": "", "replay": "", "saved": ""}
            if status == "n/a":
                law["why"] = law["sentence"].rpartition(" (")[2].rstrip(")")
            laws.append(law)
            where = "message"
        elif law is not None and law["status"] == "fail" and where != "done":
            # A failure prints its message (any lines), "minimal counterexample:" and the case (indented),
            # then "replay: ..." and "saved: ...".
            text = line.strip()
            if text == "minimal counterexample:":
                where = "counterexample"
            elif line.startswith("  ") and text.startswith(("replay: ", "saved: ")):
                key, _, value = text.partition(": ")
                law[key] = value
            elif where == "counterexample" and not line.startswith("  "):
                where = "done"  # the run's closing lines
            else:
                law[where] += line + "\n"
    out = {"laws": laws, "complete": False, "log_tail": _lines(log_path)[-4:]}
    return out


def read_audit(report_path, log_path):
    """{"cells": {case: {...}}} from report.json (the kernel's own cells), or {"error": the log's tail}."""
    try:
        with open(report_path) as f:
            report = json.load(f)
    except (OSError, ValueError):
        return {"cells": {}, "error": " / ".join(_lines(log_path)[-3:]) or "no output"}
    cells = {}
    for cell in report.get("cells", []):
        if cell.get("kernel") == "cpu_naive" and len({c.get("kernel") for c in report.get("cells", [])}) > 1:
            continue  # the baseline cells the audit adds beside a plugin
        tensors = cell.get("tensors", {})
        why = cell.get("error") or "; ".join("%s: %s" % (t, v.get("why")) for t, v in tensors.items() if v.get("why"))
        cells[cell.get("case", "?")] = {
            "status": cell.get("status"), "replay": cell.get("replay", ""), "why": why,
            "tensors": {t: {"rmse": v.get("rmse"), "ratio": (v.get("ratio") or {}).get("max"), "pass": v.get("pass")}
                        for t, v in tensors.items()}}
    return {"cells": cells}


def _lines(path):
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip("\n") for line in f]
    except OSError:
        return []


def fmt(x):
    if x is None:
        return "–"
    if isinstance(x, str):
        return x
    return "%.2e" % x if x != 0 else "0"


def _laws(r):
    """The run's laws; one that is inconclusive (the kernel declined nearly every case drawn; older runs:
    a "fail" whose message starts "gave up") is neither held nor broken: its status reads "gave up"."""
    laws = r["runs"].get("check", {}).get("laws", [])
    return [dict(x, status="gave up") if x.get("status") == "inconclusive" or
            (x.get("status") == "fail" and x.get("message", "").startswith("gave up")) else x for x in laws]


def _cells(r):
    cells = {}
    for kind, run in r["runs"].items():
        if kind != "check":
            cells.update(run.get("cells", {}))
    return cells


def _repo_path(path, out):
    """A saved counterexample's path as it lands in the repository (OUT is committed as results/h200/external)."""
    if not path:
        return ""
    at = path.find("/regressions/")
    return "results/h200/external" + path[at:] if at >= 0 else path


def _replay_file(r, law, out):
    saved = _repo_path(law.get("saved", ""), out)
    if not saved:
        return ""
    head = "flashcheck check --kernel %s" % r["name"] if r["spec"] is None else "python -m flashcheck check %s" % r["spec"]
    return "%s --law %s --case %s" % (head, law["id"], saved)


_FIELD = re.compile(r"(\w+)=(\S+)")
_DIMS = re.compile(r"dimensions(?: were)?:? (\[[^\]]*\]),? strides(?: were)?:? (\[[^\]]*\])", re.I)
_ALGORITHM = re.compile(r"precision algorithm: *(\w+)")


class _Unknown(dict):
    def __missing__(self, key):
        return "?"  # a field the run did not record: shown as unknown, never guessed


def case_fields(law):
    """The shrunk case's fields: its problem line's (batch, heads_q, heads_kv, n_q, n_k, d, dtype, mask,
    scale) and what the message names (a tensor's dimensions and strides, XLA's dot algorithm)."""
    fields = _Unknown()
    for line in law.get("counterexample", "").splitlines():
        if line.strip().startswith("problem:"):
            fields.update(_FIELD.findall(line))
    message = law.get("message", "")
    dims = _DIMS.search(message)
    if dims:
        fields["dims"], fields["strides"] = dims.group(1), dims.group(2)
    algorithm = _ALGORITHM.search(message)
    if algorithm:
        fields["algorithm"] = algorithm.group(1)
    return fields


def _note(kernel, law):
    text = law.get("message", "") + law.get("counterexample", "")
    fields = case_fields(law)
    return "; ".join(n[2].format_map(fields) for n in NOTES if (not n[0] or n[0] == law["id"]) and n[1] in text and
                     kernel.startswith(n[3] if len(n) > 3 else ""))


def _run_cell(run):
    if not run:
        return "–"
    return "exit %s, %s s%s" % (run.get("exit"), run.get("seconds"), "" if run.get("complete", True) else " (cut short)")


def render(data, out):
    ks = data["kernels"]
    base = next((r for r in ks if r["name"] == data.get("baseline")), None)
    device = _lines(os.path.join(out, "device.txt"))
    L = ["# External attention kernels under flashcheck", "",
         "Produced by `tools/external_audit/audit_external.py` (command below); what each failure means is argued in "
         "`docs/external-audit.md`.", "",
         "- command: `%s`" % data["command"], "- device: %s" % (" / ".join(device) or "(device.txt absent)"),
         "- %d random cases per law (seed %d) after the saved regression cases; wall %.0f s of a %.0f s budget"
         % (data["cases_per_law"], data["seed"], data["seconds"], data["budget_s"]),
         "- laws: tensors compact, BSHD or padded per case (a kernel that declines strides gets compact ones); "
         "audit: compact tensors, fp16 and bf16, the quick sweep (N <= 256) and N = 1024 and 16384",
         "- scope: %s" % (", ".join("%s=%s" % kv for kv in sorted(data.get("scope", {}).items())) or "everything the "
                          "adapters declare"), ""]
    L += ["## Verdicts", "",
          "Laws: held / broken / not applicable / not reached (the run's time ran out first, or the law gave up: the "
          "kernel declined nearly every case it drew). Audit: cells whose every "
          "output lies within flashcheck's certified bound, of the cells run; the worst ratio |error| / bound over them.",
          "o RMSE vs %s: the geometric mean, over the audit cells both ran, of this implementation's o RMSE over "
          "%s's." % ((base or {}).get("name", "the comparison"), (base or {}).get("name", "its")),
          "", "| implementation | laws held | broken | n/a | not reached | audit within bound | worst ratio "
          "| o RMSE vs %s | laws run | audit runs |" % ((base or {}).get("name", "comparison")),
          "|---|---|---|---|---|---|---|---|---|---|"]
    all_ids = []
    for r in ks:
        for law in _laws(r):
            if law["id"] not in all_ids:
                all_ids.append(law["id"])
    for r in ks:
        laws = _laws(r)
        count = lambda s: sum(1 for x in laws if x["status"] == s)  # noqa: E731
        reached = {x["id"] for x in laws}
        cells = _cells(r)
        ok = sum(1 for c in cells.values() if c["status"] == "pass")
        ratios = [t["ratio"] for c in cells.values() for t in c["tensors"].values() if isinstance(t["ratio"], (int, float))]
        audits = ", ".join("%s %s" % (k, _run_cell(run)) for k, run in r["runs"].items() if k != "check")
        L.append("| %s (%s) | %d | %d | %d | %d | %s | %s | %s | %s | %s |" % (
            r["name"], r["about"], count("pass"), count("fail"), count("n/a") + count("unsupported"),
            len([i for i in all_ids if i not in reached]) + count("gave up"), "%d/%d" % (ok, len(cells)) if cells else "–",
            fmt(max(ratios)) if ratios else "–", _rmse_vs(r, base), _run_cell(r["runs"].get("check")),
            audits or "–"))
    L += ["", "## Law by law", "", "✓ held, ✗ broken, n/a not applicable (reason in kernels/NAME.json), ? gave up (the kernel declined "
          "nearly every case drawn: no verdict), – not reached.", "",
          "| law | " + " | ".join(r["name"] for r in ks) + " |", "|---" * (len(ks) + 1) + "|"]
    mark = {"pass": "✓", "fail": "✗", "n/a": "n/a", "unsupported": "n/a", "gave up": "?"}
    for lid in all_ids:
        row = []
        for r in ks:
            law = next((x for x in _laws(r) if x["id"] == lid), None)
            row.append(mark.get(law["status"], law["status"]) if law else "–")
        L.append("| %s | %s |" % (lid, " | ".join(row)))
    L += _errors(ks, base)
    L += _broken(ks, out)
    return "\n".join(L) + "\n"


def _rmse_vs(r, base):
    """Geometric mean over the cells both ran of o's RMSE over the comparison's ("–" when none)."""
    if base is None or r is base:
        return "–"
    mine, theirs = _cells(r), _cells(base)
    logs = []
    for case, c in mine.items():
        a = c["tensors"].get("o", {}).get("rmse")
        b = theirs.get(case, {}).get("tensors", {}).get("o", {}).get("rmse")
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0:
            logs.append(math.log(a / b))
    return "%.2f (%d cells)" % (math.exp(sum(logs) / len(logs)), len(logs)) if logs else "–"


def _errors(ks, base):
    L = ["", "## Errors beside %s" % (base["name"] if base else "the comparison kernel"), "",
         "o's RMSE against the certified reference and its worst |error| / bound, per audit case (same inputs for "
         "every implementation: the audit's seed).", ""]
    names = [r for r in ks if _cells(r)]
    cases = sorted({c for r in names for c in _cells(r)}, key=lambda c: (c.split("/")[0], c))
    if not cases:
        return L + ["No audit cell finished."]
    L += ["| case | " + " | ".join(r["name"] for r in names) + " |", "|---" * (len(names) + 1) + "|"]
    for case in cases:
        row = []
        for r in names:
            c = _cells(r).get(case)
            o = (c or {}).get("tensors", {}).get("o")
            if c is None:
                row.append("–")
            elif o is None:
                row.append(c["status"] or "?")
            else:
                row.append("%s (%s)%s" % (fmt(o["rmse"]), fmt(o["ratio"]), "" if c["status"] == "pass" else " ✗"))
        L.append("| %s | %s |" % (case, " | ".join(row)))
    L += ["", "### Against the FlashAttention-3 paper", "", FA3_NOTE]
    return L + [""]


def _broken(ks, out):
    L = ["", "## Every law broken, with its minimal counterexample", ""]
    any_broken = False
    for r in ks:
        for law in _laws(r):
            if law["status"] != "fail":
                continue
            any_broken = True
            message = " ".join(law.get("message", "").split())[:600]
            L += ["### %s: `%s` (%s)" % (r["name"], law["id"], law.get("sentence", "")), "", message, ""]
            note = _note(r["name"], law)
            if note:
                L += ["Reading: %s." % note, ""]
            if law.get("counterexample"):
                L += ["```", law["counterexample"].rstrip(), "```", ""]
            if law.get("replay"):
                L.append("- replay: `%s`" % law["replay"])
            if law.get("saved"):
                L += ["- regression case: `%s`" % _repo_path(law["saved"], out),
                      "- replay it: `%s`" % _replay_file(r, law, out)]
            L.append("")
    if not any_broken:
        L.append("None.")
    gave_up = ["- %s `%s`: %s" % (r["name"], x["id"], " ".join(x.get("message", "").split())[:300])
               for r in ks for x in _laws(r) if x["status"] == "gave up"]
    if gave_up:
        L += ["", "## Laws that gave up (no verdict)", ""] + gave_up
    L += ["", "## Audit cells outside the bound or in error", ""]
    bad = [(r["name"], case, c) for r in ks for case, c in sorted(_cells(r).items()) if c["status"] != "pass"]
    L += ["- **%s %s** (%s): %s; replay: `%s`" % (n, case, c["status"], " ".join(str(c["why"]).split())[:400], c["replay"])
          for n, case, c in bad] or ["None."]
    L += ["", "## Runs that did not finish", ""]
    unfinished = []
    for r in ks:
        for kind, run in r["runs"].items():
            if run.get("exit") not in (0, 1):
                tail = [run["note"]] if run.get("note") else run.get("log_tail") or [run.get("error", "")]
                unfinished.append("- %s %s: exit %s after %s s (limit %s s): %s" % (
                    r["name"], kind, run.get("exit"), run.get("seconds"), run.get("limit_s"),
                    " / ".join(x.strip() for x in tail if x)[:400]))
    return L + (unfinished or ["None."])

