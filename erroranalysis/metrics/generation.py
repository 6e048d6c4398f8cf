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
    return finish_checks(check_counts(preds, labels), labels, max_new_tokens)


def check_counts(preds, labels: list[str], offset: int = 0) -> dict:
    """Everything "output_checks" needs from some rows (rows `offset`.. of the whole), as counts, exact sums and
    a few rows: `merge_checks` of the counts of any split of the rows then `finish_checks` gives
    `generation_metrics` of all of them."""
    passed = preds["correct"].to_numpy(dtype=bool)
    checks = [c for c in preds.columns if c.startswith("check_") and not c.endswith("_reason")]
    out: dict[str, Any] = {"n": len(passed), "passed": int(passed.sum()), "columns": list(preds.columns),
                           "checks": {c: _check_pair(preds[c]) for c in checks}, "labels": {}}
    gold = preds["label"].astype(str).to_numpy()
    for label in labels:
        rows = gold == label
        if rows.any():
            out["labels"][label] = [int(rows.sum()), int(passed[rows].sum()),
                                    {c: _check_pair(preds[c][rows]) for c in checks}]
    if "pred" in preds:
        out["unparseable"] = int((preds["pred"].astype(str) == UNPARSEABLE).sum())
    lengths = _lengths(preds)
    stops = preds["stop_reason"].astype(str).to_numpy() if "stop_reason" in preds else None
    if stops is not None:
        out["stops"] = {stop: [int((stops == stop).sum()), int(passed[stops == stop].sum()),
                               *(_sum(lengths[stops == stop]) if lengths is not None else ())]
                        for stop in set(stops.tolist())}
    if lengths is not None:
        finite = lengths[np.isfinite(lengths)]
        values, counts = np.unique(finite, return_counts=True)
        out["lengths"] = {"values": values, "counts": counts, "all": _sum(lengths), "passed": _sum(lengths[passed]),
                          "failed": _sum(lengths[~passed]),
                          "by_length": int((stops == "length").sum()) if stops is not None else None}
    if "failure_reason" in preds:
        out["reasons"] = _reason_counts(preds, passed, offset)
    columns = [c for c in GROUP_COLUMNS if c in preds]
    if columns:
        keys = preds[columns].astype(str).agg("\x1f".join, axis=1).to_numpy()
        out["groups"] = {key: [int((keys == key).sum()), int(passed[keys == key].sum()),
                               {c: _check_pair(preds[c][keys == key]) for c in checks}]
                         for key in set(keys.tolist())}
    out["loss"] = {c: [_sum(v), _sum(v[passed]), _sum(v[~passed])] for c in ("reference_loss", "output_loss")
                   if c in preds for v in [preds[c].to_numpy(dtype=np.float64)]}
    if "low_loss_failure" in preds:
        low = np.flatnonzero(preds["low_loss_failure"].to_numpy(dtype=bool))
        loss = preds["reference_loss"].to_numpy(dtype=np.float64)[low]
        ids = preds["example_id"].astype(str).to_numpy()[low]
        out["low"] = [len(low), _lowest([(float(x), offset + int(r), i) for x, r, i in zip(loss, low, ids)])]
    return out


def _check_pair(values) -> list[int]:
    """[rows the check applied to, rows it passed]."""
    applied, ok = _applied_passed(values)
    return [int(applied.sum()), int(ok.sum())]


def _sum(values) -> list:
    """[exact sum, count] of the finite values."""
    from erroranalysis.core.counted import exact_sum

    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    return [exact_sum(values), int(values.size)]


def _lowest(items: list, limit: int = 20) -> list:
    """The `limit` (loss, row, id) items of lowest loss, ties and NaN losses after, in row order."""
    return sorted(items, key=lambda x: (x[0] != x[0], x[0] if x[0] == x[0] else 0.0, x[1]))[:limit]


def _reason_counts(preds, passed: np.ndarray, offset: int) -> dict:
    """{reason category: [failing rows, first row failing that way alone, its exemplar, first row, its exemplar]}
    over the failing rows; a reason that only repeats another failing check's (REPEATS) is not counted."""
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
    out = {}
    for c in np.unique(codes).tolist():
        mine = codes == c
        first_alone = int(rows[mine & alone][0]) if (mine & alone).any() else None
        first = int(rows[mine][0])
        out[str(names[c])] = [int(mine.sum()), *_row(preds, first_alone, offset), *_row(preds, first, offset)]
    return out


