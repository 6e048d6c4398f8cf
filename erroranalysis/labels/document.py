"""The taxonomy document (docs/taxonomy.md) made from a run's example table: its error types with counts, the
classes and clusters they cover and exemplars, and every labeled example. A pure function over the table
(erroranalysis.stages.example_table makes it) and the store's error types; erroranalysis.stages.build_taxonomy
reads them for a run.
"""

from __future__ import annotations

import datetime as _dt
import math

from erroranalysis.core.validation import check_param
from erroranalysis.labels.fields import FLAGS
from erroranalysis.labels.taxonomy import FORMAT, SCHEMA_VERSION, labeled_rows


def taxonomy_document(table, error_types, run: dict, *, exemplars: int = 3, include_text: bool = True) -> dict:
    """The document for `table` (one row per example: label, pred, correct, confidence, loss, cluster_id,
    cluster_name, membership, the labels columns) and `error_types` (labels.ErrorType). `run` is the document's
    run section as far as the table does not say it: name, key, task, labels, model, data."""
    from erroranalysis import __version__

    check_param("exemplars", exemplars, isinstance(exemplars, int) and exemplars >= 0, "an integer >= 0")
    failures = ~table["correct"].astype(bool)
    n_fail = int(failures.sum())
    accepted = table["status"] == "accepted"
    labeled_failures = int((failures & accepted & (table["error_type_id"] >= 0)).sum())

    names = {et.id: et.name for et in error_types}
    types = []
    for et in error_types:
        rows = table[table["error_type_id"] == et.id]
        acc = rows[rows["status"] == "accepted"]
        acc_fail = acc[~acc["correct"].astype(bool)]
        by_label = acc["label"].value_counts()
        by_pred = acc["pred"].value_counts()
        conf = acc_fail.groupby(["label", "pred"]).size().sort_values(ascending=False)
        clusters = acc[acc["cluster_id"] >= 0].groupby(["cluster_id", "cluster_name"]).size() \
            .sort_values(ascending=False)
        types.append({
            "id": int(et.id),
            "name": et.name,
            "definition": et.definition,
            "severity": et.severity,
            "parent": names.get(et.parent_id),
            "count": int(len(acc)),
            "failures": int(len(acc_fail)),
            "suggested": int((rows["status"] == "pending").sum()),
            "share_of_failures": _round(len(acc_fail) / n_fail) if n_fail else 0.0,
            "per_class": {
                "by_label": {str(k): int(v) for k, v in by_label.items()},
                "by_pred": {str(k): int(v) for k, v in by_pred.items()},
                "confusions": [{"label": str(lab), "pred": str(pred), "count": int(c)}
                               for (lab, pred), c in conf.items()],
            },
            "clusters": [{"cluster_id": int(cid), "name": str(name), "count": int(c)}
                         for (cid, name), c in clusters.items()],
            "exemplars": [_example_item(r, include_text=True) for _, r in _exemplar_rows(acc, exemplars).iterrows()],
            "created": et.created,
            "created_by": et.created_by,
        })
    types.sort(key=lambda t: (-t["count"], t["name"].lower()))

    listed = labeled_rows(table)
    assignments = []
    cols = ["example_id", "label", "pred", "correct", "confidence", "loss", "error_type", "error_type_id", "source",
            "status", "cluster_id", "note", "updated", "updated_by", *FLAGS] + (["text"] if include_text else [])
    for r in listed[cols].to_dict("records"):
        item = _example_item(r, include_text=include_text)
        item.update({
            "error_type": r["error_type"] or None,
            "error_type_id": int(r["error_type_id"]) if r["error_type_id"] >= 0 else None,
            "source": r["source"] or None,
            "status": r["status"] or None,
            "cluster_id": int(r["cluster_id"]),
            "flags": [f for f in FLAGS if bool(r[f])],
            "note": r["note"] or None,
            "updated": r["updated"] or None,
            "updated_by": r["updated_by"] or None,
        })
        assignments.append(item)

    return {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "tool": {"name": "erroranalysis", "version": __version__},
        "run": {
            **run,
            "n_examples": int(len(table)),
            "n_failures": n_fail,
            "accuracy": _round(1 - n_fail / len(table)) if len(table) else None,
        },
        "summary": {
            "n_error_types": len(types),
            "n_assigned": int((accepted & (table["error_type_id"] >= 0)).sum()),
            "n_labeled_failures": labeled_failures,
            "n_unlabeled_failures": n_fail - labeled_failures,
            "share_of_failures_labeled": _round(labeled_failures / n_fail) if n_fail else 0.0,
            "n_suggested": int((table["status"] == "pending").sum()),
            "flags": {f: int(table[f].sum()) for f in FLAGS},
        },
        "error_types": types,
        "assignments": assignments,
    }


def _exemplar_rows(rows, k: int):
    if k == 0 or rows.empty:
        return rows.head(0)
    order = rows.assign(_m=rows["membership"].fillna(-1.0), _c=rows["confidence"].fillna(-1.0))
    return order.sort_values(["_m", "_c", "example_id"], ascending=[False, False, True]).head(k)


def _example_item(r, *, include_text: bool) -> dict:
    item = {
        "example_id": str(r["example_id"]),
        "label": str(r["label"]),
        "pred": str(r["pred"]),
        "correct": bool(r["correct"]),
        "confidence": _num(r.get("confidence")),
        "loss": _num(r.get("loss")),
    }
    if include_text:
        item["text"] = "" if r.get("text") is None else str(r["text"])
    return item


def _num(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) or math.isinf(value) else _round(value)


def _round(value: float) -> float:
    return round(float(value), 6)
