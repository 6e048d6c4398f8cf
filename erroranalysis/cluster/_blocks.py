"""The clusterer (HDBSCAN) and feature blocks appended to the reduced coordinates (the confusion pair).
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from erroranalysis.cluster._params import MIN_CLUSTER_SIZE, MIN_SAMPLES, PAIR_WEIGHT
from erroranalysis.core.validation import check_param


class Clusterer(Protocol):
    def fit(self, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


class HDBSCANClusterer:
    """HDBSCAN (excess-of-mass selection); strengths are its membership probabilities."""

    def __init__(self, min_cluster_size: int, min_samples: int | None = None, selection: str = "eom"):
        # the rules of ClusteringParams, for a clusterer built by hand
        check_param("min_cluster_size", min_cluster_size, MIN_CLUSTER_SIZE.ok(min_cluster_size),
                    MIN_CLUSTER_SIZE.describe())
        check_param("min_samples", min_samples, min_samples is None or MIN_SAMPLES.ok(min_samples),
                    MIN_SAMPLES.describe() + " or None")
        check_param("selection", selection, selection in ("eom", "leaf"), "'eom' or 'leaf'")
        self.min_cluster_size = min_cluster_size
        self.min_samples = min_samples
        self.selection = selection

    def fit(self, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(Y)
        if n < self.min_cluster_size:
            return np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.float32)
        import hdbscan

        model = hdbscan.HDBSCAN(min_cluster_size=self.min_cluster_size,
                                min_samples=min(self.min_samples or self.min_cluster_size, n - 1),
                                cluster_selection_method=self.selection, core_dist_n_jobs=1)
        labels = model.fit_predict(np.asarray(Y, dtype=np.float64))
        return labels.astype(np.int64), np.nan_to_num(model.probabilities_).astype(np.float32)


class FeatureBlock(Protocol):
    """Extra columns that take part in clustering beside the reduced coordinates (error-aware options)."""

    name: str
    weight: float

    def transform(self, frame) -> np.ndarray: ...


class ConfusionPairFeature:
    """One-hot (label, pred) pair: with weight w, two failures of different pairs sit w apart (coordinates are
    standardized to unit spread first). 0.3 to 0.7 nudges clusters toward one confusion each."""

    name = "confusion_pair"

    def __init__(self, weight: float = 0.5):
        check_param("pair_weight", weight, PAIR_WEIGHT.ok(weight), PAIR_WEIGHT.describe())
        self.weight = float(weight)

    def transform(self, frame) -> np.ndarray:
        pairs = (frame["label"].astype(str) + "\x1f" + frame["pred"].astype(str)).to_numpy()
        values, inverse = np.unique(pairs, return_inverse=True)
        out = np.zeros((len(pairs), len(values)), dtype=np.float32)
        out[np.arange(len(pairs)), inverse] = 1.0 / math.sqrt(2)
        return out