def failure_modes(preds, passed: np.ndarray, top: int = 15) -> list[dict]:
    """The failing rows per reason category (the part of a check's reason before its parentheses), most frequent
    first, each with the share of failures and an exemplar (a row that fails that way alone when there is one). A
    reason that only repeats another failing check's (REPEATS) is not counted."""
    return _modes(_reason_counts(preds, passed, 0), int((~passed).sum()), top)


def _modes(reasons: dict, failed: int, top: int) -> list[dict]:
    order = sorted(reasons, key=lambda r: (-reasons[r][0], r))[:top]
    return [{"reason": r, "count": m, "share_of_failures": _ratio(m, failed),
             "exemplar": alone if alone_row is not None else first}
            for r in order for m, alone_row, alone, _, first in [reasons[r]]]


def _row(preds, row: int | None, offset: int) -> tuple:
    return (None, None) if row is None else (offset + row, _exemplar(preds, row))


def merge_checks(a: dict, b: dict) -> dict:
    """The counts of the rows of `a` and `b` together (any order gives the same)."""
    out = {"n": a["n"] + b["n"], "passed": a["passed"] + b["passed"], "columns": a["columns"],
           "checks": {c: _add(a["checks"][c], b["checks"][c]) for c in a["checks"]},
           "labels": _merge_keyed(a["labels"], b["labels"]), "loss": {c: [_add(x, y) for x, y in
                                                                        zip(a["loss"][c], b["loss"][c])]
                                                                     for c in a["loss"]}}
    if "unparseable" in a:
        out["unparseable"] = a["unparseable"] + b["unparseable"]
    if "stops" in a:
        out["stops"] = {s: _add(a["stops"].get(s), b["stops"].get(s)) for s in {**a["stops"], **b["stops"]}}
    if "lengths" in a:
        x, y = a["lengths"], b["lengths"]
        values, inverse = np.unique(np.concatenate([x["values"], y["values"]]), return_inverse=True)
        out["lengths"] = {"values": values, "counts": np.bincount(inverse, np.concatenate([x["counts"], y["counts"]]),
                                                                   len(values)).astype(np.int64),
                          **{key: _add(x[key], y[key]) for key in ("all", "passed", "failed", "by_length")}}
    if "reasons" in a:
        out["reasons"] = {r: _first_rows(a["reasons"].get(r), b["reasons"].get(r))
                          for r in {**a["reasons"], **b["reasons"]}}
    if "groups" in a:
        out["groups"] = _merge_keyed(a["groups"], b["groups"])
    if "low" in a:
        out["low"] = [a["low"][0] + b["low"][0], _lowest(a["low"][1] + b["low"][1])]
    return out


def _add(x, y):
    """Sum of two counts, [count, ...] lists or {name: [count, ...]} dicts; None is nothing."""
    if x is None or y is None:
        return y if x is None else x
    if isinstance(x, dict):
        return {key: _add(x.get(key), y.get(key)) for key in {**x, **y}}
    if isinstance(x, list):
        return [_add(u, v) for u, v in zip(x, y)]
    return x + y


def _merge_keyed(a: dict, b: dict) -> dict:
    return {key: _add(a.get(key), b.get(key)) for key in {**a, **b}}


def _first_rows(x: list | None, y: list | None) -> list:
    if x is None or y is None:
        return y if x is None else x
    alone = min((v for v in (x[1:3], y[1:3]) if v[0] is not None), default=[None, None], key=lambda v: v[0])
    first = min(x[3:5], y[3:5], key=lambda v: v[0])
    return [x[0] + y[0], *alone, *first]


