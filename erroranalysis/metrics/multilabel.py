"""Multi-label classification metrics as pure functions over multi-hot arrays: a multi-label run's `metrics.json`.

`y_true` and `y_pred` are 0/1 [n, k] in the labels' order, `probs` the sigmoid [n, k]. Scores follow scikit-learn
(`precision_recall_fscore_support` with `zero_division=0` and average micro/macro/weighted/samples,
`accuracy_score` for the subset accuracy, `hamming_loss`, `roc_auc_score`, `average_precision_score`), which the
tests check on the same arrays. The confusion view of a multi-label head is per label a 2x2 table, plus the pairs
of errors that occur together: gold A missed while B was predicted without gold ("B instead of A").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import pandas as pd

from erroranalysis.core.counted import binned_exact_sums, exact_sum
from erroranalysis.core.errors import DataError
from erroranalysis.core.validation import check_int
from erroranalysis.metrics.classification import (
    CI_LEVEL,
    TOP_CONFUSIONS,
    metadata_rows,
    safe_div,
)

BOOTSTRAP_CELLS = 4_000_000  # resample weights held at once


def _check(y_true, y_pred, probs, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    t, p = np.asarray(y_true), np.asarray(y_pred)
    k = len(labels)
    for name, a in (("y_true", t), ("y_pred", p)):
        if a.ndim != 2 or a.shape[1] != k:
            raise DataError(f"{name} has shape {a.shape}; expected (n, {k}): one 0/1 column per label.")
        if not np.isin(a, (0, 1)).all():
            raise DataError(f"{name} holds values other than 0 and 1; pass multi-hot rows.")
    if t.shape != p.shape or len(t) == 0:
        raise DataError(f"y_true {t.shape} and y_pred {p.shape} must have the same, non-empty shape.")
    if probs is not None:
        probs = np.asarray(probs, dtype=np.float64)
        if probs.shape != t.shape or not np.isfinite(probs).all():
            raise DataError(f"probs has shape {probs.shape} or non-finite values; expected finite {t.shape}.")
    return t.astype(np.int64), p.astype(np.int64), probs


def counts(t: np.ndarray, p: np.ndarray, weights: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per-label tp, fp, fn, tn ([k], or [b, k] with weights [b, n]: bootstrap resamples as row counts)."""
    if weights is None:
        weights = np.ones(len(t))
    tp, fp, fn = weights @ (t & p), weights @ ((1 - t) & p), weights @ (t & (1 - p))
    n = weights.sum(axis=-1, keepdims=weights.ndim > 1)
    return {"tp": tp, "fp": fp, "fn": fn, "tn": n - tp - fp - fn}


def scores(c: dict) -> dict[str, np.ndarray]:
    tp, fp, fn = c["tp"], c["fp"], c["fn"]
    return {"precision": safe_div(tp, tp + fp), "recall": safe_div(tp, tp + fn), "f1": safe_div(2 * tp, 2 * tp + fp + fn)}


def row_counts(t: np.ndarray, p: np.ndarray) -> Counter:
    """How many rows have each (true positives, predicted, gold) triple: what the samples averages need."""
    triples, n = np.unique(np.stack([(t & p).sum(1), p.sum(1), t.sum(1)], axis=1), axis=0, return_counts=True)
    return Counter({tuple(map(int, row)): int(c) for row, c in zip(triples, n)})


def samples_scores(rows: Counter) -> dict[str, float]:
    """samples precision/recall/F1, the mean over rows of each row's ratio, summed exactly from the triples' counts
    (`row_counts`): the same number for any order or split of the rows."""
    n = sum(rows.values())
    sums = {"precision": Fraction(0), "recall": Fraction(0), "f1": Fraction(0)}
    for (tp, pred, gold), count in rows.items():
        for name, (num, den) in (("precision", (tp, pred)), ("recall", (tp, gold)), ("f1", (2 * tp, pred + gold))):
            sums[name] += Fraction(num / den if den else 0.0) * count
    return {f"samples_{name}": float(total / n) for name, total in sums.items()}


