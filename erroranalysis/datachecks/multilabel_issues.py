"""Label issues of a multi-label run by cleanlab's multi-label confident learning: one row per example, the columns
of `label_issues.COLUMNS`.

- `label_issue_score`: 1 - cleanlab's multi-label quality score (`multilabel_classification.rank.
  get_label_quality_scores`: each label's quality as a binary problem, pooled by an exponential moving average);
- `label_issue`: cleanlab's flag (`multilabel_classification.filter.find_label_issues`);
- `suggested_label`: the set the model predicts at 0.5, joined as the run's label column is.

The probabilities are the model's sigmoids (a run's `probs.npy`), out of sample since the model never trained on
the eval set.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from erroranalysis.sources.gold import label_set


def find_multilabel_issues(gold: np.ndarray, probs: np.ndarray, classes: list[str], *,
                           method: str = "self_confidence", filter_by: str = "prune_by_noise_rate") -> pd.DataFrame:
    """`gold` multi-hot [n, k], `probs` sigmoid [n, k] in `classes` order."""
    import warnings

    from cleanlab.multilabel_classification import filter as ml_filter

    gold, probs = np.asarray(gold, dtype=np.int64), clip(probs)
    scores, suggested = multilabel_scores(gold, probs, classes, method)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # cleanlab warns about classes with few examples; the summary says so
        try:
            flags = ml_filter.find_label_issues(_label_lists(gold), probs, filter_by=filter_by)
        except (ValueError, IndexError):  # too few examples of a label for the confident joint: none flagged
            flags = np.zeros(len(gold), dtype=bool)
    return pd.DataFrame({"label_issue_score": scores, "label_issue": np.asarray(flags, dtype=bool),
                         "suggested_label": suggested})


def clip(probs: np.ndarray) -> np.ndarray:
    """The sigmoids as the checks use them: float64, kept off 0 and 1."""
    return np.clip(np.asarray(probs, dtype=np.float64), 1e-6, 1 - 1e-6)


def multilabel_scores(gold: np.ndarray, probs: np.ndarray, classes: list[str],
                      method: str = "self_confidence") -> tuple[np.ndarray, list[str]]:
    """Per row (so any block of rows gives its rows' values): 1 - cleanlab's multi-label quality score, and the set
    predicted at 0.5. `probs` as `clip` leaves them."""
    import warnings

    from cleanlab.multilabel_classification import rank as ml_rank

    names = np.asarray(classes, dtype=object)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quality = ml_rank.get_label_quality_scores(_label_lists(gold), probs, method=method)
    return (1 - np.asarray(quality)).astype(np.float32), [label_set((p >= 0.5).astype(np.uint8), names) for p in probs]


def binary_problems(gold: np.ndarray, probs: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """cleanlab's one-vs-rest reduction (`multilabel_classification.filter.find_multilabel_issues_per_class`): per
    class, (labels 0/1, [1 - p, p]). An example's flag is the OR of its flags in these binary problems, each
    cleanlab's `filter.find_label_issues`, so the blockwise parts of those (`datachecks.blockwise`) give it."""
    return [(np.asarray(gold[:, j], dtype=np.int64), np.stack([1 - probs[:, j], probs[:, j]], axis=1))
            for j in range(probs.shape[1])]


def flags_possible(class_counts: list[np.ndarray], filter_by: str) -> bool:
    """False where cleanlab's multi-label filter raises, so `find_multilabel_issues` flags nothing: a class every
    example carries (its binary labels hold one class), or with predicted_neq_given one no example carries either.
    `class_counts`: each binary problem's [negatives, positives]."""
    if filter_by == "predicted_neq_given":
        return not any((np.asarray(c) > 0).sum() < 2 for c in class_counts)
    return not any(c[0] == 0 and c[1] > 0 for c in class_counts)


def _label_lists(gold: np.ndarray) -> list[list[int]]:
    return [list(map(int, np.flatnonzero(row))) for row in gold]
