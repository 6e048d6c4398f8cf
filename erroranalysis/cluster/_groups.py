"""Slice groups: failures of a strong error slice the embedding did not group become one cluster; cluster ids by
size.
"""

from __future__ import annotations

import numpy as np


def take_out_groups(labels: np.ndarray, groups: np.ndarray, *, min_size: int, max_purity: float = 0.7
                    ) -> tuple[np.ndarray, dict[int, int]]:
    """Take the failures of each group that the clustering did not already give its own cluster(s) out into a
    cluster of their own.

    labels: cluster per failure (-1 unclustered); groups: group per failure (-1 none). Groups are tried in
    increasing id order (slice ids rank best first). A group with at least `min_size` failures is taken out when
    its purity (see `group_scatter`) is below `max_purity`: its failures are a minority of the clusters they
    landed in, whether scattered over many or mostly inside one broader cluster, so the embedding did not see
    what they share. A group that fills the clusters it is in (one cluster, or sub-type clusters) is left alone.
    (The planted suite, benchmarks/clustering_quality.py, measured +0.05 mean best-F1 over the union of its
    tuning scenarios against also sparing a group that one cluster holds half of.) A cluster left with fewer than
    `min_size` failures is dissolved (its failures become unclustered). Returns the new labels and {new cluster
    id: group id}.
    """
    labels = np.asarray(labels, dtype=np.int64).copy()
    groups = np.asarray(groups, dtype=np.int64)
    taken: dict[int, int] = {}
    next_id = int(labels.max()) + 1 if len(labels) else 0
    for g in np.unique(groups[groups >= 0]):
        rows = np.flatnonzero(groups == g)
        if len(rows) < min_size:
            continue
        if group_scatter(labels, rows)[1] >= max_purity:
            continue
        touched = {int(c) for c in labels[rows] if c >= 0}
        labels[rows] = next_id
        taken[next_id] = int(g)
        next_id += 1
        for c in touched:  # what is left of a cluster the group was taken from
            left = labels == c
            if 0 < left.sum() < min_size:
                labels[left] = -1
    return labels, taken


def group_scatter(labels: np.ndarray, rows: np.ndarray) -> tuple[float, float]:
    """How the clustering spread the failures `rows`: (the largest share of them in one cluster, purity), where
    purity is the mean over `rows` of the share of their cluster's failures that are among `rows` (0 when
    unclustered)."""
    largest, total = 0, 0.0
    for c, count in zip(*np.unique(labels[rows], return_counts=True)):
        if c >= 0:  # each of the `count` rows in cluster c scores count / |c|
            largest = max(largest, int(count))
            total += count * count / int((labels == c).sum())
    return largest / len(rows), total / len(rows)


def relabel_by_size(labels: np.ndarray) -> tuple[np.ndarray, dict[int, int]]:
    """Renumber clusters 0.. by size, largest first (ties: first seen first); -1 stays -1."""
    labels = np.asarray(labels, dtype=np.int64)
    ids = [int(c) for c in np.unique(labels) if c >= 0]
    mapping = size_order({c: int((labels == c).sum()) for c in ids},
                         {c: int(np.flatnonzero(labels == c)[0]) for c in ids})
    out = np.full(len(labels), -1, dtype=np.int64)
    for old, new in mapping.items():
        out[labels == old] = new
    return out, mapping


def size_order(sizes: dict[int, int], first: dict[int, int]) -> dict[int, int]:
    """{old id: new id} numbering clusters 0.. by `sizes`, largest first (ties: smallest `first` row first): the
    rule of `relabel_by_size`, from counts that blocks of rows can sum."""
    order = sorted(sizes, key=lambda c: (-sizes[c], first[c]))
    return {int(c): i for i, c in enumerate(order)}
