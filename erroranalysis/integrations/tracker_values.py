"""What goes to an experiment tracker, as key -> number and key -> table, from a run's documents (pure).

Keys are grouped under one prefix, which MLflow, W&B and TensorBoard each show as one section: `ea/accuracy`,
`ea/f1/<class>`, `ea/check/<check>` (a generation run's pass rates), `ea/type/<key>` (failures per error type).
An error type's key stays the same from one run to the next: its taxonomy label when labeled, else the id the
timeline matched it to across a training run's steps (T1, T2, ...); a cluster's size rank changes between runs,
so it is a column of the `ea/clusters` table, never a key (`ea/unkeyed_failures` counts the failures in clusters
without a key). The Trainer callback logs the same names under `eval_ea/` (`step_values`), which the Trainer's
integrations file under `eval/ea/...`.
"""

from __future__ import annotations

import re

PREFIX = "ea/"
OVERALL = ("accuracy", "macro_f1", "weighted_f1", "n_failures", "ece", "brier")
# The overall figures of each head (its metrics.json `overall`), logged beside the classifier's
OVERALL_BY_TASK = {
    "multilabel": ("subset_accuracy", "micro_f1", "macro_f1", "hamming_loss", "n_failures"),
    "regression": ("mae", "rmse", "r2", "n_failures"),
    "token-classification": ("micro_f1", "macro_f1", "token_accuracy", "n_error_spans", "n_failures"),
}


def safe(part) -> str:
    """One part of a key, in the characters every tracker takes (MLflow's: letters, digits, _ - . space); a "/"
    inside a class name would open a group of its own, so it becomes "_" too."""
    return re.sub(r"[^0-9A-Za-z_\-. ]", "_", str(part)) or "_"


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def run_values(metrics: dict, clusters=None, types: dict | None = None, prefix: str = PREFIX) -> dict[str, float]:
    """A run's headline numbers: overall metrics, per class precision/recall/F1 (or output-check pass rates), and
    the failures of each error type (`types`: cluster id -> its stable key; clusters sharing a key add up)."""
    values = overall_values(metrics, prefix)
    checks = metrics.get("output_checks")
    if checks:
        if _number(checks.get("pass_rate")):
            values[prefix + "pass_rate"] = float(checks["pass_rate"])
        for c in checks.get("per_check") or []:
            if _number(c.get("pass_rate")):
                values[f"{prefix}check/{safe(c['check'])}"] = float(c["pass_rate"])
    for c in metrics.get("per_class") or []:
        for name in ("f1", "precision", "recall"):
            if _number(c.get(name)):
                values[f"{prefix}{name}/{safe(c['label'])}"] = float(c[name])
    if clusters is not None:
        types = types or {}
        values[prefix + "unkeyed_failures"] = 0.0
        for cid, size in zip(clusters["cluster_id"], clusters["size"]):
            key = f"{prefix}type/{safe(types[int(cid)])}" if int(cid) in types else prefix + "unkeyed_failures"
            values[key] = values.get(key, 0.0) + float(size)
        values[prefix + "clusters"] = float(len(clusters))
    return values


def overall_values(metrics: dict, prefix: str = PREFIX, task: str | None = None) -> dict[str, float]:
    """The overall figures of a run's metrics.json that its head has (`OVERALL_BY_TASK`, else `OVERALL`)."""
    overall = metrics.get("overall") or {}
    names = OVERALL_BY_TASK.get(task or metrics.get("task"), OVERALL)
    return {prefix + name: float(overall[name]) for name in names if _number(overall.get(name))}


def run_tables(metrics: dict, clusters=None, types: dict | None = None, prefix: str = PREFIX) -> dict:
    """The per-class table and the cluster table (its size rank `cluster_id` beside the stable `error_type` key,
    None where a cluster has none), as DataFrames."""
    import pandas as pd

    tables = {}
    per_class = metrics.get("per_class") or []
    if per_class:
        tables[prefix + "per_class"] = pd.DataFrame(
            [{k: c.get(k) for k in ("label", "precision", "recall", "f1", "support", "predicted")} for c in per_class])
    checks = (metrics.get("output_checks") or {}).get("per_check")
    if checks:
        tables[prefix + "output_checks"] = pd.DataFrame(checks)
    if clusters is not None and len(clusters):
        frame = clusters[[c for c in ("cluster_id", "name", "size", "kind") if c in clusters.columns]].copy()
        frame.insert(1, "error_type", [(types or {}).get(int(c)) for c in clusters["cluster_id"]])
        if "keywords" in clusters.columns:
            frame["keywords"] = [", ".join(map(str, k)) for k in clusters["keywords"]]
        tables[prefix + "clusters"] = frame.reset_index(drop=True)
    return tables


