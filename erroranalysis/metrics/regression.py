"""Regression metrics as pure functions over arrays: a regression run's `metrics.json`.

MAE, RMSE, R² and mean error (bias) follow scikit-learn (`mean_absolute_error`, `root_mean_squared_error`,
`r2_score`), Spearman's rho scipy's `spearmanr`; residual quantiles are of prediction - gold. A failure is decided
when the predictions are written (|error| above the tolerance, by default the worst decile) and counted here from
`correct`. For the views every task shares, the gold and the predictions are also read as quantile bins of the gold
(`label`/`pred`): `per_class` and `confusion` are over those bins, so "true low, predicted high" reads as a
confusion would.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from erroranalysis.core.counted import binned_exact_sums, exact_sum
from erroranalysis.core.errors import DataError
from erroranalysis.core.validation import check_int
from erroranalysis.metrics.classification import (
    CI_LEVEL,
    confusion_counts,
    encode_labels,
    metadata_rows,
)

QUANTILES = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)
BOOTSTRAP_CELLS = 4_000_000


def errors(target: np.ndarray, prediction: np.ndarray) -> dict[str, float]:
    """MAE, RMSE, R², bias (mean of prediction - gold) and Spearman's rho."""
    error = prediction - target
    ss_tot = float(((target - target.mean()) ** 2).sum())
    ss_res = float((error ** 2).sum())
    # r2 as sklearn's r2_score: 1.0 for a perfect fit of a constant target, 0.0 for an imperfect one
    r2 = (1 - ss_res / ss_tot) if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    return {"mae": float(np.abs(error).mean()), "rmse": float(np.sqrt((error ** 2).mean())), "r2": float(r2),
            "bias": float(error.mean()), "spearman": spearman(target, prediction)}


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's rank correlation (average ranks for ties); None when either side is constant."""
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    ra, rb = pd.Series(a).rank().to_numpy(), pd.Series(b).rank().to_numpy()
    return float(np.corrcoef(ra, rb)[0, 1])


def compute_regression_metrics(target, prediction, correct, bins_true=None, bins_pred=None,
                               bin_labels: Sequence[str] | None = None, metadata: pd.DataFrame | None = None,
                               texts=None, *, tolerance: dict | None = None, n_resamples: int = 1000,
                               seed: int = 0, max_metadata_values: int = 20) -> dict:
    """Every metric of a regression run's metrics.json. `bins_true`/`bins_pred`: the label/pred columns (quantile
    bins of the gold named by `bin_labels`); `tolerance`: how failures were decided (recorded as given)."""
    check_int("n_resamples", n_resamples, 0)
    t = np.asarray(target, dtype=np.float64)
    p = np.asarray(prediction, dtype=np.float64)
    ok = np.asarray(correct, dtype=bool)
    if t.ndim != 1 or t.shape != p.shape or t.shape != ok.shape or len(t) == 0:
        raise DataError(f"target {t.shape}, prediction {p.shape} and correct {ok.shape} must be the same "
                        "non-empty 1-D shape.")
    if not (np.isfinite(t).all() and np.isfinite(p).all()):
        raise DataError("target and prediction must be finite numbers.")
    labels = list(bin_labels) if bin_labels is not None else []
    views = binned(bins_true, bins_pred, labels, t, p, ok) if bins_true is not None and labels else None
    return regression_result(len(t), int((~ok).sum()), order_stats(t, p, n_resamples, seed), views,
                             by_metadata(t, p, ok, metadata, texts, max_metadata_values), tolerance=tolerance,
                             n_resamples=n_resamples, seed=seed)


def order_stats(t: np.ndarray, p: np.ndarray, n_resamples: int, seed: int) -> dict:
    """What needs every row's values at once: the errors (Spearman's ranks), the residual quantiles, the bootstrap
    intervals and the residuals by gold decile."""
    error = p - t
    return {"errors": errors(t, p),
            "residual_quantiles": {f"q{int(q * 100):02d}": float(np.quantile(error, q)) for q in QUANTILES},
            "abs_error_quantiles": {f"q{int(q * 100):02d}": float(np.quantile(np.abs(error), q))
                                    for q in QUANTILES},
            "bootstrap": bootstrap(t, p, n_resamples, seed) if n_resamples else {},
            "residuals": residual_summary(t, p)}


def regression_result(n: int, n_failures: int, order: dict, views: dict | None, by_meta: dict, *,
                      tolerance: dict | None, n_resamples: int, seed: int) -> dict:
    """metrics.json from the counts, `order_stats`, `binned`'s views (None without bins) and the by_metadata rows."""
    overall = {"n": n, "n_failures": n_failures, "failure_rate": n_failures / n, "accuracy": (n - n_failures) / n,
               **order["errors"], "residual_quantiles": order["residual_quantiles"],
               "abs_error_quantiles": order["abs_error_quantiles"], "tolerance": tolerance, **order["bootstrap"]}
    result = {"task": "regression", "overall": overall}
    result.update(views or {"per_class": [], "confusion": {"labels": [], "matrix": []}, "top_confusions": []})
    result["residuals"] = order["residuals"]
    result["by_metadata"] = by_meta
    result["bootstrap"] = {"n_resamples": n_resamples, "seed": seed, "level": CI_LEVEL}
    return result


