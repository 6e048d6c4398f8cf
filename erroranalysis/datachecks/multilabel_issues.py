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
    from cleanlab.multilabel_classification import rank as ml_rank

    gold = np.asarray(gold, dtype=np.int64)
    probs = np.clip(np.asarray(probs, dtype=np.float64), 1e-6, 1 - 1e-6)
    labels = [list(map(int, np.flatnonzero(row))) for row in gold]
    names = np.asarray(classes, dtype=object)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # cleanlab warns about classes with few examples; the summary says so
        quality = ml_rank.get_label_quality_scores(labels, probs, method=method)
        try:
            flags = ml_filter.find_label_issues(labels, probs, filter_by=filter_by)
        except (ValueError, IndexError):  # too few examples of a label for the confident joint: none flagged
            flags = np.zeros(len(gold), dtype=bool)
    return pd.DataFrame({"label_issue_score": (1 - np.asarray(quality)).astype(np.float32),
                         "label_issue": np.asarray(flags, dtype=bool),
                         "suggested_label": [label_set((p >= 0.5).astype(np.uint8), names) for p in probs]})
