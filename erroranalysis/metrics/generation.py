"""Generation metrics: pass rates of the output checks, the failure modes with an exemplar each, stop reasons and
output lengths against the limit, losses and "low loss but failing" examples, and pass rates per task or filter.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from erroranalysis.infer.output_checks import UNPARSEABLE
from erroranalysis.infer.output_signals import SIGNALS

GROUP_COLUMNS = ("task", "filter")  # how sources group their rows (lm-eval: task and filter; Inspect: task)
# A reason that only repeats another check's failure in the same row (no JSON to validate because the output is
# not JSON): counted once, as the other check's.
# A reason that only repeats another failing check's: not counted again (a cut-off output's failing json check
# already says "cut off at max_new_tokens").
REPEATS = {"json_schema: no JSON to validate": "json", "length: cut off at max_tokens": "json"}
EXEMPLAR_CHARS = 300  # characters of an exemplar's output kept in metrics.json


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


def generation_metrics(preds, labels: list[str], max_new_tokens: int | None = None) -> dict:
    """The "output_checks" section of metrics.json: pass rates overall, per checker, per label, per stop reason and
    per group (task, filter), the failure modes with an exemplar each, output lengths against `max_new_tokens`
    (None: the limit is unknown), and loss beside behaviour."""
    passed = preds["correct"].to_numpy(dtype=bool)
    n = len(passed)
    out: dict[str, Any] = {"n": n, "n_passed": int(passed.sum()), "n_failed": int(n - passed.sum()),
                           "pass_rate": _ratio(passed.sum(), n)}
    per_check = []
    for column in _check_columns(preds):
        applied, ok = _applied_passed(preds[column])
        per_check.append({"check": column[len("check_"):], "applied": int(applied.sum()), "passed": int(ok.sum()),
                          "failed": int(applied.sum() - ok.sum()), "pass_rate": _ratio(ok.sum(), applied.sum())})
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
    lengths = _lengths(preds)
    if "stop_reason" in preds:
        out["per_stop_reason"] = _per_stop_reason(preds["stop_reason"].astype(str).to_numpy(), passed, lengths)
    if lengths is not None:
        out["output_length"] = output_length(lengths, passed, max_new_tokens,
                                             preds["stop_reason"].astype(str).to_numpy() if "stop_reason" in preds
                                             else None)
    if "failure_reason" in preds:
        out["failure_reasons"] = failure_modes(preds, passed)
    out["group_columns"] = [c for c in GROUP_COLUMNS if c in preds]
    out["per_group"] = per_group(preds, passed, out["group_columns"])
    out["loss"] = _loss_summary(preds, passed)
    return out


def _check_columns(preds) -> list[str]:
    """The run's check columns; a signal that applied to no row (shape beside json) is no check of this run."""
    return [c for c in preds.columns if c.startswith("check_") and not c.endswith("_reason")
            and not (c[len("check_"):] in SIGNALS and preds[c].isna().all())]


def _applied_passed(values) -> tuple[np.ndarray, np.ndarray]:
    return values.notna().to_numpy(), values.fillna(False).to_numpy(dtype=bool)


def _lengths(preds) -> np.ndarray | None:
    if "n_output_tokens" not in preds:
        return None
    return preds["n_output_tokens"].to_numpy(dtype=np.float64, na_value=np.nan)


def _per_stop_reason(stops: np.ndarray, passed: np.ndarray, lengths: np.ndarray | None) -> list[dict]:
    rows = []
    for stop in sorted(set(stops.tolist())):
        mask = stops == stop
        entry = {"stop_reason": stop, "n": int(mask.sum()), "pass_rate": _ratio(passed[mask].sum(), mask.sum())}
        if lengths is not None:
            entry["mean_output_tokens"] = _mean(lengths[mask])
        rows.append(entry)
    return rows


def output_length(lengths: np.ndarray, passed: np.ndarray, limit: int | None, stops: np.ndarray | None) -> dict:
    """Output lengths (`n_output_tokens`) beside the limit: quantiles, passing against failing, and how many
    outputs reached the limit (or, when the limit is unknown, stopped for length)."""
    finite = np.isfinite(lengths)
    values = lengths[finite]
    quantiles = np.percentile(values, [50, 95]) if values.size else [None, None]
    return {"mean": _mean(values), "median": _float(quantiles[0]), "p95": _float(quantiles[1]),
            "max": _float(values.max()) if values.size else None, "mean_passed": _mean(lengths[passed]),
            "mean_failed": _mean(lengths[~passed]), "limit": limit,
            "at_limit": int((values >= limit).sum()) if limit else None,
            "stopped_by_length": int((stops == "length").sum()) if stops is not None else None}


