"""Metrics as pure functions over arrays: the content of a run's `metrics.json`.
"""

from __future__ import annotations

from erroranalysis.metrics.classification import (
    BOOTSTRAP_CELLS,
    CI_LEVEL,
    MISSING,
    OTHER,
    QUANTILE_BUCKETS,
    TOP_CONFUSIONS,
    bootstrap_intervals,
    brier_score,
    bucket_values,
    calibration,
    compute_metrics,
    confusion_counts,
    encode_labels,
    group_metrics,
    scores_from_confusion,
    top_confusions,
    word_counts,
)
from erroranalysis.metrics.generation import adjust_metrics, generation_metrics, low_loss_failures
