"""Classification metrics as pure functions over arrays: the content of a run's `metrics.json`.

Everything is derived from confusion counts, so per-class scores, metrics by metadata and the bootstrap share one code path
and stay fast on millions of rows. Scores follow scikit-learn with `zero_division=0`. See docs/run-directory.md.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable, Iterator, Sequence

import numpy as np
import pandas as pd

from erroranalysis.core.counted import binned_exact_sums, exact_sum
from erroranalysis.core.errors import DataError, preview
from erroranalysis.core.params import is_int
from erroranalysis.core.validation import check_param
from erroranalysis.sources import cells

CI_LEVEL = 0.95
TOP_CONFUSIONS = 10
BOOTSTRAP_CELLS = 4_000_000  # confusion cells held at once while resampling
QUANTILE_BUCKETS = 5
OTHER = "(other)"
MISSING = "(missing)"


def compute_metrics(y_true, y_pred, labels: Sequence, probs=None, metadata: pd.DataFrame | None = None,
                    texts=None, *, n_bins: int = 15, n_resamples: int = 1000, seed: int = 0,
                    max_metadata_values: int = 20) -> dict:
    """Every metric of `metrics.json` for gold labels `y_true` and predictions `y_pred`.

    `labels` fixes the class order (confusion rows = true, columns = predicted); `probs` is float
    [n, n_classes] in that order; `metadata` holds one column for metrics by its values; `texts` gives `text_length`.
    """
    labels = check_labels(labels)
    _check_options(n_bins, n_resamples, seed, max_metadata_values)
    t = encode_labels(y_true, labels, "y_true")
    p = encode_labels(y_pred, labels, "y_pred")
    _check_lengths(len(t), y_pred=len(p), probs=None if probs is None else len(probs),
                   metadata=None if metadata is None else len(metadata), texts=None if texts is None else len(texts))
    probs = None if probs is None else _check_probs(probs, len(t), len(labels))

    k = len(labels)
    cm = confusion_counts(t, p, k)
    acc_ci, f1_ci = bootstrap_intervals(cm, n_resamples, seed) if n_resamples else (None, None)
    result = confusion_summary(cm, labels, acc_ci, f1_ci)
    if probs is not None:
        result["calibration"] = calibration(t, probs, n_bins)
        result["overall"]["ece"] = result["calibration"]["ece"]
        result["overall"]["brier"] = result["calibration"]["brier"]
    result["by_metadata"] = _by_metadata(t, p, k, metadata, texts, max_metadata_values)
    result["bootstrap"] = {"n_resamples": n_resamples, "seed": seed, "level": CI_LEVEL}
    return result


def check_labels(labels) -> list[str]:
    if labels is None or isinstance(labels, str) or len(labels) == 0:
        raise DataError(f"labels={labels!r} is invalid: expected a non-empty list of class names.")
    names = [str(label) for label in labels]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise DataError(f"labels has duplicates: {preview(duplicates)}; list each class once.")
    return names


def _check_options(n_bins, n_resamples, seed, max_metadata_values) -> None:
    check_param("n_bins", n_bins, is_int(n_bins) and n_bins >= 1, "an integer >= 1")
    check_param("n_resamples", n_resamples, is_int(n_resamples) and n_resamples >= 0, "an integer >= 0")
    check_param("seed", seed, is_int(seed) and seed >= 0, "an integer >= 0")
    check_param("max_metadata_values", max_metadata_values, is_int(max_metadata_values) and max_metadata_values >= 1,
                "an integer >= 1")




def _check_lengths(n: int, **others: int | None) -> None:
    if n == 0:
        raise DataError("y_true is empty: metrics need at least one example.")
    for name, length in others.items():
        if length is not None and length != n:
            raise DataError(f"{name} has {length} rows but y_true has {n}; pass arrays of the same length.")


def _check_probs(probs, n: int, k: int) -> np.ndarray:
    probs = np.asarray(probs)
    if probs.ndim != 2 or probs.shape != (n, k):
        raise DataError(f"probs has shape {probs.shape}; expected ({n}, {k}): one row per example, "
                        "one column per label in labels order.")
    if not np.issubdtype(probs.dtype, np.number):
        raise DataError(f"probs has dtype {probs.dtype}; expected floats.")
    if not np.isfinite(probs).all():
        row = int(np.flatnonzero(~np.isfinite(probs).all(axis=1))[0])
        raise DataError(f"probs row {row} has NaN or inf; expected probabilities in [0, 1].")
    return probs


def encode_labels(values, labels: Sequence[str], name: str = "y") -> np.ndarray:
    """Map label values (compared as strings) to their position in `labels`; unknown or missing values raise."""
    codes, uniques = pd.factorize(np.asarray(values, dtype=object).ravel())
    if (codes < 0).any():
        raise DataError(f"{name} has a missing label at index {int(np.flatnonzero(codes < 0)[0])}; "
                        "every example needs a label.")
    position = {label: i for i, label in enumerate(labels)}
    names = [str(u) for u in uniques]
    unknown = [u for u in names if u not in position]
    if unknown:
        raise DataError(f"{name} has labels not in labels: {preview(unknown)} (known: {preview(labels)}); "
                        "add them to labels or fix the data.")
    return np.array([position[u] for u in names], dtype=np.int64)[codes]


def confusion_counts(t: np.ndarray, p: np.ndarray, k: int) -> np.ndarray:
    """Counts [k, k] of (true code, predicted code) pairs; one bincount instead of a Python loop."""
    return np.bincount(t * k + p, minlength=k * k).reshape(k, k)


def scores_from_confusion(cm: np.ndarray) -> dict[str, np.ndarray]:
    """Per-class precision, recall, F1, support and predicted counts; `cm` may have leading batch axes."""
    tp = np.diagonal(cm, axis1=-2, axis2=-1).astype(np.float64)
    support = cm.sum(axis=-1)
    predicted = cm.sum(axis=-2)
    return {"precision": safe_div(tp, predicted), "recall": safe_div(tp, support),
            "f1": safe_div(2 * tp, support + predicted), "support": support, "predicted": predicted}


def safe_div(num, den) -> np.ndarray:
    """num / den elementwise, 0 where den is 0 (sklearn's zero_division=0: an undefined ratio counts as 0)."""
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    return np.divide(num, den, out=np.zeros(np.broadcast(num, den).shape), where=den > 0)


def confusion_summary(cm: np.ndarray, labels: list[str], acc_ci, f1_ci) -> dict:
    """What metrics.json says from the confusion counts alone: overall, per class, the matrix, top confusions."""
    return {"overall": _overall(cm, acc_ci), "per_class": _per_class(cm, labels, f1_ci),
            "confusion": _confusion(cm, labels), "top_confusions": top_confusions(cm, labels)}


def _overall(cm: np.ndarray, acc_ci) -> dict:
    s = scores_from_confusion(cm)
    n = int(cm.sum())
    correct = int(np.trace(cm))
    weights = s["support"] / n
    out = {"n": n, "n_failures": n - correct, "accuracy": correct / n, "accuracy_ci": _pair(acc_ci)}
    for name in ("precision", "recall", "f1"):
        out[f"macro_{name}"] = float(s[name].mean())
    # Every prediction is one of `labels`, so micro precision = micro recall = accuracy, as in sklearn.
    micro_p, micro_r = correct / max(int(s["predicted"].sum()), 1), correct / n
    out.update(micro_precision=micro_p, micro_recall=micro_r,
               micro_f1=float(safe_div(2 * micro_p * micro_r, micro_p + micro_r)))
    for name in ("precision", "recall", "f1"):
        out[f"weighted_{name}"] = float((s[name] * weights).sum())
    return out


def _per_class(cm: np.ndarray, labels: list[str], f1_ci) -> list[dict]:
    s = scores_from_confusion(cm)
    return [{"label": label, "precision": float(s["precision"][i]), "recall": float(s["recall"][i]),
             "f1": float(s["f1"][i]), "support": int(s["support"][i]), "predicted": int(s["predicted"][i]),
             "f1_ci": None if f1_ci is None else _pair(f1_ci[i])}
            for i, label in enumerate(labels)]


def _confusion(cm: np.ndarray, labels: list[str]) -> dict:
    normalized = safe_div(cm, cm.sum(axis=1, keepdims=True))
    return {"labels": list(labels), "matrix": cm.tolist(), "normalized": normalized.tolist()}


def top_confusions(cm: np.ndarray, labels: Sequence[str], limit: int = TOP_CONFUSIONS) -> list[dict]:
    """The most frequent (true, predicted) mistakes, largest first, with their share of all failures."""
    off = cm.copy()
    np.fill_diagonal(off, 0)
    failures = int(off.sum())
    order = np.argsort(-off, axis=None, kind="stable")[:limit]
    rows, cols = np.unravel_index(order, off.shape)
    return [{"label": labels[r], "pred": labels[c], "count": int(off[r, c]),
             "share_of_failures": int(off[r, c]) / failures}
            for r, c in zip(rows, cols) if off[r, c] > 0]


def _pair(values) -> list[float] | None:
    return None if values is None else [float(values[0]), float(values[1])]


def bootstrap_intervals(cm: np.ndarray, n_resamples: int = 1000, seed: int = 0,
                        level: float = CI_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Percentile intervals for accuracy ([2]) and per-class F1 ([k, 2]).

    Resampling n rows with replacement puts a multinomial number of rows in each confusion cell, so drawing
    the cell counts directly gives the same distribution at a cost independent of n.
    """
    check_param("n_resamples", n_resamples, is_int(n_resamples) and n_resamples >= 1, "an integer >= 1")
    k, n = cm.shape[0], int(cm.sum())
    cells = np.flatnonzero(cm)  # an empty cell stays empty in every resample
    rng = np.random.default_rng(seed)
    chunk = max(1, BOOTSTRAP_CELLS // (k * k))  # bounds memory when there are many classes
    accuracy, f1 = [], []
    for size in np.diff(np.r_[0:n_resamples:chunk, n_resamples]):
        draws = np.zeros((size, k * k), dtype=np.int64)
        draws[:, cells] = rng.multinomial(n, cm.ravel()[cells] / n, size=size)
        draws = draws.reshape(size, k, k)
        accuracy.append(np.trace(draws, axis1=1, axis2=2) / n)
        f1.append(scores_from_confusion(draws)["f1"])
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    return np.percentile(np.concatenate(accuracy), q), np.percentile(np.concatenate(f1), q, axis=0).T


def calibration(t: np.ndarray, probs: np.ndarray, n_bins: int = 15) -> dict:
    """Reliability bins, expected calibration error and multiclass Brier score.

    Confidence is the largest probability and a row is correct when its arg-max is the true class. Bins are
    equal-width, (lower, upper], the first also holding 0.
    """
    confidence, correct = probs.max(axis=1).astype(np.float64), probs.argmax(axis=1) == t
    bin_of = calibration_bin(confidence, n_bins)
    conf_sums = binned_exact_sums(bin_of, confidence, n_bins)
    return calibration_from_sums(np.bincount(bin_of, minlength=n_bins), conf_sums,
                                 np.bincount(bin_of, weights=correct, minlength=n_bins), brier_sum(t, probs), len(t))


def calibration_bin(confidence: np.ndarray, n_bins: int) -> np.ndarray:
    """Each row's reliability bin: equal-width, (lower, upper], the first also holding 0."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    return np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, n_bins - 1)


def calibration_from_sums(count, conf_sums, acc_sum, brier_total, n: int) -> dict:
    """The calibration section from per-bin row counts, exact confidence sums and correct counts, and the exact
    Brier sum: the same numbers whether the sums come from all rows at once or from merged blocks."""
    n_bins = len(count)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    conf_sum = np.array([float(c) for c in conf_sums], dtype=np.float64)
    mean_conf, mean_acc = safe_div(conf_sum, count), safe_div(acc_sum, count)
    ece = float((count / n * np.abs(mean_acc - mean_conf)).sum())
    bins = [{"lower": float(edges[i]), "upper": float(edges[i + 1]), "count": int(count[i]),
             "confidence": float(mean_conf[i]) if count[i] else None,
             "accuracy": float(mean_acc[i]) if count[i] else None} for i in range(n_bins)]
    return {"n_bins": n_bins, "ece": ece, "brier": float(brier_total / n), "bins": bins}


def brier_score(t: np.ndarray, probs: np.ndarray) -> float:
    """Mean over rows of sum over classes of (p - one_hot)^2, without building the one-hot matrix."""
    return float(brier_sum(t, probs) / len(t))


def brier_sum(t: np.ndarray, probs: np.ndarray) -> Fraction:
    """The exact sum over rows of each row's Brier term (a row's term depends on that row alone)."""
    squares = np.einsum("ij,ij->i", probs, probs, dtype=np.float64)
    p_true = probs[np.arange(len(t)), t].astype(np.float64)
    return exact_sum(squares - 2 * p_true + 1)


def _by_metadata(t, p, k, metadata, texts, max_values) -> dict:
    return {key: group_metrics(t[rows], p[rows], k, codes, names)
            for key, rows, codes, names in metadata_groups(metadata, texts, max_values)}


def metadata_groups(metadata: pd.DataFrame | None, texts, max_values: int
                    ) -> Iterator[tuple[str, np.ndarray, np.ndarray, list]]:
    """(key, rows, codes, value names) for each metadata column, then text length in words: what every task's
    `by_metadata` reports on; row rows[i] has value names[codes[i]]. A list column (tags) is multi-valued: a row
    appears once per value it holds (`cells.explode`). A metadata column itself named text_length becomes
    meta_text_length."""
    if metadata is not None:
        for column in metadata.columns:
            key = f"meta_{column}" if str(column) == "text_length" and texts is not None else str(column)
            if cells.is_list_column(metadata[column]):
                rows, values = cells.explode(metadata[column])
                yield key, rows, *bucket_values(values, max_values, numeric=False)
            else:
                yield key, np.arange(len(metadata)), *bucket_values(metadata[column], max_values)
    if texts is not None:
        yield "text_length", np.arange(len(texts)), *bucket_values(word_counts(texts), max_values, numeric=True)


def metadata_rows(metadata: pd.DataFrame | None, texts, max_values: int, describe: Callable[[np.ndarray], dict]
                  ) -> dict[str, list[dict]]:
    """{key: [{"value", "n", **describe(mask)} for each non-empty value]} over `metadata_groups`."""
    out = {}
    n = len(metadata) if metadata is not None else len(texts) if texts is not None else 0
    for key, rows, codes, names in metadata_groups(metadata, texts, max_values):
        masks = ((value, _mask(n, rows[codes == i])) for i, value in enumerate(names))
        out[key] = [{"value": value, "n": int(mask.sum()), **describe(mask)} for value, mask in masks if mask.any()]
    return out


def _mask(n: int, rows: np.ndarray) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[rows] = True
    return mask


def group_metrics(t: np.ndarray, p: np.ndarray, k: int, codes: np.ndarray, names: Sequence[str]) -> list[dict]:
    """n, accuracy, error rate and macro F1 per value of a column (`codes` index `names`), from one bincount over
    (value, true, predicted). Macro F1 averages the classes that occur in the group (as gold or prediction),
    like sklearn's default.
    """
    m = len(names)
    return group_rows(np.bincount((codes * k + t) * k + p, minlength=m * k * k).reshape(m, k, k), names)


def group_rows(cms: np.ndarray, names: Sequence[str]) -> list[dict]:
    """`group_metrics`'s rows from the confusion counts [m, k, k] of each value: a value without rows is left out."""
    s = scores_from_confusion(cms)
    present = (s["support"] + s["predicted"]) > 0
    out = []
    for i, name in enumerate(names):
        n = int(cms[i].sum())
        if n == 0:
            continue
        accuracy = float(np.trace(cms[i])) / n
        out.append({"value": name, "n": n, "accuracy": accuracy, "error_rate": 1 - accuracy,
                    "macro_f1": float(s["f1"][i][present[i]].mean())})
    return out


def word_counts(texts) -> np.ndarray:
    """Whitespace word count per text; a missing text counts 0 words."""
    return np.fromiter((len(x.split()) if isinstance(x, str) else 0 for x in texts), dtype=np.int64,
                       count=len(texts))


def bucket_values(values, max_values: int = 20, numeric: bool | None = None) -> tuple[np.ndarray, list[str]]:
    """Slice codes and names for one column: quantile buckets for a many-valued numeric column, otherwise
    the `max_values` most frequent values with the rest as "(other)"; missing values form "(missing)"."""
    series = pd.Series(np.asarray(values) if not isinstance(values, pd.Series) else values).reset_index(drop=True)
    if numeric is None:
        numeric = (pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)
                   and series.nunique() > 2 * QUANTILE_BUCKETS)
    codes, names = _quantile_buckets(series) if numeric else _top_values(series, max_values)
    missing = series.isna().to_numpy()
    if missing.any():
        codes = np.where(missing, len(names), codes)
        names = names + [MISSING]
    return codes.astype(np.int64), names


def _quantile_buckets(series: pd.Series) -> tuple[np.ndarray, list[str]]:
    x = series.to_numpy(dtype=np.float64, na_value=np.nan)
    finite = x[~np.isnan(x)]
    if finite.size == 0:
        return np.zeros(len(x), dtype=np.int64), []
    edges = np.unique(np.quantile(finite, np.linspace(0, 1, QUANTILE_BUCKETS + 1)))
    # (e_i, e_i+1] buckets, the first closed on the left, as pandas.qcut makes them.
    codes = np.clip(np.searchsorted(edges, x, side="left") - 1, 0, max(len(edges) - 2, 0))
    if len(edges) == 1:
        return codes, [format_edge(edges[0])]
    names = [f"{'[' if i == 0 else '('}{format_edge(edges[i])}, {format_edge(edges[i + 1])}]" for i in range(len(edges) - 1)]
    return codes, names


def _top_values(series: pd.Series, max_values: int) -> tuple[np.ndarray, list[str]]:
    codes, uniques = pd.factorize(series)  # missing values get -1; bucket_values relabels them
    counts = np.bincount(codes[codes >= 0], minlength=len(uniques))
    kept = np.argsort(-counts, kind="stable")[:max_values]
    if pd.api.types.is_numeric_dtype(series):  # a few numbers read best in their own order
        kept = kept[np.argsort(np.asarray(uniques)[kept], kind="stable")]
    remap = np.full(len(uniques) + 1, len(kept), dtype=np.int64)  # the last slot catches the -1 codes
    remap[kept] = np.arange(len(kept))
    names = [str(uniques[i]) for i in kept] + ([OTHER] if len(uniques) > max_values else [])
    return remap[codes], names


def format_edge(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.4g}"
