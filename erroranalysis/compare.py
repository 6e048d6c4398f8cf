"""Compare runs of the same eval set: a baseline and one or more candidates (an ablation series).

The statistics are pure functions over arrays: `paired_bootstrap` (paired percentile intervals for the change of
accuracy, macro/weighted F1 and per-class precision, recall and F1), `mcnemar` (paired correctness, exact binomial
when the discordant count is small), `match_clusters` (clusters matched across runs by shared members). The thin
layer on top reads the run directories and the labels store and builds one report:

    from erroranalysis import compare
    report = compare.compare_runs("runs/base", ["runs/cand"])      # examples matched by example id
    compare.write_report(report, "out/")                            # compare.json, compare.md, compare_examples.parquet
    print(compare.to_markdown(report.doc))

The JSON format (`format: erroranalysis.compare`, `schema_version: 1`) is documented in docs/compare.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from erroranalysis.errors import DataError, preview
from erroranalysis.validation import check_param, is_int

FORMAT = "erroranalysis.compare"
SCHEMA_VERSION = 1
LEVEL = 0.95
EXACT_BELOW = 25  # McNemar: exact binomial test when fixed + broken is below this
BOOTSTRAP_CELLS = 4_000_000
MIN_OVERLAP = 0.3
TEXT_LIMIT = 300
OVERALL = ("accuracy", "macro_f1", "weighted_f1", "macro_precision", "macro_recall")
PER_CLASS = ("precision", "recall", "f1")
STATUSES = ("fixed", "broken", "still_failing", "still_correct")
REPORT_FILES = ("compare.json", "compare.md", "compare_examples.parquet")




def stats_from_confusion(cm: np.ndarray) -> dict[str, np.ndarray]:
    """Accuracy, macro and weighted scores and per-class precision/recall/F1 of confusion counts [..., k, k]."""
    from erroranalysis.metrics import scores_from_confusion

    s = scores_from_confusion(cm)
    n = cm.sum(axis=(-2, -1)).astype(np.float64)
    n_safe = np.where(n > 0, n, 1.0)
    out = {"accuracy": np.trace(cm, axis1=-2, axis2=-1) / n_safe,
           "macro_f1": s["f1"].mean(axis=-1), "macro_precision": s["precision"].mean(axis=-1),
           "macro_recall": s["recall"].mean(axis=-1),
           "weighted_f1": (s["f1"] * s["support"]).sum(axis=-1) / n_safe}
    for name in PER_CLASS:
        out[name] = s[name]
    out["support"] = s["support"]
    return out


def paired_bootstrap(t: np.ndarray, pa: np.ndarray, pb: np.ndarray, k: int, *, n_resamples: int = 1000,
                     seed: int = 0, level: float = LEVEL) -> dict:
    """Point values for runs a and b and paired percentile intervals of `b - a` for every statistic of
    `stats_from_confusion`, from integer codes of gold labels `t` and the two runs' predictions.

    Resampling examples with replacement (the same rows for both runs) puts a multinomial number of rows in each
    (gold, pred a, pred b) cell, so the cells are drawn directly: the cost grows with the non-empty cells, not rows.
    """
    check_param("n_resamples", n_resamples, is_int(n_resamples) and n_resamples >= 1, "an integer >= 1")
    check_param("seed", seed, is_int(seed) and seed >= 0, "an integer >= 0")
    check_param("level", level, isinstance(level, float) and 0.5 <= level < 1, "a float in [0.5, 1)")
    t, pa, pb = (np.asarray(x, dtype=np.int64) for x in (t, pa, pb))
    n = len(t)
    if n == 0:
        raise DataError("no examples to compare.")
    from scipy import sparse

    from erroranalysis.metrics import confusion_counts

    cm_a, cm_b = confusion_counts(t, pa, k), confusion_counts(t, pb, k)
    point_a, point_b = stats_from_confusion(cm_a), stats_from_confusion(cm_b)
    joint = (t * k + pa) * k + pb
    cells, counts = np.unique(joint, return_counts=True)
    m = len(cells)
    cell_a = cells // k                    # t * k + pa
    cell_b = (cells // (k * k)) * k + cells % k  # t * k + pb
    ma = sparse.csr_matrix((np.ones(m), (np.arange(m), cell_a)), shape=(m, k * k))
    mb = sparse.csr_matrix((np.ones(m), (np.arange(m), cell_b)), shape=(m, k * k))
    rng = np.random.default_rng(seed)
    chunk = max(1, BOOTSTRAP_CELLS // max(m, k * k))
    deltas: dict[str, list] = {name: [] for name in point_a if name != "support"}
    for size in np.diff(np.r_[0:n_resamples:chunk, n_resamples]):
        draws = rng.multinomial(n, counts / n, size=int(size)).astype(np.float64)  # [size, m]
        da = np.asarray((ma.T @ draws.T).T).reshape(-1, k, k)
        db = np.asarray((mb.T @ draws.T).T).reshape(-1, k, k)
        sa, sb = stats_from_confusion(da), stats_from_confusion(db)
        for name in deltas:
            deltas[name].append(sb[name] - sa[name])
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    ci = {}
    for name, parts in deltas.items():
        values = np.concatenate(parts, axis=0)
        lo, hi = np.percentile(values, q, axis=0)
        ci[name] = np.stack([lo, hi], axis=-1)
    return {"a": point_a, "b": point_b, "ci": ci, "n": n, "n_resamples": n_resamples, "seed": seed, "level": level}


def mcnemar(correct_a: np.ndarray, correct_b: np.ndarray) -> dict:
    """McNemar's test of paired correctness. `fixed` = wrong in a, right in b; `broken` = right in a, wrong in b.
    Exact two-sided binomial test when fixed + broken < 25, else chi-square with continuity correction."""
    from scipy import stats

    a = np.asarray(correct_a, dtype=bool)
    b = np.asarray(correct_b, dtype=bool)
    if a.shape != b.shape:
        raise DataError(f"correct_a has {a.size} rows and correct_b {b.size}; pass paired arrays.")
    fixed, broken = int((~a & b).sum()), int((a & ~b).sum())
    d = fixed + broken
    if d == 0:
        return {"fixed": 0, "broken": 0, "n_discordant": 0, "statistic": 0.0, "p_value": 1.0,
                "method": "no discordant pairs"}
    if d < EXACT_BELOW:
        p = float(stats.binomtest(min(fixed, broken), d, 0.5).pvalue)
        return {"fixed": fixed, "broken": broken, "n_discordant": d, "statistic": float(min(fixed, broken)),
                "p_value": min(1.0, p), "method": "exact binomial"}
    stat = (abs(fixed - broken) - 1) ** 2 / d
    return {"fixed": fixed, "broken": broken, "n_discordant": d, "statistic": float(stat),
            "p_value": float(stats.chi2.sf(stat, 1)), "method": "chi-square with continuity correction"}


def match_clusters(base: dict[int, set], candidate: dict[int, set], shared: set, *,
                   min_overlap: float = MIN_OVERLAP) -> list[tuple[int, int, float]]:
    """One-to-one matches (base cluster, candidate cluster, overlap) between two clusterings of failures.

    Overlap is the Jaccard index of the clusters' members among `shared` (examples failing in both runs), so a
    cluster that shrank because most of it was fixed still matches what is left of it; pairs are chosen to
    maximize the total overlap (Hungarian) and kept when the overlap reaches `min_overlap`."""
    from scipy.optimize import linear_sum_assignment

    check_param("min_overlap", min_overlap, isinstance(min_overlap, (int, float)) and 0 < min_overlap <= 1,
                "a number in (0, 1]")
    bids, cids = sorted(base), sorted(candidate)
    if not bids or not cids:
        return []
    sb = [base[b] & shared for b in bids]
    sc = [candidate[c] & shared for c in cids]
    jac = np.zeros((len(bids), len(cids)))
    for i, x in enumerate(sb):
        if not x:
            continue
        for j, y in enumerate(sc):
            inter = len(x & y)
            if inter:
                jac[i, j] = inter / len(x | y)
    rows, cols = linear_sum_assignment(-jac)
    return [(bids[i], cids[j], float(jac[i, j])) for i, j in zip(rows, cols) if jac[i, j] >= min_overlap]


@dataclass
class RunView:
    """What a comparison reads from one run."""

    name: str
    path: Path
    manifest: dict
    frame: Any            # example_id, text, label, pred, correct, confidence (run order)
    labels: list[str]
    clusters: dict[int, set] = field(default_factory=dict)     # cluster id -> failing example ids
    cluster_names: dict[int, str] = field(default_factory=dict)
    types: Any = None     # example_id, error_type, severity, status (non-rejected labels), or None without a store
    key: str = ""


def align(base: RunView, cand: RunView) -> tuple[np.ndarray, list[str]]:
    """Positions of the base's examples in the candidate (base order), and notes. DataError when the runs are not
    over the same eval set: other example ids, or the same ids with other texts or gold labels."""
    import pandas as pd

    b_ids, c_ids = base.frame["example_id"], cand.frame["example_id"]
    pos = pd.Index(c_ids).get_indexer(b_ids)
    only_base = int((pos < 0).sum())
    only_cand = len(c_ids) - (len(b_ids) - only_base)
    if only_base or only_cand:
        examples = list(b_ids[pos < 0][:3]) or list(set(c_ids) - set(b_ids))[:3]
        raise DataError(f"{cand.path}: not the same eval set as {base.path}: {only_base} of the base's "
                        f"{len(b_ids)} example ids are missing from it and {only_cand} of its {len(c_ids)} are not in "
                        f"the base (e.g. {preview(examples, 3)}); compare runs over the same eval set, matched by "
                        "example id.")
    notes = []
    texts_a = base.frame["text"].to_numpy()
    texts_b = cand.frame["text"].to_numpy()[pos]
    has_text = (texts_a != "") & (texts_b != "")
    differ = has_text & (texts_a != texts_b)
    if differ.any():
        first = b_ids.iat[int(np.flatnonzero(differ)[0])]
        raise DataError(f"{cand.path}: {int(differ.sum())} examples have the same id as in {base.path} but another "
                        f"text (e.g. id {first!r}); compare runs over the same eval set.")
    gold_b = cand.frame["label"].to_numpy()[pos]
    differ = base.frame["label"].to_numpy() != gold_b
    if differ.any():
        first = b_ids.iat[int(np.flatnonzero(differ)[0])]
        raise DataError(f"{cand.path}: {int(differ.sum())} examples have another gold label than in {base.path} "
                        f"(e.g. id {first!r}); compare runs over the same labels (a relabeled eval set is a new "
                        "eval set: re-run the baseline on it).")
    sha_a = (base.manifest.get("data") or {}).get("sha256")
    sha_b = (cand.manifest.get("data") or {}).get("sha256")
    if sha_a and sha_b and sha_a != sha_b:
        notes.append(f"the data files of {base.name} and {cand.name} differ (sha256), but every example id, text and "
                     "gold label matches")
    if base.manifest.get("task", "classification") != cand.manifest.get("task", "classification"):
        raise DataError(f"{cand.path}: a {cand.manifest.get('task')} run cannot be compared with "
                        f"{base.path}, a {base.manifest.get('task')} run.")
    return pos, notes


def _labels_union(*views: RunView) -> list[str]:
    order: list[str] = []
    for v in views:
        for label in list(v.labels) + sorted(set(v.frame["label"]) | set(v.frame["pred"])):
            if label not in order:
                order.append(label)
    return order


def _f(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) or math.isinf(v) else round(v, 6)


def _interval(ci) -> list[float]:
    return [_f(ci[0]), _f(ci[1])]


def _significant(ci) -> bool:
    return bool(ci[0] > 0 or ci[1] < 0)


def compare_pair(base: RunView, cand: RunView, *, n_resamples: int = 1000, seed: int = 0, level: float = LEVEL,
                 min_overlap: float = MIN_OVERLAP, labels: list[str] | None = None):
    """(comparison dict, examples DataFrame) of a candidate against the baseline."""
    import pandas as pd

    pos, notes = align(base, cand)
    labels = labels or _labels_union(base, cand)
    index = {label: i for i, label in enumerate(labels)}
    k = len(labels)
    b, c = base.frame, cand.frame.iloc[pos].reset_index(drop=True)
    t = b["label"].map(index).to_numpy(dtype=np.int64)
    pa = b["pred"].map(index).to_numpy(dtype=np.int64)
    pb = c["pred"].map(index).to_numpy(dtype=np.int64)
    boot = paired_bootstrap(t, pa, pb, k, n_resamples=n_resamples, seed=seed, level=level)
    overall = {}
    for name in OVERALL:
        ci = boot["ci"][name]
        overall[name] = {"base": _f(boot["a"][name]), "candidate": _f(boot["b"][name]),
                         "delta": _f(boot["b"][name] - boot["a"][name]), "ci": _interval(ci),
                         "significant": _significant(ci)}
    per_class = []
    for i, label in enumerate(labels):
        row = {"label": label, "support": int(boot["a"]["support"][i])}
        for name in PER_CLASS:
            ci = boot["ci"][name][i]
            row[name] = {"base": _f(boot["a"][name][i]), "candidate": _f(boot["b"][name][i]),
                         "delta": _f(boot["b"][name][i] - boot["a"][name][i]), "ci": _interval(ci),
                         "significant": _significant(ci)}
        per_class.append(row)

    ca, cb = b["correct"].to_numpy(bool), c["correct"].to_numpy(bool)
    status = np.select([~ca & cb, ca & ~cb, ~ca & ~cb], ["fixed", "broken", "still_failing"], "still_correct")
    examples = pd.DataFrame({
        "candidate": cand.name, "example_id": b["example_id"].to_numpy(), "status": status,
        "label": b["label"].to_numpy(), "base_pred": b["pred"].to_numpy(), "candidate_pred": c["pred"].to_numpy(),
        "base_confidence": b["confidence"].to_numpy(dtype=np.float64),
        "candidate_confidence": c["confidence"].to_numpy(dtype=np.float64),
        "base_error_type": _types_of(base, b["example_id"]), "candidate_error_type": _types_of(cand, b["example_id"]),
        "base_cluster": _clusters_of(base, b["example_id"]), "candidate_cluster": _clusters_of(cand, b["example_id"]),
        "text": b["text"].to_numpy(),
    })
    counts = {s: int((status == s).sum()) for s in STATUSES}
    still = examples[examples["status"] == "still_failing"]
    counts["still_failing_other_pred"] = int((still["base_pred"] != still["candidate_pred"]).sum())

    if base.types is not None and base.types.empty and cand.types is not None and not cand.types.empty:
        notes.append(f"the baseline {base.name} has no labels, so every error type counts 0 failures before")
    result = {
        "base": base.name, "candidate": cand.name, "n": int(len(b)), "labels": labels, "notes": notes,
        "overall": overall, "per_class": per_class, "mcnemar": mcnemar(ca, cb), "counts": counts,
        "examples": {s: _example_list(examples[examples["status"] == s]) for s in ("fixed", "broken", "still_failing")},
        "error_types": _error_type_changes(base, cand, examples),
        "clusters": _cluster_changes(base, cand, examples, min_overlap),
    }
    return result, examples


def _types_of(view: RunView, ids) -> np.ndarray:
    if view.types is None or view.types.empty:
        return np.full(len(ids), None, dtype=object)
    m = dict(zip(view.types["example_id"], view.types["error_type"]))
    return np.array([m.get(i) for i in ids], dtype=object)


def _clusters_of(view: RunView, ids) -> np.ndarray:
    m = {e: c for c, members in view.clusters.items() for e in members}
    return np.array([m.get(i, -1) for i in ids], dtype=np.int64)


def _example_list(rows) -> list[dict]:
    out = []
    for r in rows.itertuples(index=False):
        out.append({"example_id": r.example_id, "label": r.label, "base_pred": r.base_pred,
                    "candidate_pred": r.candidate_pred, "base_confidence": _f(r.base_confidence),
                    "candidate_confidence": _f(r.candidate_confidence), "base_error_type": r.base_error_type,
                    "candidate_error_type": r.candidate_error_type,
                    "text": _snippet(r.text)})
    return out


def _snippet(text: Any, limit: int = TEXT_LIMIT) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _error_type_changes(base: RunView, cand: RunView, examples) -> list[dict] | None:
    """Failures per error type before and after, from the labels store (None without one)."""
    if base.types is None or cand.types is None:
        return None
    fail_a = examples["status"].isin(["fixed", "still_failing"])
    fail_b = examples["status"].isin(["broken", "still_failing"])
    ids = examples["example_id"]
    ta = base.types.set_index("example_id")
    tb = cand.types.set_index("example_id")
    severity = {**dict(zip(base.types["error_type"], base.types["severity"])),
                **dict(zip(cand.types["error_type"], cand.types["severity"]))}
    a_type = ids.map(ta["error_type"]) if len(ta) else ids.map({})
    a_status = ids.map(ta["status"]) if len(ta) else ids.map({})
    b_type = ids.map(tb["error_type"]) if len(tb) else ids.map({})
    b_status = ids.map(tb["status"]) if len(tb) else ids.map({})
    names = sorted(set(a_type.dropna()) | set(b_type.dropna()), key=str.casefold)
    labeled_b = bool(len(tb))  # a candidate nobody labeled (or applied a taxonomy to) has no "after" counts
    out = []
    for name in names:
        in_a = (a_type == name) & (a_status == "accepted") & fail_a
        in_b = (b_type == name) & (b_status == "accepted") & fail_b
        pend_b = (b_type == name) & (b_status == "pending") & fail_b
        before, after = int(in_a.sum()), int(in_b.sum()) + int(pend_b.sum())
        out.append({"name": name, "severity": severity.get(name), "base": before,
                    "fixed": int((in_a & (examples["status"] == "fixed")).sum()),
                    "still_failing": int((in_a & (examples["status"] == "still_failing")).sum()),
                    "candidate": int(in_b.sum()) if labeled_b else None,
                    "candidate_suggested": int(pend_b.sum()) if labeled_b else None,
                    "delta": after - before if labeled_b else None})
    out.sort(key=lambda r: (-max(r["base"], (r["candidate"] or 0) + (r["candidate_suggested"] or 0)),
                            r["name"].casefold()))
    return out


def _cluster_changes(base: RunView, cand: RunView, examples, min_overlap: float) -> dict:
    if not base.clusters or not cand.clusters:
        missing = [v.name for v in (base, cand) if not v.clusters]
        return {"available": False, "reason": f"no error clusters in {', '.join(missing)} (not clustered, or the "
                "clustering found none)", "min_overlap": min_overlap,
                "persisted": [], "vanished": [], "appeared": []}
    status = dict(zip(examples["example_id"], examples["status"]))
    shared = {e for e, s in status.items() if s == "still_failing"}
    pairs = match_clusters(base.clusters, cand.clusters, shared, min_overlap=min_overlap)
    cand_of = {e: c for c, members in cand.clusters.items() for e in members}
    base_of = {e: c for c, members in base.clusters.items() for e in members}

    def top(members, where, names):
        counts: dict[int, int] = {}
        for e in members:
            c = where.get(e)
            if c is not None:
                counts[c] = counts.get(c, 0) + 1
        best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        return [{"cluster_id": int(c), "name": names.get(c, ""), "count": int(n)} for c, n in best]

    persisted, matched_b, matched_c = [], set(), set()
    for bid, cid, overlap in pairs:
        matched_b.add(bid)
        matched_c.add(cid)
        members = base.clusters[bid]
        persisted.append({"base_id": bid, "base_name": base.cluster_names.get(bid, ""), "candidate_id": cid,
                          "candidate_name": cand.cluster_names.get(cid, ""), "base_size": len(members),
                          "candidate_size": len(cand.clusters[cid]), "overlap": round(overlap, 4),
                          "fixed": sum(status.get(e) == "fixed" for e in members),
                          "broken": sum(status.get(e) == "broken" for e in cand.clusters[cid])})
    vanished = []
    for bid in sorted(set(base.clusters) - matched_b):
        members = base.clusters[bid]
        fixed = sum(status.get(e) == "fixed" for e in members)
        vanished.append({"cluster_id": bid, "name": base.cluster_names.get(bid, ""), "size": len(members),
                         "fixed": fixed, "share_fixed": round(fixed / len(members), 4) if members else 0.0,
                         "now_in": top(members, cand_of, cand.cluster_names)})
    appeared = []
    for cid in sorted(set(cand.clusters) - matched_c):
        members = cand.clusters[cid]
        broken = sum(status.get(e) == "broken" for e in members)
        appeared.append({"cluster_id": cid, "name": cand.cluster_names.get(cid, ""), "size": len(members),
                         "broken": broken, "share_broken": round(broken / len(members), 4) if members else 0.0,
                         "was_in": top(members, base_of, base.cluster_names)})
    persisted.sort(key=lambda r: -r["base_size"])
    vanished.sort(key=lambda r: -r["size"])
    appeared.sort(key=lambda r: -r["size"])
    return {"available": True, "min_overlap": min_overlap, "persisted": persisted, "vanished": vanished,
            "appeared": appeared}


GATE_ALPHA = 0.05
GATED_OVERALL = ("accuracy", "macro_f1")


def worse_p(broken: int, fixed: int) -> float:
    """One-sided exact binomial p of `broken` newly failing against `fixed` newly right examples (the discordant
    pairs of McNemar's test): how likely this many more breaks than fixes are if the change did nothing."""
    from scipy import stats

    n = int(broken) + int(fixed)
    return 1.0 if n == 0 else float(stats.binomtest(int(broken), n, 0.5, alternative="greater").pvalue)


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


@dataclass
class Report:
    doc: dict                 # the JSON report
    examples: Any             # one row per (candidate, example): status, predictions, error types, clusters, text


def series(doc: dict) -> dict:
    """The ablation table: one row per statistic (overall, per class F1, failures per error type, fixed/broken),
    one value per run (the baseline first), with the change against the baseline and its interval."""
    comps = doc["comparisons"]
    run_names = [r["name"] for r in doc["runs"]]
    rows = []

    def add(section, name, metric, base, values, deltas=None, cis=None, sig=None, unit="rate"):
        rows.append({"section": section, "name": name, "metric": metric, "unit": unit, "values": [base] + values,
                     "deltas": [None] + (deltas if deltas is not None else [None] * len(values)),
                     "ci": [None] + (cis if cis is not None else [None] * len(values)),
                     "significant": [None] + (sig if sig is not None else [None] * len(values))})

    for metric in ("accuracy", "macro_f1", "weighted_f1"):
        cells = [c["overall"][metric] for c in comps]
        add("overall", metric.replace("_", " "), metric, cells[0]["base"], [x["candidate"] for x in cells],
            [x["delta"] for x in cells], [x["ci"] for x in cells], [x["significant"] for x in cells])
    for i, label in enumerate(comps[0]["labels"]):
        cells = [c["per_class"][i]["f1"] for c in comps]
        add("class", label, "f1", cells[0]["base"], [x["candidate"] for x in cells], [x["delta"] for x in cells],
            [x["ci"] for x in cells], [x["significant"] for x in cells])
    if all(c["error_types"] is not None for c in comps):
        names: list[str] = []
        for c in comps:
            for r in c["error_types"]:
                if r["name"] not in names:
                    names.append(r["name"])
        for name in names:
            found = [next((r for r in c["error_types"] if r["name"] == name), None) for c in comps]
            base = next((r["base"] for r in found if r is not None), 0)
            after = [None if r is not None and r["candidate"] is None else
                     (r["candidate"] + r["candidate_suggested"]) if r else 0 for r in found]
            add("error type", name, "failures", base, after, [None if a is None else a - base for a in after],
                unit="count")
    add("examples", "fixed", "fixed", None, [c["counts"]["fixed"] for c in comps], unit="count")
    add("examples", "broken", "broken", None, [c["counts"]["broken"] for c in comps], unit="count")
    add("examples", "McNemar p", "mcnemar_p", None, [_f(c["mcnemar"]["p_value"]) for c in comps], unit="p")
    return {"runs": run_names, "baseline": run_names[0], "rows": rows}


def series_frame(doc: dict):
    """The ablation table as a DataFrame: section, name, then one column per run (the baseline's title marked
    "(baseline)"), each candidate cell "value (±delta)"."""
    import pandas as pd

    s = doc["series"]
    titles = [f"{s['runs'][0]} (baseline)"] + s["runs"][1:]
    records = []
    for row in s["rows"]:
        rec = {"section": row["section"], "name": row["name"]}
        for j, title in enumerate(titles):
            rec[title] = format_cell(row, j)
        records.append(rec)
    return pd.DataFrame(records, columns=["section", "name"] + titles)


def format_cell(row: dict, j: int) -> str:
    value, delta, ci = row["values"][j], row["deltas"][j], row["ci"][j]
    unit = row["unit"]
    if value is None:
        return "–"
    if unit == "rate":
        text = f"{value:.1%}"
        if delta is not None:
            text += f" ({delta * 100:+.1f}"
            if ci is not None and ci[0] is not None:
                text += f" [{ci[0] * 100:+.1f}, {ci[1] * 100:+.1f}]"
            text += ")" + (" *" if row["significant"][j] else "")
        return text
    if unit == "p":
        return f"{value:.3g}"
    text = f"{int(value):,}"
    if delta is not None:
        text += f" ({delta:+d})"
    return text


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, (float, np.floating)):
        return _f(obj)
    if obj is not None and not isinstance(obj, (str, int, bool)):
        try:
            import pandas as pd

            if pd.isna(obj):
                return None
        except (TypeError, ValueError):
            pass
    return obj


def to_json(doc: dict) -> str:
    return json.dumps(_clean(doc), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


_MOVED = {"read_run": "stages.compare", "compare_runs": "stages.compare", "write_report": "compare_report",
          "to_markdown": "compare_report", "headline": "compare_report"}


def __getattr__(name: str):
    if name in _MOVED:  # moved in 0.2
        from erroranalysis._compat import moved_attribute

        return moved_attribute("compare", name, _MOVED[name])
    raise AttributeError(f"module 'erroranalysis.compare' has no attribute {name!r}")
