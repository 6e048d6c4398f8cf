"""Nearest neighbours by cosine: the local error rate of failures, and noise assignment by neighbour vote.
"""

from __future__ import annotations

import numpy as np


def unit_rows(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float32)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.maximum(norms, 1e-12)


def knn_cosine(queries: np.ndarray, base: np.ndarray, k: int, *, exclude: np.ndarray | None = None,
               return_distance: bool = False, budget: int = 32_000_000):
    """Indices [len(queries), k] of the k most cosine-similar rows of `base`, nearest first, computed in chunks
    of at most `budget` similarities (128 MB) so memory stays bounded; with `return_distance`, also the cosine
    distances (1 - similarity). Exact (brute force); uses torch's matmul and top-k when torch is installed.

    `exclude[i]` is a row of `base` that query i must not return (itself); -1 for none.
    """
    q, b = unit_rows(queries), unit_rows(base)
    k = min(k, len(b) - (0 if exclude is None else 1))
    out = np.zeros((len(q), max(k, 0)), dtype=np.int64)
    dist = np.zeros((len(q), max(k, 0)), dtype=np.float32)
    if k <= 0:
        return (out, dist) if return_distance else out
    chunk = max(64, budget // max(len(b), 1))
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency; numpy does the same, slower
        torch = None
    if torch is not None:
        bt = torch.from_numpy(b)
        with torch.inference_mode():
            for start in range(0, len(q), chunk):
                sims = torch.from_numpy(q[start:start + chunk]) @ bt.T
                if exclude is not None:
                    ex = torch.from_numpy(np.asarray(exclude[start:start + chunk], dtype=np.int64))
                    rows = torch.nonzero(ex >= 0).flatten()
                    sims[rows, ex[rows]] = -float("inf")
                values, index = torch.topk(sims, k, dim=1, largest=True, sorted=True)
                out[start:start + chunk] = index.numpy()
                dist[start:start + chunk] = 1.0 - values.numpy()
    else:
        for start in range(0, len(q), chunk):
            sims = q[start:start + chunk] @ b.T
            if exclude is not None:
                ex = exclude[start:start + chunk]
                rows = np.flatnonzero(ex >= 0)
                sims[rows, ex[rows]] = -np.inf
            top = np.argpartition(-sims, k - 1, axis=1)[:, :k] if k < sims.shape[1] else \
                np.tile(np.arange(sims.shape[1]), (len(sims), 1))
            top_sims = np.take_along_axis(sims, top, axis=1)
            order = np.argsort(-top_sims, axis=1, kind="stable")
            out[start:start + chunk] = np.take_along_axis(top, order, axis=1)
            dist[start:start + chunk] = 1.0 - np.take_along_axis(top_sims, order, axis=1)
    np.clip(dist, 0.0, 2.0, out=dist)
    return (out, dist) if return_distance else out


def local_error_rate(vectors: np.ndarray, failed: np.ndarray, *, k: int = 15, smooth: int = 5,
                     alpha: float = 0.2) -> tuple[np.ndarray, np.ndarray, float]:
    """Per failure: (smoothed local error rate, systematic flag), and the overall failure share.

    A failure's count is the number of failing examples among its k nearest other examples (cosine). It is
    smoothed by averaging it with the counts of the failures among those neighbours (at most `smooth`, nearest
    first), so an isolated failure keeps its own count and a failure inside a failing region shares the
    region's. A failure is systematic when a binomial test of that count among k neighbours against the overall
    failure share gives p < alpha.
    """
    from scipy.stats import binom

    failed = np.asarray(failed, dtype=bool)
    fail_rows = np.flatnonzero(failed)
    base = float(failed.mean())
    k = min(k, len(vectors) - 1)
    neighbours = knn_cosine(vectors[fail_rows], vectors, k, exclude=fail_rows)
    is_fail = failed[neighbours]
    counts = is_fail.sum(axis=1).astype(np.float64)
    if smooth:
        position = np.full(len(vectors), -1, dtype=np.int64)
        position[fail_rows] = np.arange(len(fail_rows))
        # the first `smooth` failing neighbours of each failure
        rank = np.cumsum(is_fail, axis=1)
        use = is_fail & (rank <= smooth)
        neighbour_counts = np.where(use, counts[np.maximum(position[neighbours], 0)], 0.0)
        counts = (counts + neighbour_counts.sum(axis=1)) / (1 + use.sum(axis=1))
    rate = counts / max(k, 1)
    p = binom.sf(np.round(counts) - 1, k, base)
    return rate.astype(np.float32), p < alpha, base


def assign_noise_by_vote(Z: np.ndarray, labels: np.ndarray, strength: np.ndarray, threshold: float, k: int = 10):
    """Unclustered rows join the cluster most of their k nearest clustered rows belong to, when their
    membership (`_knn_vote`'s strength) reaches `threshold`; they get that membership, halved (a reassigned
    point is never as strong a member as a core point)."""
    labels, strength = labels.copy(), strength.copy()
    noise = labels < 0
    clustered = np.flatnonzero(~noise)
    if not noise.any() or len(clustered) == 0:
        return labels, strength, np.zeros(len(labels), dtype=bool)
    lab, member = _knn_vote(Z[clustered], labels[clustered], Z[noise], k=k)
    ok = (member >= threshold) & (lab >= 0)
    rows = np.flatnonzero(noise)[ok]
    labels[rows] = lab[ok]
    strength[rows] = member[ok] * 0.5
    moved = np.zeros(len(labels), dtype=bool)
    moved[rows] = True
    return labels, strength, moved


def _knn_vote(Y_ref: np.ndarray, ref_labels: np.ndarray, Y_query: np.ndarray, k: int = 10):
    """Majority label among the k nearest reference rows (euclidean) and a membership strength in [0, 1]:
    the label's share of the votes, times min(1, d90 / d), where d is the query's mean distance to those k rows
    and d90 the 90th percentile of the same distance among the reference rows, so far outliers stay weak."""
    from sklearn.neighbors import NearestNeighbors

    k = max(1, min(k, len(Y_ref)))
    index = NearestNeighbors(n_neighbors=k).fit(Y_ref)
    dist, idx = index.kneighbors(Y_query)
    if len(Y_ref) > 1:
        sample = Y_ref if len(Y_ref) <= 5000 else Y_ref[np.random.default_rng(0).choice(len(Y_ref), 5000, replace=False)]
        ref_dist, _ = NearestNeighbors(n_neighbors=min(k + 1, len(Y_ref))).fit(Y_ref).kneighbors(sample)
        d90 = float(np.quantile(ref_dist[:, 1:].mean(axis=1), 0.9))
    else:
        d90 = float(dist.mean())
    closeness = np.minimum(1.0, d90 / np.maximum(dist.mean(axis=1), 1e-12))
    out, share = majority_vote(ref_labels[idx])
    return out, (share * closeness).astype(np.float32)


def majority_vote(votes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of labels: the most frequent (ties: smallest) and its share."""
    out = np.full(len(votes), -1, dtype=np.int64)
    share = np.zeros(len(votes), dtype=np.float32)
    for i, row in enumerate(votes):
        values, counts = np.unique(row, return_counts=True)
        j = counts.argmax()
        out[i], share[i] = values[j], counts[j] / len(row)
    return out, share