def step_values(doc: dict, step: int, prefix: str = PREFIX, *, raw_names: bool = False) -> dict[str, float]:
    """One step of a timeline (`build_timeline`): accuracy, macro F1, failures, per class F1 (a generation run:
    pass rates), the size of each error type present at the step (by its id across steps), new and gone types.
    `raw_names` keeps class and check names as they are (the Trainer's integrations clean names themselves)."""
    name = (lambda s: str(s)) if raw_names else safe
    row = next(r for r in doc["steps"] if r["step"] == step)
    values = {prefix + key: float(row[key]) for key in ("accuracy", "macro_f1", "n_failures") if _number(row.get(key))}
    if row.get("pass_rate") is not None or row.get("checks"):
        if _number(row.get("pass_rate")):
            values[prefix + "pass_rate"] = float(row["pass_rate"])
        for check, rate in (row.get("checks") or {}).items():
            if _number(rate):
                values[f"{prefix}check/{name(check)}"] = float(rate)
    else:
        for label, f1 in (row.get("per_class_f1") or {}).items():
            if _number(f1):
                values[f"{prefix}f1/{name(label)}"] = float(f1)
    present = 0
    for t in doc["types"]:
        size = next((s["size"] for s in t["steps"] if s["step"] == step), None)
        if size is not None:
            key = f"{prefix}type/{name(t.get('label') or t['type_id'])}"
            values[key] = values.get(key, 0.0) + float(size)
            present += 1
    values[prefix + "types"] = float(present)
    kinds = [e["kind"] for e in doc["events"] if e["step"] == step]
    values[prefix + "types_new"] = float(sum(k in ("appeared", "returned") for k in kinds))
    values[prefix + "types_gone"] = float(sum(k in ("fixed", "dissolved") for k in kinds))
    return values


def compare_values(doc: dict, prefix: str = PREFIX) -> dict[str, float]:
    """A comparison: per candidate, the change of each overall metric and of each class's F1, and the counts of
    fixed and broken examples (`ea/compare/<candidate>/...`)."""
    values = {}
    for comp in doc["comparisons"]:
        base = f"{prefix}compare/{safe(comp['candidate'])}/"
        for metric, m in comp["overall"].items():
            if _number(m.get("delta")):
                values[f"{base}delta/{safe(metric)}"] = float(m["delta"])
        for row in comp["per_class"]:
            if _number(row["f1"].get("delta")):
                values[f"{base}f1_delta/{safe(row['label'])}"] = float(row["f1"]["delta"])
        for status in ("fixed", "broken", "still_failing"):
            values[f"{base}{status}"] = float(comp["counts"][status])
    return values


def compare_tables(doc: dict, prefix: str = PREFIX) -> dict:
    import pandas as pd

    rows = [{"candidate": comp["candidate"], "label": r["label"], "support": r["support"],
             "f1_base": r["f1"]["base"], "f1_candidate": r["f1"]["candidate"], "f1_delta": r["f1"]["delta"],
             "significant": r["f1"]["significant"]} for comp in doc["comparisons"] for r in comp["per_class"]]
    return {prefix + "compare_per_class": pd.DataFrame(rows)} if rows else {}


def timeline_tables(doc: dict, prefix: str = PREFIX) -> dict:
    import pandas as pd

    rows = [{"type_id": t["type_id"], "label": t.get("label"), "name": t["name"], "steps": len(t["steps"]),
             "largest": max((s["size"] for s in t["steps"]), default=0), "story": t.get("story")} for t in doc["types"]]
    return {prefix + "types": pd.DataFrame(rows)} if rows else {}