def row_patterns(t: np.ndarray, p: np.ndarray) -> Counter:
    """How many rows have each (gold, predicted) multi-hot pair, keyed by its bytes: the bootstrap's cells."""
    patterns, n = np.unique(np.concatenate([t, p], axis=1).astype(np.uint8), axis=0, return_counts=True)
    return Counter({row.tobytes(): int(c) for row, c in zip(patterns, n)})


def compute_multilabel_metrics(y_true, y_pred, labels: Sequence, probs=None, metadata: pd.DataFrame | None = None,
                               texts=None, *, thresholds=None, n_bins: int = 15, n_resamples: int = 1000,
                               seed: int = 0, max_metadata_values: int = 20) -> dict:
    """Every metric of a multi-label run's metrics.json (see the module's docstring): the whole table as one block
    (`multilabel_first`; the stage merges many), so both ways assemble metrics.json with one `finish_multilabel`."""
    labels = [str(x) for x in labels]
    check_int("n_resamples", n_resamples, 0)
    check_int("n_bins", n_bins, 1)
    t, p, probs = _check(y_true, y_pred, probs, labels)
    ranks = None if probs is None else [ranking(t[:, j], probs[:, j]) for j in range(len(labels))]
    return finish_multilabel(multilabel_first(t, p, probs, n_bins, {}), labels,
                             by_metadata(t, p, metadata, texts, max_metadata_values), ranking=ranks,
                             thresholds=thresholds, n_bins=n_bins, n_resamples=n_resamples, seed=seed)


def multilabel_first(t: np.ndarray, p: np.ndarray, probs: np.ndarray | None, n_bins: int,
                     values: dict, offset: int = 0) -> dict:
    """Pass 1 of a multi-label block (rows `offset`..): multi-hot gold `t` and predictions `p` [n, k], the sigmoids
    or None."""
    if probs is not None and probs.shape != t.shape:
        raise DataError(f"probs has shape {probs.shape} in rows {offset}..{offset + len(t)}; expected {t.shape}.")
    if probs is not None and not np.isfinite(probs).all():
        row = int(np.flatnonzero(~np.isfinite(probs).all(axis=1))[0])
        raise DataError(f"probs row {offset + row} has NaN or inf; expected sigmoids in [0, 1].")
    c = counts(t, p)
    missed, spurious = t & (1 - p), p & (1 - t)
    return {"n": len(t), "exact": int((t == p).all(axis=1).sum()), "hamming": int((t != p).sum()),
            "tp": c["tp"].astype(np.int64), "fp": c["fp"].astype(np.int64), "fn": c["fn"].astype(np.int64),
            "support": t.sum(axis=0), "predicted": p.sum(axis=0), "errors": missed.T @ spurious,
            "missed": missed.sum(axis=0), "spurious": spurious.sum(axis=0),
            "failures": int((t != p).any(axis=1).sum()), "rows": row_counts(t, p), "patterns": row_patterns(t, p),
            "calibration": None if probs is None else calibration_sums(t, probs, n_bins), "values": values}


