"""The `compare --fail-on-regression` gate: what got significantly worse in one comparison."""

from __future__ import annotations

from erroranalysis.compare.stats import worse_p
from erroranalysis.core.validation import check_param

GATE_ALPHA = 0.05
GATED_OVERALL = ("accuracy", "macro_f1")


def regressions(comp: dict, *, alpha: float = GATE_ALPHA) -> list[dict]:
    """What got significantly worse in one comparison (the `compare --fail-on-regression` gate):

    - accuracy or macro F1, or a class's F1, whose paired bootstrap interval of the change lies below 0;
    - an error type (labeled, when the candidate has labels) or a cluster (matched across the runs, or new in the
      candidate) that gained more newly failing examples than it lost fixed ones, with one-sided binomial p < alpha.

    Each entry: kind (overall, class, error_type, cluster), name, and a one-line `text`."""
    check_param("alpha", alpha, isinstance(alpha, float) and 0 < alpha < 1, "a number in (0, 1)")
    out = []
    for name in GATED_OVERALL:
        m = comp["overall"][name]
        if m["significant"] and (m["delta"] or 0) < 0:
            out.append({"kind": "overall", "name": name, "delta": m["delta"], "ci": m["ci"],
                        "text": f"{name.replace('_', ' ')} fell from {m['base']:.3f} to {m['candidate']:.3f} "
                                f"({_pts(m)})"})
    for row in comp["per_class"]:
        f1 = row["f1"]
        if f1["significant"] and (f1["delta"] or 0) < 0:
            out.append({"kind": "class", "name": row["label"], "delta": f1["delta"], "ci": f1["ci"],
                        "text": f"F1 of class {row['label']!r} fell from {f1['base']:.3f} to {f1['candidate']:.3f} "
                                f"({_pts(f1)})"})
    broken_into: dict[str, int] = {}
    for ex in comp["examples"]["broken"]:
        if ex.get("candidate_error_type"):
            broken_into[ex["candidate_error_type"]] = broken_into.get(ex["candidate_error_type"], 0) + 1
    for r in comp["error_types"] or []:
        if r["candidate"] is None:
            continue
        after, broken = r["candidate"] + r["candidate_suggested"], broken_into.get(r["name"], 0)
        p = worse_p(broken, r["fixed"])
        if after > r["base"] and p < alpha:
            out.append({"kind": "error_type", "name": r["name"], "base": r["base"], "candidate": after,
                        "broken": broken, "fixed": r["fixed"], "p_value": p,
                        "text": f"error type {r['name']!r} grew from {r['base']:,} to {after:,} failures: "
                                f"{broken:,} newly failing, {r['fixed']:,} fixed (one-sided binomial p={p:.2g})"})
    clusters = comp["clusters"]
    for r in clusters["persisted"] if clusters["available"] else []:
        p = worse_p(r["broken"], r["fixed"])
        if r["candidate_size"] > r["base_size"] and p < alpha:
            out.append({"kind": "cluster", "name": r["candidate_name"], "base": r["base_size"],
                        "candidate": r["candidate_size"], "broken": r["broken"], "fixed": r["fixed"], "p_value": p,
                        "text": f"cluster #{r['candidate_id']} {r['candidate_name']!r} (#{r['base_id']} before) "
                                f"grew from {r['base_size']:,} to {r['candidate_size']:,} failures: "
                                f"{r['broken']:,} newly failing, {r['fixed']:,} fixed (p={p:.2g})"})
    for r in clusters["appeared"] if clusters["available"] else []:
        p = worse_p(r["broken"], 0)
        if p < alpha:
            out.append({"kind": "cluster", "name": r["name"], "base": 0, "candidate": r["size"],
                        "broken": r["broken"], "fixed": 0, "p_value": p,
                        "text": f"new cluster #{r['cluster_id']} {r['name']!r}: {r['size']:,} failures, "
                                f"{r['broken']:,} of them newly failing (p={p:.2g})"})
    return out


def _pts(m: dict) -> str:
    lo, hi = m["ci"]
    return f"{m['delta'] * 100:+.1f} points, 95% CI [{lo * 100:+.1f}, {hi * 100:+.1f}]"