def bootstrap(t, p, n_resamples: int, seed: int, level: float = CI_LEVEL) -> dict:
    """Percentile intervals of MAE and RMSE over rows resampled with replacement (multinomial row counts)."""
    n = len(t)
    rng = np.random.default_rng(seed)
    abs_err, sq = np.abs(p - t), (p - t) ** 2
    chunk = max(1, BOOTSTRAP_CELLS // n)
    mae, rmse = [], []
    for size in np.diff(np.r_[0:n_resamples:chunk, n_resamples]):
        w = rng.multinomial(n, np.full(n, 1 / n), size=size).astype(np.float64)
        mae.append(w @ abs_err / n)
        rmse.append(np.sqrt(w @ sq / n))
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    return {"mae_ci": [float(x) for x in np.percentile(np.concatenate(mae), q)],
            "rmse_ci": [float(x) for x in np.percentile(np.concatenate(rmse), q)]}


def exact_mean(values: np.ndarray) -> float:
    """The mean from the exact sum, rounded once: the number a merge of per-block sums gives for any split."""
    return float(exact_sum(values) / len(values))


def bin_codes(values, labels: list[str]) -> np.ndarray:
    """The bin of each label/pred value ("< x" and "> x", outside the gold's range, as the nearest bin)."""
    values = np.asarray(values, dtype=object)
    clipped = np.where(np.char.startswith(values.astype(str), "< "), labels[0],
                       np.where(np.char.startswith(values.astype(str), "> "), labels[-1], values))
    return encode_labels(clipped, labels, "bins")


def binned(bins_true, bins_pred, labels: list[str], t, p, ok) -> dict:
    """per_class and confusion over the gold's quantile bins (predictions outside the gold's range are counted in
    the nearest bin)."""
    ct, cp = bin_codes(bins_true, labels), bin_codes(bins_pred, labels)
    k, error = len(labels), p - t
    return binned_from_counts(confusion_counts(ct, cp, k), labels, np.bincount(ct[~ok], minlength=k),
                              binned_exact_sums(ct, np.abs(error), k), binned_exact_sums(ct, error, k))


def binned_from_counts(cm: np.ndarray, labels: list[str], failures: np.ndarray, abs_sums: list, error_sums: list
                       ) -> dict:
    """`binned` from the confusion counts over the bins and, per gold bin, the failures and the exact sums of
    |error| and error: counts that add up over any split of the rows."""
    per_class = []
    for i, name in enumerate(labels):
        tp, support, predicted = int(cm[i, i]), int(cm[i].sum()), int(cm[:, i].sum())
        per_class.append({
            "label": name, "support": support, "predicted": predicted,
            "precision": tp / predicted if predicted else 0.0, "recall": tp / support if support else 0.0,
            "f1": 2 * tp / (support + predicted) if support + predicted else 0.0, "f1_ci": None,
            "mae": float(abs_sums[i] / support) if support else None,
            "bias": float(error_sums[i] / support) if support else None,
            "failure_rate": int(failures[i]) / support if support else None})
    off = cm.copy()
    np.fill_diagonal(off, 0)
    order = np.argsort(-off, axis=None, kind="stable")[:10]
    rows, cols = np.unravel_index(order, off.shape)
    total = max(int(off.sum()), 1)
    top = [{"label": labels[r], "pred": labels[c], "count": int(off[r, c]), "share_of_failures": int(off[r, c]) / total}
           for r, c in zip(rows, cols) if off[r, c] > 0]
    normalized = np.divide(cm, cm.sum(1, keepdims=True), out=np.zeros(cm.shape), where=cm.sum(1, keepdims=True) > 0)
    return {"per_class": per_class, "top_confusions": top,
            "confusion": {"kind": "regression_bins", "labels": labels, "matrix": cm.tolist(),
                          "normalized": normalized.tolist()}}


def residual_summary(t, p, n_bins: int = 10) -> dict:
    """Mean and spread of the residual by gold decile: the residual plot's trend line."""
    edges = np.unique(np.quantile(t, np.linspace(0, 1, n_bins + 1)))
    codes = np.clip(np.searchsorted(edges, t, side="left") - 1, 0, max(len(edges) - 2, 0))
    rows = []
    for i in range(max(len(edges) - 1, 1)):
        mask = codes == i
        if mask.any():
            r = p[mask] - t[mask]
            rows.append({"gold_low": float(edges[i]), "gold_high": float(edges[min(i + 1, len(edges) - 1)]),
                         "n": int(mask.sum()), "mean_residual": float(r.mean()), "std_residual": float(r.std()),
                         "mae": float(np.abs(r).mean())})
    return {"by_gold": rows}


def by_metadata(t, p, ok, metadata, texts, max_values) -> dict:
    """Per value of each metadata column (and of text length): n, failure rate, MAE, bias."""

    def describe(mask):
        rate, r = float((~ok[mask]).mean()), p[mask] - t[mask]
        return {"accuracy": 1 - rate, "error_rate": rate, "mae": exact_mean(np.abs(r)), "bias": exact_mean(r)}

    return metadata_rows(metadata, texts, max_values, describe)