def finish_multilabel(m: dict, labels: list[str], by_metadata: dict, *, ranking: list[dict] | None,
                      thresholds=None, n_bins: int = 15, n_resamples: int = 1000, seed: int = 0) -> dict:
    """A multi-label run's metrics.json from merged `multilabel_first` partials, the by_metadata rows and each
    label's `ranking` (None without probabilities): the one assembly, `compute_multilabel_metrics`' too."""
    if not m or m["n"] == 0:
        raise DataError("y_true and y_pred must have the same, non-empty shape.")
    n, k = m["n"], len(labels)
    c = {key: m[key].astype(np.float64) for key in ("tp", "fp", "fn")}
    c["tn"] = n - c["tp"] - c["fp"] - c["fn"]
    s = scores(c)
    support = m["support"]
    micro = scores({key: c[key].sum() for key in ("tp", "fp", "fn")})
    averages = {}
    for name in ("precision", "recall", "f1"):
        averages[f"micro_{name}"] = float(micro[name])
        averages[f"macro_{name}"] = float(s[name].mean())
        averages[f"weighted_{name}"] = float((s[name] * support).sum() / support.sum()) if support.sum() else 0.0
    averages.update(samples_scores(m["rows"]))
    averages["subset_accuracy"] = m["exact"] / n
    averages["hamming_loss"] = m["hamming"] / (n * k)
    overall = {"n": n, "n_failures": n - m["exact"], **averages}
    overall["accuracy"] = overall["subset_accuracy"]
    ci = bootstrap(m["patterns"], k, n_resamples, seed) if n_resamples else None
    overall["accuracy_ci"] = overall["subset_accuracy_ci"] = None if ci is None else ci["subset_accuracy"]
    overall["micro_f1_ci"] = None if ci is None else ci["micro_f1"]
    per_class = []
    for j, name in enumerate(labels):
        row = {"label": name, "precision": float(s["precision"][j]), "recall": float(s["recall"][j]),
               "f1": float(s["f1"][j]), "support": int(support[j]), "predicted": int(m["predicted"][j]),
               **{key: int(c[key][j]) for key in ("tp", "fp", "fn", "tn")},
               "f1_ci": None if ci is None else ci["f1"][j],
               "threshold": None if thresholds is None else float(np.asarray(thresholds)[j])}
        if ranking is not None:
            row.update(ranking[j])
        per_class.append(row)
    errors, missed = m["errors"], m["missed"]
    failures = max(m["failures"], 1)
    order = np.argsort(-errors, axis=None, kind="stable")[:TOP_CONFUSIONS]
    rows, cols = np.unravel_index(order, errors.shape)
    result = {"task": "multilabel", "overall": overall, "per_class": per_class,
              "confusion": {"kind": "multilabel", "labels": labels, "matrix": errors.tolist(),
                            "normalized": safe_div(errors, missed[:, None]).tolist(),
                            "per_label": [{"label": name, "tn": int(c["tn"][j]), "fp": int(c["fp"][j]),
                                           "fn": int(c["fn"][j]), "tp": int(c["tp"][j])}
                                          for j, name in enumerate(labels)]},
              "top_confusions": [{"label": labels[r], "pred": labels[q], "count": int(errors[r, q]),
                                  "share_of_failures": int(errors[r, q]) / failures}
                                 for r, q in zip(rows, cols) if errors[r, q] > 0]}
    result["missed"], result["spurious"] = ([{"label": labels[j], "count": int(total[j]),
                                              "share_of_failures": int(total[j]) / failures}
                                             for j in np.argsort(-total, kind="stable") if total[j] > 0]
                                            for total in (m["missed"], m["spurious"]))
    if m["calibration"] is not None:
        result["calibration"] = calibration_from_sums(m["calibration"], labels, n_bins)
        overall["ece"], overall["brier"] = result["calibration"]["ece"], result["calibration"]["brier"]
        aucs = [r["roc_auc"] for r in per_class if r.get("roc_auc") is not None]
        overall["macro_roc_auc"] = float(np.mean(aucs)) if aucs else None
        aps = [r["average_precision"] for r in per_class if r.get("average_precision") is not None]
        overall["macro_average_precision"] = float(np.mean(aps)) if aps else None
    result["by_metadata"] = by_metadata
    result["bootstrap"] = {"n_resamples": n_resamples, "seed": seed, "level": CI_LEVEL}
    return result


def ranking(y: np.ndarray, score: np.ndarray) -> dict:
    """ROC-AUC and average precision of one label (None where the label is all 0 or all 1 in the gold)."""
    if y.min() == y.max():
        return {"roc_auc": None, "average_precision": None}
    from sklearn.metrics import average_precision_score, roc_auc_score

    return {"roc_auc": float(roc_auc_score(y, score)), "average_precision": float(average_precision_score(y, score))}


