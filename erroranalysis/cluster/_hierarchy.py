"""Two levels of error types: parents over the clusters, from the clusters' own hierarchy.

Engineers browse 40 clusters more easily as a few coarse types with sub-types. The parents come from average
linkage over the clusters' mean directions (cosine), not from the clusterer's internals, so they exist for any
clusterer, across the systematic and scattered tiers and for slice clusters alike.
"""

from __future__ import annotations

import numpy as np

from erroranalysis.cluster._neighbors import unit_rows


def cluster_parents(vectors: np.ndarray, labels: np.ndarray, *, min_similarity: float = 0.6) -> dict[int, int]:
    """{cluster id: parent id} for the clusters that share a parent; a cluster without one is left out.

    Each cluster's direction is the normalized mean of its members' unit vectors. Average linkage over those
    directions joins clusters while the mean cosine between the two sides is at least `min_similarity`; every
    group of two or more clusters so joined is a parent. Parent ids run 0.. by the number of failures under them,
    largest first (ties: smallest cluster id first).
    """
    labels = np.asarray(labels, dtype=np.int64)
    ids = np.unique(labels[labels >= 0])
    if len(ids) < 2:
        return {}
    unit = unit_rows(vectors)
    return parents_of({int(c): unit[labels == c].sum(axis=0, dtype=np.float64) for c in ids},
                      {int(c): int((labels == c).sum()) for c in ids}, min_similarity=min_similarity)


def parents_of(direction_sums: dict[int, np.ndarray], sizes: dict[int, int], *, min_similarity: float = 0.6
               ) -> dict[int, int]:
    """`cluster_parents` from each cluster's sum of its members' unit vectors and its size: sums that blocks of
    rows can add up (the `--engine ray` cluster stage)."""
    ids = np.array(sorted(direction_sums), dtype=np.int64)
    if len(ids) < 2:
        return {}
    centres = unit_rows(np.stack([np.asarray(direction_sums[int(c)], dtype=np.float64) / max(sizes[int(c)], 1)
                                  for c in ids]))
    from scipy.cluster.hierarchy import fcluster, linkage

    tree = linkage(centres.astype(np.float64), method="average", metric="cosine")
    side = fcluster(tree, t=1.0 - min_similarity, criterion="distance")
    groups = [ids[side == s] for s in np.unique(side)]
    groups = [g for g in groups if len(g) >= 2]
    groups.sort(key=lambda g: (-sum(sizes[int(c)] for c in g), int(g.min())))
    return {int(c): p for p, g in enumerate(groups) for c in g}
