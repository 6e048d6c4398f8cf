"""Scores and tests of a slice: SliceLine's score, one-sided binomial p-values, Holm and Benjamini-Hochberg.
"""

from __future__ import annotations

import numpy as np

from erroranalysis.core.validation import check_param

CORRECTIONS = ("holm", "bh")


def sliceline_score(support, failures, n: int, base_error: float, alpha: float):
    """SliceLine's score: alpha * (error-rate ratio - 1) - (1 - alpha) * (n / support - 1); > 0 is worth a look."""
    support = np.asarray(support, dtype=float)
    failures = np.asarray(failures, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (failures / support) / base_error
        score = alpha * (ratio - 1.0) - (1.0 - alpha) * (n / support - 1.0)
    return np.where(support > 0, score, -np.inf)


def binomial_pvalues(failures, support, base_error: float) -> np.ndarray:
    """One-sided binomial test, vectorized: P(X >= failures) for X ~ Binomial(support, base_error)."""
    from scipy.stats import binom

    failures = np.asarray(failures, dtype=float)
    support = np.asarray(support, dtype=float)
    p = binom.sf(failures - 1, support, base_error)
    return np.clip(np.nan_to_num(p, nan=1.0), 0.0, 1.0)


def binomial_vs(failures, support, rates) -> np.ndarray:
    """One-sided binomial p-values against a rate per slice (a parent's error rate)."""
    from scipy.stats import binom

    p = binom.sf(np.asarray(failures, float) - 1, np.asarray(support, float), np.clip(rates, 0.0, 1.0))
    return np.clip(np.nan_to_num(p, nan=1.0), 0.0, 1.0)


def adjust_pvalues(p: np.ndarray, method: str = "holm") -> np.ndarray:
    """Holm (family-wise error) or Benjamini-Hochberg (false discovery rate) adjusted p-values."""
    check_param("correction", method, method in CORRECTIONS, " or ".join(repr(c) for c in CORRECTIONS))
    p = np.asarray(p, dtype=float)
    m = len(p)
    if not m:
        return p.copy()
    order = np.argsort(p, kind="stable")
    ranked = p[order]
    if method == "holm":
        adj = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * ranked))
    else:
        adj = np.minimum.accumulate((m / np.arange(1, m + 1) * ranked)[::-1])[::-1]
        adj = np.minimum(adj, 1.0)
    out = np.empty(m)
    out[order] = adj
    return out
