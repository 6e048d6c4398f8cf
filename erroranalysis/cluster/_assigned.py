"""What a fit assigns to each failure (cluster, strength, tier, coordinates), and placing the failures a fit on a
sample left out: each joins its nearest fitted neighbours."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from erroranalysis.cluster._neighbors import knn_cosine, majority_vote

ALL = "all"
MODE_STRATA = "failure mode"  # a generation run's fit sample: stratified by `_modes.mode_of`


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
    neighbours (cosine, original space), with a weaker membership (`place`)."""
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
    X_fit = X[fit_rows]
    out, near, dist = place(X[rest], X_fit, fitted, reference_distance(X_fit))
    placed.labels[rest], placed.strength[rest], placed.tier[rest] = out.labels, out.strength, out.tier
    placed.coords[rest] = near_mean(Y, near, dist)
    params["fit_sample"] = m
    return placed, sample_note(m, n, params)


def sample_note(m: int, n: int, params: dict) -> str:
    how = {"label, pred": " stratified by confusion pair", MODE_STRATA: " stratified by failure mode"}.get(
        params.get("fit_sample_strata"), "")
    rest = "their failure mode's error type" if params.get("fit_sample_strata") == MODE_STRATA else \
        "their nearest neighbours"
    return f"fitted on a sample of {m} of {n} failures{how}; the rest joined {rest}"


def reference_distance(X_fit: np.ndarray) -> float:
    """The 90th percentile of the fitted failures' mean distance to their 10 nearest fitted neighbours (over at
    most 5,000 of them): a placed failure further out than that gets a proportionally weaker membership."""
    m = len(X_fit)
    _, ref_dist = knn_cosine(X_fit[: min(m, 5000)], X_fit, 11, return_distance=True)
    return float(np.quantile(ref_dist[:, 1:].mean(axis=1), 0.9))


def place(X_rest: np.ndarray, X_fit: np.ndarray, fitted: Assigned, d90: float):
    """(the failures `X_rest` placed: each joins the cluster most of its 10 nearest fitted failures are in, with
    half their vote's strength, less when further out than `d90`; the tier of the nearest; their 10 nearest fitted
    rows and distances). One rule, in process and on the workers of `--engine ray`."""
    placed = Assigned.empty(len(X_rest))
    if not len(X_rest):
        return placed, np.zeros((0, 10), np.int64), np.zeros((0, 10), np.float32)
    near, dist = knn_cosine(X_rest, X_fit, 10, return_distance=True)
    lab, st = majority_vote(fitted.labels[near])
    st = st * np.minimum(1.0, d90 / np.maximum(dist.mean(axis=1), 1e-12))
    placed.labels, placed.strength = lab.astype(np.int64), np.where(lab >= 0, st * 0.5, 0).astype(np.float32)
    placed.tier = np.asarray(fitted.tier, dtype=object)[near[:, 0]]
    return placed, near, dist


def near_mean(values: np.ndarray, near: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """The distance-weighted mean of `values` over each row's nearest rows (coordinates of placed failures)."""
    weights = 1.0 / np.maximum(dist, 1e-6)
    return ((values[near] * weights[..., None]).sum(axis=1) / weights.sum(axis=1, keepdims=True)).astype(np.float32)