def failure_modes(preds, passed: np.ndarray, top: int = 15) -> list[dict]:
    """The failing rows per reason category (the part of a check's reason before its parentheses), most frequent
    first, each with the share of failures and an exemplar (a row that fails that way alone when there is one). A
    reason that only repeats another failing check's (REPEATS) is not counted."""
    import pandas as pd

    failing = np.flatnonzero(~passed)
    reasons = pd.Series(preds["failure_reason"].to_numpy(dtype=object)[failing], index=failing, dtype=object)
    kinds = reasons.astype(str).str.split("; ").explode().str.replace(r"\s*\(.*$", "", regex=True)
    codes, names = pd.factorize(kinds.fillna(""))  # one code per category: the rest is integer arithmetic
    rows = kinds.index.to_numpy(dtype=np.int64)
    keep = names.to_numpy()[codes] != ""
    for kind, check in REPEATS.items():
        if kind in set(names):
            keep &= ~((codes == names.get_loc(kind)) & _failing(preds, check)[rows])
    k = max(len(names), 1)
    pairs = np.unique(rows[keep] * k + codes[keep])  # (row, category) once each, by row
    rows, codes = pairs // k, pairs % k
    _, inverse, per_row = np.unique(rows, return_inverse=True, return_counts=True)
    alone = per_row[inverse] == 1  # the row fails this way only
    counts = np.bincount(codes, minlength=len(names))
    order = sorted((c for c in range(len(names)) if counts[c]), key=lambda c: (-counts[c], names[c]))[:top]
    out = []
    for c in order:
        mine = codes == c
        pick = rows[mine & alone][0] if (mine & alone).any() else rows[mine][0]
        out.append({"reason": str(names[c]), "count": int(counts[c]),
                    "share_of_failures": _ratio(counts[c], len(failing)), "exemplar": _exemplar(preds, int(pick))})
    return out


def category(reason: str) -> str:
    """A check's reason without its details: `json: not valid JSON (Expecting ...)` -> `json: not valid JSON`."""
    return re.sub(r"\s*\(.*$", "", reason, flags=re.S).strip()


def own_reasons(failure_reason, failed_checks: set[str]) -> list[str]:
    """The reasons of one row's `failure_reason` less those that only repeat a failed check's (REPEATS): what a
    person reads as the ways the output failed."""
    reasons = [r for r in str(failure_reason or "").split("; ") if r.strip()]
    return [r for r in reasons if REPEATS.get(category(r)) not in failed_checks]


def _failing(preds, check: str) -> np.ndarray:
    """Rows where check `check` applied and failed."""
    column = f"check_{check}"
    if column not in preds:
        return np.zeros(len(preds), dtype=bool)
    values = preds[column]
    return (values.notna() & ~values.fillna(True).astype(bool)).to_numpy(dtype=bool)


def _exemplar(preds, row: int) -> dict:
    output = str(preds["output"].iat[row]) if "output" in preds else str(preds["text"].iat[row])
    cut = output if len(output) <= EXEMPLAR_CHARS else output[: EXEMPLAR_CHARS - 1] + "…"
    return {"example_id": str(preds["example_id"].iat[row]), "output": cut,
            "failure_reason": str(preds["failure_reason"].iat[row])}


def per_group(preds, passed: np.ndarray, columns: list[str]) -> list[dict]:
    """Pass rates per value of the source's grouping columns together (lm-eval's task and filter), as lm-eval's
    own table lists them: the group, n, passed, pass rate and each applied check's pass rate."""
    if not columns:
        return []
    keys = preds[columns].astype(str).agg("\x1f".join, axis=1).to_numpy()
    checks = _check_columns(preds)
    rows = []
    for key in sorted(set(keys.tolist())):
        mask = keys == key
        entry = {"group": dict(zip(columns, key.split("\x1f"))), "n": int(mask.sum()),
                 "n_passed": int(passed[mask].sum()), "pass_rate": _ratio(passed[mask].sum(), mask.sum()),
                 "checks": {}}
        for column in checks:
            applied, ok = _applied_passed(preds[column][mask])
            if applied.any():
                entry["checks"][column[len("check_"):]] = _ratio(ok.sum(), applied.sum())
        rows.append(entry)
    return rows


def _mean(values) -> float | None:
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else None


def _float(value) -> float | None:
    return None if value is None else float(value)


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


def adjust_metrics(result: dict, preds, labels: list[str], max_new_tokens: int | None = None) -> dict:
    """metrics.json for a generation run: macro averages over the real classes only (not "unparseable", a
    predicted-only column of the confusion matrix), plus the "output_checks" section. `overall.n_failures` counts the
    examples that failed a check (`correct` false: what is clustered, labeled and exported, as in every run);
    `max_new_tokens` is the generation's limit when the run knows it;
    `overall.n_label_errors` counts label != pred, the complement of `accuracy`."""
    gold_labels = [label for label in labels if label != UNPARSEABLE]
    overall = result.setdefault("overall", {})
    if UNPARSEABLE in labels and result.get("per_class"):
        rows = [c for c in result["per_class"] if c["label"] in gold_labels]
        for name in ("precision", "recall", "f1"):
            overall[f"macro_{name}"] = float(np.mean([c[name] for c in rows])) if rows else None
        overall["macro_excludes"] = [UNPARSEABLE]
    result["output_checks"] = generation_metrics(preds, gold_labels, max_new_tokens)
    result["output_checks"]["label_column"] = UNPARSEABLE in labels  # else the made-up pass/fail "labels"
    overall["n_label_errors"] = overall.get("n_failures")
    overall["n_failures"] = result["output_checks"]["n_failed"]
    return result


def pooled_filters(checks: dict) -> int:
    """How many filters a run's rows pool (a table with a `filter` column: lm-eval writes each document once per
    filter); 0 or 1: none, so one pass rate over the rows means something."""
    return len({g["group"].get("filter") for g in checks.get("per_group") or [] if "filter" in g["group"]})
