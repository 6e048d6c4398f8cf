"""The methods compared on the planted suite; each returns one cluster id per failure (-1 unclustered).

- `ours`: what `erroranalysis run` does: the slice search over the whole eval set (words and phrases, the
  `source` metadata column, length, the true label; `find_slices` defaults), then `FailureClustering` with the
  scattered strong slices taken out as clusters, then `describe_clusters` naming (timed with the rest);
- `ours_no_slices`: the same clustering without the slice groups;
- `plain`: the common script, MiniLM -> UMAP(n_neighbors=15, n_components=5, min_dist=0, cosine, seeded) ->
  HDBSCAN(min_cluster_size=10);
- `bertopic`: `BERTopic().fit_transform(failure texts, embeddings=...)`, its defaults;
- `evoc`: `evoc.EVoC(random_state=seed).fit_predict(failure vectors)`, its defaults (the layer it picks);
- `greedy_words`: the floor a user writes in twenty lines: repeatedly take the word whose failures stand out
  most (binomial test against the base error rate, Bonferroni over the vocabulary) and make its remaining
  failures a cluster.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd


def ours(data: pd.DataFrame, vectors: np.ndarray, seed: int, *, slices: bool = True, slice_params=None,
         group_params=None, **params) -> dict:
    from erroranalysis.cluster import FailureClustering, describe_clusters

    failed = ~data["correct"].to_numpy()
    failures = data[failed].reset_index(drop=True)
    groups = slice_groups(data, failed, slice_params or {}, group_params or {}) if slices else None
    model = FailureClustering(seed=seed, **params).fit(vectors, failed, failures, groups=groups)
    result = model.result_
    table = describe_clusters(failures, result.labels, membership=result.membership, vectors=vectors[failed],
                              correct_texts=data.loc[~failed, "text"].tolist(), kinds=result.cluster_tier,
                              local_error_rate=result.local_error_rate, reassigned=result.reassigned,
                              parents=result.cluster_parent)
    return {"labels": result.labels, "parents": result.parents(), "result": result, "table": table}


def slice_groups(data: pd.DataFrame, failed: np.ndarray, slice_params: dict, group_params: dict) -> np.ndarray:
    """Each failure's strong slice, as a run finds them (the slices stage, then the cluster stage reads them)."""
    from erroranalysis import slices

    features = slices.extract_features(data["text"].tolist(), data[["source"]], labels=data["label"].tolist(),
                                       min_support=slices.default_min_support(len(data)))
    found = slices.find_slices(features, data["correct"].to_numpy(), example_ids=np.arange(len(data)),
                               **slice_params)
    best = slices.slice_groups(found.slices, found.members, example_ids=np.flatnonzero(failed), **group_params)
    return np.array([best.get(i, -1) for i in np.flatnonzero(failed)], dtype=np.int64)


def plain(vectors: np.ndarray, seed: int) -> np.ndarray:
    import hdbscan

    from erroranalysis.cluster import import_umap

    umap = import_umap()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reduced = umap.UMAP(n_neighbors=15, n_components=5, min_dist=0.0, metric="cosine",
                            random_state=seed).fit_transform(vectors)
    return hdbscan.HDBSCAN(min_cluster_size=10).fit_predict(reduced)


def bertopic(texts: list[str], vectors: np.ndarray) -> np.ndarray:
    from bertopic import BERTopic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        topics, _ = BERTopic().fit_transform(texts, embeddings=vectors)
    return np.asarray(topics)


def evoc(vectors: np.ndarray, seed: int) -> np.ndarray:
    import evoc as _evoc

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(_evoc.EVoC(random_state=seed).fit_predict(np.ascontiguousarray(vectors)))


def greedy_words(texts: list[str], failed: np.ndarray, min_size: int = 10, level: float = 0.05) -> np.ndarray:
    """Cluster per failure, from the words whose failures stand out, best first."""
    from scipy.stats import binom
    from sklearn.feature_extraction.text import CountVectorizer

    X = CountVectorizer(binary=True, stop_words="english", min_df=5).fit_transform(texts).tocsc()
    base = failed.mean()
    support = np.asarray(X.sum(axis=0)).ravel()
    left = failed.copy()
    cluster = np.full(len(texts), -1)
    for c in range(100):
        fails = np.asarray(X.T @ left.astype(np.int64)).ravel()
        p = np.where(fails >= min_size, binom.sf(fails - 1, support, base), 1.0)
        best = int(np.argmin(p))
        if p[best] > level / X.shape[1]:
            break
        rows = X[:, best].nonzero()[0]
        rows = rows[left[rows]]
        cluster[rows] = c
        left[rows] = False
    return cluster[failed]
