"""The paired statistics of a comparison, pure functions over arrays: per-class counts from a confusion
matrix, paired bootstrap intervals, McNemar's test, and the one-sided test of the regression gate.
"""

from __future__ import annotations

import math

import numpy as np

from erroranalysis.core.errors import DataError
from erroranalysis.core.params import is_int
from erroranalysis.core.validation import check_param

LEVEL = 0.95
EXACT_BELOW = 25  # McNemar: exact binomial test when fixed + broken is below this
BOOTSTRAP_CELLS = 4_000_000
PER_CLASS = ("precision", "recall", "f1")


def stats_from_confusion(cm: np.ndarray) -> dict[str, np.ndarray]:
    """Accuracy, macro and weighted scores and per-class precision/recall/F1 of confusion counts [..., k, k]."""
    from erroranalysis.metrics import scores_from_confusion

    s = scores_from_confusion(cm)
    n = cm.sum(axis=(-2, -1)).astype(np.float64)
    n_safe = np.where(n > 0, n, 1.0)
    out = {"accuracy": np.trace(cm, axis1=-2, axis2=-1) / n_safe,
           "macro_f1": s["f1"].mean(axis=-1), "macro_precision": s["precision"].mean(axis=-1),
           "macro_recall": s["recall"].mean(axis=-1),
           "weighted_f1": (s["f1"] * s["support"]).sum(axis=-1) / n_safe}
    for name in PER_CLASS:
        out[name] = s[name]
    out["support"] = s["support"]
    return out


def paired_bootstrap(t: np.ndarray, pa: np.ndarray, pb: np.ndarray, k: int, *, n_resamples: int = 1000,
                     seed: int = 0, level: float = LEVEL) -> dict:
    """Point values for runs a and b and paired percentile intervals of `b - a` for every statistic of
    `stats_from_confusion`, from integer codes of gold labels `t` and the two runs' predictions.

    Resampling examples with replacement (the same rows for both runs) puts a multinomial number of rows in each
    (gold, pred a, pred b) cell, so the cells are drawn directly: the cost grows with the non-empty cells, not rows.
    """
    check_param("n_resamples", n_resamples, is_int(n_resamples) and n_resamples >= 1, "an integer >= 1")
    check_param("seed", seed, is_int(seed) and seed >= 0, "an integer >= 0")
    check_param("level", level, isinstance(level, float) and 0.5 <= level < 1, "a float in [0.5, 1)")
    t, pa, pb = (np.asarray(x, dtype=np.int64) for x in (t, pa, pb))
    n = len(t)
    if n == 0:
        raise DataError("no examples to compare.")
    from scipy import sparse

    from erroranalysis.metrics import confusion_counts

    cm_a, cm_b = confusion_counts(t, pa, k), confusion_counts(t, pb, k)
    point_a, point_b = stats_from_confusion(cm_a), stats_from_confusion(cm_b)
    joint = (t * k + pa) * k + pb
    cells, counts = np.unique(joint, return_counts=True)
    m = len(cells)
    cell_a = cells // k                    # t * k + pa
    cell_b = (cells // (k * k)) * k + cells % k  # t * k + pb
    ma = sparse.csr_matrix((np.ones(m), (np.arange(m), cell_a)), shape=(m, k * k))
    mb = sparse.csr_matrix((np.ones(m), (np.arange(m), cell_b)), shape=(m, k * k))
    rng = np.random.default_rng(seed)
    chunk = max(1, BOOTSTRAP_CELLS // max(m, k * k))
    deltas: dict[str, list] = {name: [] for name in point_a if name != "support"}
    for size in np.diff(np.r_[0:n_resamples:chunk, n_resamples]):
        draws = rng.multinomial(n, counts / n, size=int(size)).astype(np.float64)  # [size, m]
        da = np.asarray((ma.T @ draws.T).T).reshape(-1, k, k)
        db = np.asarray((mb.T @ draws.T).T).reshape(-1, k, k)
        sa, sb = stats_from_confusion(da), stats_from_confusion(db)
        for name in deltas:
            deltas[name].append(sb[name] - sa[name])
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    ci = {}
    for name, parts in deltas.items():
        values = np.concatenate(parts, axis=0)
        lo, hi = np.percentile(values, q, axis=0)
        ci[name] = np.stack([lo, hi], axis=-1)
    return {"a": point_a, "b": point_b, "ci": ci, "n": n, "n_resamples": n_resamples, "seed": seed, "level": level}


def mcnemar(correct_a: np.ndarray, correct_b: np.ndarray) -> dict:
    """McNemar's test of paired correctness. `fixed` = wrong in a, right in b; `broken` = right in a, wrong in b.
    Exact two-sided binomial test when fixed + broken < 25, else chi-square with continuity correction."""
    from scipy import stats

    a = np.asarray(correct_a, dtype=bool)
    b = np.asarray(correct_b, dtype=bool)
    if a.shape != b.shape:
        raise DataError(f"correct_a has {a.size} rows and correct_b {b.size}; pass paired arrays.")
    fixed, broken = int((~a & b).sum()), int((a & ~b).sum())
    d = fixed + broken
    if d == 0:
        return {"fixed": 0, "broken": 0, "n_discordant": 0, "statistic": 0.0, "p_value": 1.0,
                "method": "no discordant pairs"}
    if d < EXACT_BELOW:
        p = float(stats.binomtest(min(fixed, broken), d, 0.5).pvalue)
        return {"fixed": fixed, "broken": broken, "n_discordant": d, "statistic": float(min(fixed, broken)),
                "p_value": min(1.0, p), "method": "exact binomial"}
    stat = (abs(fixed - broken) - 1) ** 2 / d
    return {"fixed": fixed, "broken": broken, "n_discordant": d, "statistic": float(stat),
            "p_value": float(stats.chi2.sf(stat, 1)), "method": "chi-square with continuity correction"}


def worse_p(broken: int, fixed: int) -> float:
    """One-sided exact binomial p of `broken` newly failing against `fixed` newly right examples (the discordant
    pairs of McNemar's test): how likely this many more breaks than fixes are if the change did nothing."""
    from scipy import stats

    n = int(broken) + int(fixed)
    return 1.0 if n == 0 else float(stats.binomtest(int(broken), n, 0.5, alternative="greater").pvalue)


def finite(x) -> float | None:
    """x as a float rounded to 6 places, or None for NaN, infinity or what is not a number (JSON has neither)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) or math.isinf(v) else round(v, 6)
