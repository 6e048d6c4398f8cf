"""Generation metrics: pass rates of the output checks, losses, and "low loss but failing" examples.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from erroranalysis.infer.output_checks import UNPARSEABLE
from erroranalysis.infer.output_signals import SIGNALS


def low_loss_failures(reference_loss: np.ndarray, passed: np.ndarray) -> np.ndarray:
    """Failing examples whose reference loss is at most the median reference loss of the passing ones (of all
    examples when none passes): the model finds the right answer likely, yet its output fails a check."""
    loss = np.asarray(reference_loss, dtype=np.float64)
    passed = np.asarray(passed, dtype=bool)
    finite = np.isfinite(loss)
    base = loss[finite & passed] if (finite & passed).any() else loss[finite]
    if base.size == 0:
        return np.zeros(len(loss), dtype=bool)
    return (~passed) & finite & (loss <= np.median(base))


def generation_metrics(preds, labels: list[str]) -> dict:
    """The "output_checks" section of metrics.json: pass rates overall, per checker, per label and per stop reason,
    the commonest failure reasons, and loss beside behaviour."""
    import pandas as pd

    passed = preds["correct"].to_numpy(dtype=bool)
    n = len(passed)
    out: dict[str, Any] = {"n": n, "n_passed": int(passed.sum()), "n_failed": int(n - passed.sum()),
                           "pass_rate": _ratio(passed.sum(), n)}
    per_check = []
    for column in preds.columns:
        if column.startswith("check_") and not column.endswith("_reason"):
            values = preds[column]
            applied = values.notna().to_numpy()
            if not applied.any() and column[len("check_"):] in SIGNALS:
                continue  # a signal that applied nowhere (shape beside json) is no check of this run
            ok = values.fillna(False).to_numpy(dtype=bool)
            per_check.append({"check": column[len("check_"):], "applied": int(applied.sum()),
                              "passed": int(ok.sum()), "pass_rate": _ratio(ok.sum(), applied.sum())})
    out["per_check"] = per_check
    gold = preds["label"].astype(str)
    per_label = []
    for label in labels:
        rows = (gold == label).to_numpy()
        if not rows.any():
            continue
        entry = {"label": label, "n": int(rows.sum()), "pass_rate": _ratio(passed[rows].sum(), rows.sum()),
                 "checks": {}}
        for check in per_check:
            column = preds[f"check_{check['check']}"][rows]
            applied = column.notna().to_numpy()
            entry["checks"][check["check"]] = _ratio(column.fillna(False).to_numpy(dtype=bool).sum(), applied.sum())
        per_label.append(entry)
    out["per_label"] = per_label
    if "pred" in preds:
        out["unparseable"] = int((preds["pred"].astype(str) == UNPARSEABLE).sum())
    if "stop_reason" in preds:
        out["per_stop_reason"] = [{"stop_reason": str(k), "n": int(v.size), "pass_rate": _ratio(v.sum(), v.size)}
                                  for k, v in pd.Series(passed).groupby(preds["stop_reason"].to_numpy())]
    if "failure_reason" in preds:
        reasons = preds.loc[~passed, "failure_reason"].astype(str).str.split("; ").explode()
        kinds = reasons.str.replace(r"\s*\(.*$", "", regex=True)
        counts = kinds.value_counts()
        out["failure_reasons"] = [{"reason": str(k), "count": int(v), "share_of_failures": _ratio(v, n - passed.sum())}
                                  for k, v in counts.head(15).items()]
    out["loss"] = _loss_summary(preds, passed)
    return out


def _loss_summary(preds, passed: np.ndarray) -> dict:
    def mean(values):
        values = np.asarray(values, dtype=np.float64)
        values = values[np.isfinite(values)]
        return float(values.mean()) if values.size else None

    summary: dict[str, Any] = {}
    for column in ("reference_loss", "output_loss"):
        if column in preds:
            values = preds[column].to_numpy(dtype=np.float64)
            summary[column] = {"mean": mean(values), "mean_passed": mean(values[passed]),
                               "mean_failed": mean(values[~passed])}
    if "low_loss_failure" in preds:
        low = preds["low_loss_failure"].to_numpy(dtype=bool)
        order = np.argsort(preds["reference_loss"].to_numpy(dtype=np.float64)[low], kind="stable")
        summary["low_loss_failures"] = int(low.sum())
        summary["low_loss_failure_ids"] = preds["example_id"].astype(str).to_numpy()[low][order][:20].tolist()
    return summary


def _ratio(num, den):
    return float(num) / float(den) if den else None


def adjust_metrics(result: dict, preds, labels: list[str]) -> dict:
    """metrics.json for a generation run: macro averages over the real classes only (not "unparseable", a
    predicted-only column of the confusion matrix), plus the "output_checks" section. `overall.n_failures` counts the
    examples that failed a check (`correct` false: what is clustered, labeled and exported, as in every run);
    `overall.n_label_errors` counts label != pred, the complement of `accuracy`."""
    gold_labels = [label for label in labels if label != UNPARSEABLE]
    overall = result.setdefault("overall", {})
    if UNPARSEABLE in labels and result.get("per_class"):
        rows = [c for c in result["per_class"] if c["label"] in gold_labels]
        for name in ("precision", "recall", "f1"):
            overall[f"macro_{name}"] = float(np.mean([c[name] for c in rows])) if rows else None
        overall["macro_excludes"] = [UNPARSEABLE]
    result["output_checks"] = generation_metrics(preds, gold_labels)
    overall["n_label_errors"] = overall.get("n_failures")
    overall["n_failures"] = result["output_checks"]["n_failed"]
    return result
