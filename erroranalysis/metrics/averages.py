"""The rows a per-class table ends with, as `sklearn.metrics.classification_report` and seqeval's print them (pure):
`micro avg`, `macro avg`, `weighted avg`, and `samples avg` for a multi-label run, each with the total support.

A single-label run's come from its per-class rows (macro over the classes that occur in the gold or the
predictions, as scikit-learn's default labels; micro from the summed true positives, which for one label per example
equals accuracy); a multi-label run's from the averages metrics.json already holds; a token classifier's from
seqeval's entity scores in the run's span mode. A regression run's "classes" are bins of the gold value: none."""

from __future__ import annotations

AVERAGES = ("micro avg", "macro avg", "weighted avg")
MEASURES = ("precision", "recall", "f1")


def _row(label: str, values: dict, support: int) -> dict:
    return {"label": label, **{m: float(values[m]) for m in MEASURES}, "support": int(support)}


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r else 0.0


def average_rows(task: str, metrics: dict) -> list[dict]:
    """[{label, precision, recall, f1, support}] for the averages of the run's per-class table (none for regression)."""
    overall = metrics.get("overall") or {}
    if task == "regression":
        return []
    if task == "token-classification":
        entities = metrics.get("entities") or {}
        head = entities.get(overall.get("span_mode")) or entities.get("default")
        if not head:
            return []
        return [_row(name, head[name.split()[0]], head[name.split()[0]]["support"]) for name in AVERAGES]
    rows = [r for r in metrics.get("per_class") or [] if (r.get("support") or 0) or (r.get("predicted") or 0)]
    if not rows:
        return []
    support = sum(int(r["support"]) for r in rows)
    if task == "multilabel":
        names = (*AVERAGES, "samples avg")
        return [_row(name, {m: overall[f"{name.split()[0]}_{m}"] for m in MEASURES}, support) for name in names
                if all(f"{name.split()[0]}_{m}" in overall for m in MEASURES)]
    tp = sum(round(float(r["recall"]) * int(r["support"])) for r in rows)
    predicted = sum(int(r.get("predicted") or 0) for r in rows)
    p, r = (tp / predicted if predicted else 0.0), (tp / support if support else 0.0)
    macro = {m: sum(float(x[m]) for x in rows) / len(rows) for m in MEASURES}
    weighted = {m: sum(float(x[m]) * int(x["support"]) for x in rows) / support if support else 0.0
                for m in MEASURES}
    return [_row("micro avg", {"precision": p, "recall": r, "f1": _f1(p, r)}, support),
            _row("macro avg", macro, support), _row("weighted avg", weighted, support)]
