"""How well a clustering of the failures recovers the planted groups.

- best-F1 per group: precision, recall and F1 of the cluster that matches the group best (unclustered is never a
  match); the mean over groups is the headline figure;
- ARI over the planted failures (truth = group, each unclustered failure its own singleton, so noise is not
  rewarded);
- unclustered share of all failures;
- clusters per group: the clusters the group makes up the majority of (one concept should be one cluster: 1 is
  right, 2 is a split, 0 is a group no cluster is about);
- merged pairs: pairs of groups that share a cluster holding at least a quarter of each, where each is at least a
  fifth of the cluster (two error types reported as one).

For a method with parent clusters (ours), the driver also scores the upper level (a failure's parent, or its
cluster where it has none): the two-level best-F1 of a group is the better of the two levels, and merged pairs at
the upper level say whether a parent lumps planted groups together.
"""

from __future__ import annotations

import numpy as np

MERGE_SHARE = 0.25  # of each group's failures in the shared cluster
MERGE_PURITY = 0.2  # of the cluster's failures from each group


def score(truth: np.ndarray, labels: np.ndarray, n_groups: int) -> dict:
    """`truth`: group per failure (>= 0), anything negative for background; `labels`: cluster per failure (-1
    unclustered)."""
    from sklearn.metrics import adjusted_rand_score

    truth, labels = np.asarray(truth), np.asarray(labels)
    ids = np.unique(labels[labels >= 0])
    sizes = {int(c): int((labels == c).sum()) for c in ids}
    groups, pieces = [], []
    for g in range(n_groups):
        member = truth == g
        best = (0.0, 0.0, 0.0)
        count = 0
        for c in ids:
            inter = int((member & (labels == c)).sum())
            if inter:
                p, r = inter / sizes[int(c)], inter / int(member.sum())
                best = max(best, (p, r, 2 * p * r / (p + r)), key=lambda t: t[2])
                count += p > 0.5
        groups.append(best)
        pieces.append(count)
    merged = 0
    for c in ids:
        inside = labels == c
        heavy = [g for g in range(n_groups)
                 if (truth == g).any() and (inside & (truth == g)).sum() >= MERGE_SHARE * (truth == g).sum()
                 and (inside & (truth == g)).sum() >= MERGE_PURITY * sizes[int(c)]]
        merged += len(heavy) * (len(heavy) - 1) // 2
    planted = truth >= 0
    predicted = labels[planted].copy()
    noise = predicted < 0
    predicted[noise] = 1_000_000 + np.arange(noise.sum())
    out = {"groups": groups, "mean_f1": float(np.mean([g[2] for g in groups])) if groups else float("nan"),
           "ari": float(adjusted_rand_score(truth[planted], predicted)) if planted.any() else float("nan"),
           "noise": float((labels < 0).mean()) if len(labels) else 0.0, "clusters": len(ids),
           "pieces": pieces, "merged": merged}
    return out


def repeated_stems(keywords) -> float:
    """Share of clusters whose first three keywords hold two words of one stem (`economy`, `economic`)."""
    from erroranalysis.cluster import same_stem, stem

    def repeats(top) -> bool:
        stems = [stem(w) for k in top for w in str(k).split()]
        return any(same_stem(a, b) for i, a in enumerate(stems) for b in stems[i + 1:])

    keywords = list(keywords)
    return float(np.mean([repeats(list(k)[:3]) for k in keywords])) if keywords else 0.0
