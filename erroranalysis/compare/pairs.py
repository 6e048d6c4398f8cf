"""One baseline against one candidate: examples aligned by id, metric changes with intervals, fixed and broken
examples, error types and clusters matched across the two runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from erroranalysis.compare.stats import LEVEL, PER_CLASS, finite, mcnemar, paired_bootstrap
from erroranalysis.core.errors import DataError, preview
from erroranalysis.core.validation import check_param

FORMAT = "erroranalysis.compare"
SCHEMA_VERSION = 1
MIN_OVERLAP = 0.3
TEXT_LIMIT = 300
OVERALL = ("accuracy", "macro_f1", "weighted_f1", "macro_precision", "macro_recall")




STATUSES = ("fixed", "broken", "still_failing", "still_correct")


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
    notes += task_notes(base, cand)
    return pos, notes


def task_notes(base: RunView, cand: RunView) -> list[str]:
    """What a comparison of multi-label or regression runs means, or a DataError when it would compare two failure
    rules: each regression run's default failures are its own worst decile, another bound in each run."""
    task = base.manifest.get("task", "classification")
    if task == "regression":
        rules = [((v.manifest.get("task_params") or {}).get("tolerance"),
                  bool((v.manifest.get("task_params") or {}).get("relative_tolerance"))) for v in (base, cand)]
        if rules[0][0] is None or rules[0] != rules[1]:
            raise DataError(f"{cand.path}: regression runs are compared on one failure rule, but the tolerances are "
                            f"{rules[0][0]} and {rules[1][0]} (None: each run's own worst decile); run both with the "
                            "same --tolerance.")
        return ["regression runs: accuracy, fixed and broken count |error| within the shared --tolerance; the "
                "per-class rows are the gold's quantile bins"]
    if task == "multilabel":
        return ["multi-label runs: accuracy is the subset accuracy (fixed/broken: the whole label set right or "
                "wrong); the per-class rows are label sets, not single labels (see each run's metrics.json for "
                "per-label scores)"]
    return []


def labels_union(*views: RunView) -> list[str]:
    """Every class name of the runs: each run's own order first, then any label or prediction seen only in rows."""
    order: list[str] = []
    for v in views:
        for label in list(v.labels) + sorted(set(v.frame["label"]) | set(v.frame["pred"])):
            if label not in order:
                order.append(label)
    return order


def _interval(ci) -> list[float]:
    return [finite(ci[0]), finite(ci[1])]


def _significant(ci) -> bool:
    return bool(ci[0] > 0 or ci[1] < 0)


def compare_pair(base: RunView, cand: RunView, *, n_resamples: int = 1000, seed: int = 0, level: float = LEVEL,
                 min_overlap: float = MIN_OVERLAP, labels: list[str] | None = None):
    """(comparison dict, examples DataFrame) of a candidate against the baseline."""
    import pandas as pd

    pos, notes = align(base, cand)
    labels = labels or labels_union(base, cand)
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
        overall[name] = {"base": finite(boot["a"][name]), "candidate": finite(boot["b"][name]),
                         "delta": finite(boot["b"][name] - boot["a"][name]), "ci": _interval(ci),
                         "significant": _significant(ci)}
    per_class = []
    for i, label in enumerate(labels):
        row = {"label": label, "support": int(boot["a"]["support"][i])}
        for name in PER_CLASS:
            ci = boot["ci"][name][i]
            row[name] = {"base": finite(boot["a"][name][i]), "candidate": finite(boot["b"][name][i]),
                         "delta": finite(boot["b"][name][i] - boot["a"][name][i]), "ci": _interval(ci),
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
                    "candidate_pred": r.candidate_pred, "base_confidence": finite(r.base_confidence),
                    "candidate_confidence": finite(r.candidate_confidence), "base_error_type": r.base_error_type,
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