def bootstrap(patterns: Counter, k: int, n_resamples: int, seed: int, level: float = CI_LEVEL) -> dict:
    """Percentile intervals of the subset accuracy, micro F1 and each label's F1, over rows resampled with
    replacement. Resampling n rows puts a multinomial number of rows in each distinct (gold, predicted) pattern
    (`row_patterns`), so the patterns' counts are drawn directly (as classification draws confusion cells), in the
    patterns' byte order: the same draws for any order or split of the rows."""
    keys = sorted(patterns)
    both = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 2 * k).astype(np.int64)
    t, p = both[:, :k], both[:, k:]
    weight = np.array([patterns[key] for key in keys], dtype=np.int64)
    n = int(weight.sum())
    rng = np.random.default_rng(seed)
    exact = (t == p).all(axis=1).astype(np.float64)
    chunk = max(1, BOOTSTRAP_CELLS // max(len(keys), 1))
    acc, micro, f1 = [], [], []
    for size in np.diff(np.r_[0:n_resamples:chunk, n_resamples]):
        w = rng.multinomial(n, weight / n, size=size).astype(np.float64)
        c = counts(t, p, w)
        acc.append(w @ exact / n)
        f1.append(scores(c)["f1"])
        tp, fp, fn = c["tp"].sum(1), c["fp"].sum(1), c["fn"].sum(1)
        micro.append(safe_div(2 * tp, 2 * tp + fp + fn))
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    pair = lambda v: [float(x) for x in np.percentile(np.concatenate(v), q)]  # noqa: E731
    per_label = np.percentile(np.concatenate(f1), q, axis=0).T
    return {"subset_accuracy": pair(acc), "micro_f1": pair(micro), "f1": [[float(a), float(b)] for a, b in per_label]}


def reliability_sums(y: np.ndarray, prob: np.ndarray, n_bins: int) -> dict:
    """A label's calibration counts over some rows: per equal-width bin (lower, upper] of the probability the rows,
    the exact sum of the probability and the gold count, and the exact Brier sum (exact sums add up to the same
    number for any split of the rows)."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    bin_of = np.clip(np.searchsorted(edges, prob, side="left") - 1, 0, n_bins - 1)
    return {"count": np.bincount(bin_of, minlength=n_bins), "prob": binned_exact_sums(bin_of, prob, n_bins),
            "gold": np.bincount(bin_of, weights=y, minlength=n_bins).astype(np.int64),
            "brier": exact_sum((prob - y) ** 2), "n": len(y)}


def add_sums(a: dict, b: dict) -> dict:
    return {"count": a["count"] + b["count"], "prob": [x + z for x, z in zip(a["prob"], b["prob"])],
            "gold": a["gold"] + b["gold"], "brier": a["brier"] + b["brier"], "n": a["n"] + b["n"]}


def reliability(sums: dict, n_bins: int) -> dict:
    """ECE, Brier score and the bins of `reliability_sums`."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    count = sums["count"]
    mean_p = np.array([float(s / c) if c else 0.0 for s, c in zip(sums["prob"], count.tolist())])
    freq = safe_div(sums["gold"], count)
    ece = float((count / sums["n"] * np.abs(freq - mean_p)).sum())
    bins = [{"lower": float(edges[i]), "upper": float(edges[i + 1]), "count": int(count[i]),
             "confidence": float(mean_p[i]) if count[i] else None, "accuracy": float(freq[i]) if count[i] else None}
            for i in range(n_bins)]
    return {"ece": ece, "brier": float(sums["brier"] / sums["n"]), "bins": bins}


def calibration_sums(t: np.ndarray, probs: np.ndarray, n_bins: int) -> list[dict]:
    """`reliability_sums` of each label."""
    return [reliability_sums(t[:, j].astype(np.float64), probs[:, j].astype(np.float64), n_bins)
            for j in range(t.shape[1])]


def calibration_from_sums(per_label: list[dict], labels: list[str], n_bins: int) -> dict:
    """Reliability of every (example, label) probability pooled (the labels' sums added), and of each label alone
    (`per_label`)."""
    pooled = per_label[0]
    for sums in per_label[1:]:
        pooled = add_sums(pooled, sums)
    return {"n_bins": n_bins, **reliability(pooled, n_bins),
            "per_label": [{"label": name, **reliability(s, n_bins)} for name, s in zip(labels, per_label)]}


def by_metadata(t, p, metadata, texts, max_values) -> dict:
    """Per value of each metadata column (and of text length): n, subset accuracy, error rate, micro F1."""

    def describe(mask):
        tm, pm = t[mask], p[mask]
        exact = float((tm == pm).all(axis=1).mean())
        c = counts(tm, pm)
        return {"accuracy": exact, "error_rate": 1 - exact,
                "micro_f1": float(scores({key: v.sum() for key, v in c.items()})["f1"]),
                "macro_f1": float(scores(c)["f1"].mean())}

    return metadata_rows(metadata, texts, max_values, describe)