def finish_checks(counts: dict, labels: list[str], max_new_tokens: int | None = None, top: int = 15) -> dict:
    """`generation_metrics` from the merged `check_counts`."""
    n, n_passed = counts["n"], counts["passed"]
    out: dict[str, Any] = {"n": n, "n_passed": n_passed, "n_failed": n - n_passed, "pass_rate": _ratio(n_passed, n)}
    # a signal that applied to no row (shape beside json) is no check of this run
    checks = [c for c, (applied, _) in counts["checks"].items() if not (c[len("check_"):] in SIGNALS and not applied)]
    out["per_check"] = [{"check": c[len("check_"):], "applied": applied, "passed": ok, "failed": applied - ok,
                         "pass_rate": _ratio(ok, applied)}
                        for c in checks for applied, ok in [counts["checks"][c]]]
    out["per_label"] = [{"label": label, "n": m, "pass_rate": _ratio(ok, m),
                         "checks": {c[len("check_"):]: _ratio(per[c][1], per[c][0]) for c in checks}}
                        for label in labels if label in counts["labels"] for m, ok, per in [counts["labels"][label]]]
    if "unparseable" in counts:
        out["unparseable"] = counts["unparseable"]
    lengths = counts.get("lengths")
    if "stops" in counts:
        out["per_stop_reason"] = [{"stop_reason": stop, "n": m, "pass_rate": _ratio(ok, m),
                                   **({"mean_output_tokens": _exact_mean(*rest)} if lengths is not None else {})}
                                  for stop in sorted(counts["stops"]) for m, ok, *rest in [counts["stops"][stop]]]
    if lengths is not None:
        out["output_length"] = _length_summary(lengths, max_new_tokens)
    if "reasons" in counts:
        out["failure_reasons"] = _modes(counts["reasons"], n - n_passed, top)
    out["group_columns"] = [c for c in GROUP_COLUMNS if c in counts["columns"]]
    groups = counts.get("groups") or {}
    out["per_group"] = [{"group": dict(zip(out["group_columns"], key.split("\x1f"))), "n": m, "n_passed": ok,
                         "pass_rate": _ratio(ok, m),
                         "checks": {c[len("check_"):]: _ratio(per[c][1], per[c][0]) for c in checks if per[c][0]}}
                        for key in sorted(groups) for m, ok, per in [groups[key]]]
    summary: dict[str, Any] = {c: {"mean": _exact_mean(*every), "mean_passed": _exact_mean(*ok),
                                   "mean_failed": _exact_mean(*bad)}
                               for c, (every, ok, bad) in counts["loss"].items()}
    if "low" in counts:
        summary["low_loss_failures"] = counts["low"][0]
        summary["low_loss_failure_ids"] = [item[2] for item in counts["low"][1]]
    out["loss"] = summary
    return out


def _length_summary(lengths: dict, limit: int | None) -> dict:
    from erroranalysis.core.counted import quantiles as counted_quantiles

    values, counts = lengths["values"], lengths["counts"]
    quantiles = counted_quantiles(values, counts, np.true_divide([50, 95], 100)) if values.size else [None, None]
    return {"mean": _exact_mean(*lengths["all"]), "median": _float(quantiles[0]), "p95": _float(quantiles[1]),
            "max": _float(values.max()) if values.size else None, "mean_passed": _exact_mean(*lengths["passed"]),
            "mean_failed": _exact_mean(*lengths["failed"]), "limit": limit,
            "at_limit": int(counts[values >= limit].sum()) if limit else None,
            "stopped_by_length": lengths["by_length"]}


def _exact_mean(total, count: int) -> float | None:
    return float(total / count) if count else None


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


def _float(value) -> float | None:
    return None if value is None else float(value)


def _ratio(num, den):
    return float(num) / float(den) if den else None


def adjust_metrics(result: dict, preds, labels: list[str], max_new_tokens: int | None = None, *,
                   checks: dict | None = None) -> dict:
    """metrics.json for a generation run: macro averages over the real classes only (not "unparseable", a
    predicted-only column of the confusion matrix), plus the "output_checks" section. `overall.n_failures` counts the
    examples that failed a check (`correct` false: what is clustered, labeled and exported, as in every run);
    `max_new_tokens` is the generation's limit when the run knows it; `checks`: the merged `check_counts` of the
    rows (with gold labels less "unparseable"), in place of `preds`;
    `overall.n_label_errors` counts label != pred, the complement of `accuracy`."""
    gold_labels = [label for label in labels if label != UNPARSEABLE]
    overall = result.setdefault("overall", {})
    if UNPARSEABLE in labels and result.get("per_class"):
        rows = [c for c in result["per_class"] if c["label"] in gold_labels]
        for name in ("precision", "recall", "f1"):
            overall[f"macro_{name}"] = float(np.mean([c[name] for c in rows])) if rows else None
        overall["macro_excludes"] = [UNPARSEABLE]
    result["output_checks"] = finish_checks(checks, gold_labels, max_new_tokens) if checks is not None else \
        generation_metrics(preds, gold_labels, max_new_tokens)
    result["output_checks"]["label_column"] = UNPARSEABLE in labels  # else the made-up pass/fail "labels"
    overall["n_label_errors"] = overall.get("n_failures")
    overall["n_failures"] = result["output_checks"]["n_failed"]
    return result


def pooled_filters(checks: dict) -> int:
    """How many filters a run's rows pool (a table with a `filter` column: lm-eval writes each document once per
    filter); 0 or 1: none, so one pass rate over the rows means something."""
    return len({g["group"].get("filter") for g in checks.get("per_group") or [] if "filter" in g["group"]})
