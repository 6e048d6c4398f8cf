"""What a fit assigns to each failure (cluster, strength, tier, coordinates), and placing the failures a fit on a
sample left out: each joins its nearest fitted neighbours."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from erroranalysis.cluster._neighbors import knn_cosine, majority_vote

ALL = "all"


@dataclass
class Assigned:
    """Per failure: cluster (-1 none), membership strength, tier, whether noise assignment moved it, and 2-D-ish
    coordinates; with each cluster's tier."""

    labels: np.ndarray
    strength: np.ndarray
    tier: np.ndarray
    reassigned: np.ndarray
    coords: np.ndarray | None = None
    cluster_tier: dict = field(default_factory=dict)

    @classmethod
    def empty(cls, n: int) -> Assigned:
        return cls(np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.float32), np.full(n, ALL, dtype=object),
                   np.zeros(n, dtype=bool))


def place_the_rest(X, fit_rows, fitted: Assigned, Y, params: dict) -> tuple[Assigned, str]:
    """All failures: the fitted ones as clustered; above `max_fit`, the rest join their nearest fitted
    neighbours (cosine, original space), with a weaker membership."""
    n, m = len(X), len(fit_rows)
    placed = Assigned.empty(n)
    placed.cluster_tier = fitted.cluster_tier
    placed.labels[fit_rows], placed.strength[fit_rows] = fitted.labels, fitted.strength
    placed.tier[fit_rows], placed.reassigned[fit_rows] = fitted.tier, fitted.reassigned
    placed.coords = np.zeros((n, Y.shape[1]), dtype=np.float32)
    placed.coords[fit_rows] = Y
    if m == n:
        return placed, ""
    rest = np.setdiff1d(np.arange(n), fit_rows)
    near, dist = knn_cosine(X[rest], X[fit_rows], 10, return_distance=True)
    lab, st = majority_vote(fitted.labels[near])
    _, ref_dist = knn_cosine(X[fit_rows[: min(m, 5000)]], X[fit_rows], 11, return_distance=True)
    d90 = float(np.quantile(ref_dist[:, 1:].mean(axis=1), 0.9))
    st = st * np.minimum(1.0, d90 / np.maximum(dist.mean(axis=1), 1e-12))
    placed.labels[rest], placed.strength[rest] = lab, np.where(lab >= 0, st * 0.5, 0)
    placed.tier[rest] = fitted.tier[near[:, 0]]
    weights = 1.0 / np.maximum(dist, 1e-6)
    placed.coords[rest] = (Y[near] * weights[..., None]).sum(axis=1) / weights.sum(axis=1, keepdims=True)
    params["fit_sample"] = m
    how = " stratified by confusion pair" if params.get("fit_sample_strata") == "label, pred" else ""
    return placed, f"fitted on a sample of {m} of {n} failures{how}; the rest joined their nearest neighbours"
