"""Group failing examples into error types: reduce, cluster, assign; stages injected, defaults sensible.

The pipeline, like BERTopic's but small:

    vectors ──reducer──▶ coordinates ──+ feature blocks──▶ clusterer ──▶ noise assignment ──▶ labels
       │                                     (confusion pair, slices, ...)
       └── local error rate over all examples ──▶ systematic / scattered tiers (error-aware split)

- **Reducer** (`UMAPReducer` by default, `PCAReducer`, `NoReducer`): anything with `fit_transform(X)`.
- **Feature blocks** (`ConfusionPairFeature`; slice membership can be one): anything with `name`, `weight` and
  `transform(frame) -> [n, k]`, appended to the standardized coordinates with that weight.
- **Clusterer** (`HDBSCANClusterer`): anything with `fit(Y) -> (labels, strengths)`.
- **Error-aware tiers**: when vectors of correct examples are given, each failure's local error rate (share of
  failing examples among its nearest neighbours in the whole eval set, smoothed over its nearest failures) is
  tested against the overall failure share. Failures in regions where the model fails more than it does
  overall ("systematic") are clustered apart from failures scattered among correct examples ("scattered"), so a
  real error type is not diluted by unrelated failures of the same class.
- **Noise assignment**: an unclustered failure joins the cluster most of its nearest clustered neighbours (of
  its own tier) belong to when its membership strength reaches `assign_noise`. Never across tiers: a scattered
  failure that lands near a systematic cluster is not part of that error type.
- **Slice groups** (`fit(..., groups=...)`): a failure's strong error slice (`slices.slice_groups`), e.g. texts
  that mention the weather. An embedding groups texts by their dominant topic, so such a concept's failures
  end up scattered over topic clusters, each a minority there. When no cluster holds half of a slice's failures
  and they make up less than `group_purity` of the clusters they fall in, they are taken out into one cluster
  of kind "slice". A slice the embedding already groups (mostly one cluster, or clusters it fills) is left alone.

Edges: no failures (nothing to do), fewer than `min_failures` (grouped by confusion pair, and the result says
so), identical vectors (one cluster). Above `max_fit` failures the reducer and clusterer are fitted on a seeded
sample and the rest join their nearest fitted neighbours, so memory and time stay bounded.

Heavy imports (umap, hdbscan, sklearn) happen inside functions. `import_umap()` turns on numba's on-disk cache
for UMAP, so only the first process on a machine pays the ~30 s of compilation.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from erroranalysis.errors import DataError, check_param

REDUCERS = ("umap", "pca", "none")
SYSTEMATIC, SCATTERED, ALL, BY_PAIR, SINGLE, SLICE = ("systematic", "scattered", "all", "confusion_pair", "single",
                                                     "slice")


# -- numba / UMAP ---------------------------------------------------------------------------------------------


def numba_cache_dir():
    from erroranalysis.embedding import cache_root

    return cache_root() / "numba"


def import_umap():
    """Import umap-learn with numba's on-disk cache on for its kernels.

    umap-learn compiles its kernels without `cache=True`, so every new process pays 30 to 45 s. Before the first
    import we point `NUMBA_CACHE_DIR` at `<cache root>/numba` (unless the user set it) and import umap (and
    pynndescent) while `numba.njit`/`numba.jit` default to `cache=True`; later processes load the compiled code.
    """
    import sys

    if "umap" in sys.modules:
        import umap

        return umap
    if not os.environ.get("NUMBA_CACHE_DIR"):
        folder = numba_cache_dir()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            os.environ["NUMBA_CACHE_DIR"] = str(folder)
        except OSError:
            folder = None
    import numba

    if os.environ.get("NUMBA_CACHE_DIR") and not numba.config.CACHE_DIR:
        numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]
    original = numba.njit, numba.jit

    def _cached(decorator):
        def wrapper(*args, **kwargs):
            kwargs.setdefault("cache", True)
            return decorator(*args, **kwargs)

        wrapper.__wrapped__ = decorator
        return wrapper

    numba.njit, numba.jit = _cached(original[0]), _cached(original[1])
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import umap
    finally:
        numba.njit, numba.jit = original
    return umap


# -- reducers -------------------------------------------------------------------------------------------------


class Reducer(Protocol):
    """Vectors [n, d] in, coordinates [n, k] out. Rows beyond `max_fit` never reach the reducer: they are placed
    by their nearest fitted neighbours in the original space."""

    def fit_transform(self, X: np.ndarray) -> np.ndarray: ...


def _unit(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float32)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.maximum(norms, 1e-12)


class UMAPReducer:
    """UMAP to a few dimensions with cosine distance (BERTopic's defaults, seeded), on an exact neighbour graph,
    200 epochs (UMAP's own default above 10,000 points; as good as 500 on the planted benchmark, 2.5x faster)."""

    def __init__(self, n_components: int = 5, n_neighbors: int = 15, min_dist: float = 0.0, seed: int = 0,
                 n_epochs: int | None = 200):
        check_param("n_components", n_components, isinstance(n_components, int) and n_components >= 1,
                    "an integer >= 1")
        check_param("n_neighbors", n_neighbors, isinstance(n_neighbors, int) and n_neighbors >= 2, "an integer >= 2")
        self.n_components = n_components
        self.n_neighbors = n_neighbors
        self.min_dist = min_dist
        self.seed = seed
        self.n_epochs = n_epochs

    def fit_transform(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float32)
        if len(X) <= self.n_components + 2:  # spectral initialisation needs more points than dimensions
            return PCAReducer(self.n_components).fit_transform(X)
        return _umap_precomputed(X, n_components=self.n_components, n_neighbors=self.n_neighbors,
                                 min_dist=self.min_dist, seed=self.seed, n_epochs=self.n_epochs)


class PCAReducer:
    """PCA of the L2-normalized vectors (cosine geometry); cheap, no compilation."""

    def __init__(self, n_components: int = 10, seed: int = 0):
        check_param("n_components", n_components, isinstance(n_components, int) and n_components >= 1,
                    "an integer >= 1")
        self.n_components = n_components
        self.seed = seed

    def fit(self, X: np.ndarray) -> "PCAReducer":
        from sklearn.decomposition import PCA

        X = _unit(X)
        k = max(1, min(self.n_components, X.shape[1], len(X)))
        self.model_ = PCA(n_components=k, random_state=self.seed).fit(X)
        return self

    def fit_transform(self, X: np.ndarray) -> np.ndarray:
        return self.fit(X).transform(X)

    def transform(self, X: np.ndarray) -> np.ndarray:
        Y = self.model_.transform(_unit(X)).astype(np.float32)
        if Y.shape[1] < self.n_components:  # fewer points than components: pad, so shapes stay fixed
            Y = np.hstack([Y, np.zeros((len(Y), self.n_components - Y.shape[1]), dtype=np.float32)])
        return Y


class NoReducer:
    """The L2-normalized vectors themselves (euclidean on unit vectors = cosine)."""

    def fit_transform(self, X: np.ndarray) -> np.ndarray:
        return _unit(X)

    def transform(self, X: np.ndarray) -> np.ndarray:
        return _unit(X)


def make_reducer(name: str, *, n_components: int | None = None, n_neighbors: int = 15, seed: int = 0) -> Reducer:
    check_param("reducer", name, name in REDUCERS, "one of " + ", ".join(REDUCERS))
    if name == "umap":
        return UMAPReducer(n_components=n_components or 5, n_neighbors=n_neighbors, seed=seed)
    if name == "pca":
        return PCAReducer(n_components=n_components or 10, seed=seed)
    return NoReducer()


# -- clusterers -----------------------------------------------------------------------------------------------


class Clusterer(Protocol):
    def fit(self, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


class HDBSCANClusterer:
    """HDBSCAN (excess-of-mass selection); strengths are its membership probabilities."""

    def __init__(self, min_cluster_size: int = 10, min_samples: int | None = None, selection: str = "eom"):
        check_param("min_cluster_size", min_cluster_size, isinstance(min_cluster_size, int) and min_cluster_size >= 2,
                    "an integer >= 2")
        check_param("min_samples", min_samples, min_samples is None or (isinstance(min_samples, int) and min_samples >= 1),
                    "an integer >= 1 or None")
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


# -- feature blocks -------------------------------------------------------------------------------------------


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
        check_param("pair_weight", weight, isinstance(weight, (int, float)) and 0 <= weight <= 10 and math.isfinite(weight),
                    "a number in [0, 10]")
        self.weight = float(weight)

    def transform(self, frame) -> np.ndarray:
        pairs = (frame["label"].astype(str) + "\x1f" + frame["pred"].astype(str)).to_numpy()
        values, inverse = np.unique(pairs, return_inverse=True)
        out = np.zeros((len(pairs), len(values)), dtype=np.float32)
        out[np.arange(len(pairs)), inverse] = 1.0 / math.sqrt(2)
        return out


# -- neighbours -----------------------------------------------------------------------------------------------


def knn_cosine(queries: np.ndarray, base: np.ndarray, k: int, *, exclude: np.ndarray | None = None,
               return_distance: bool = False, budget: int = 32_000_000):
    """Indices [len(queries), k] of the k most cosine-similar rows of `base`, nearest first, computed in chunks
    of at most `budget` similarities (128 MB) so memory stays bounded; with `return_distance`, also the cosine
    distances (1 - similarity). Exact (brute force); uses torch's matmul and top-k when torch is installed.

    `exclude[i]` is a row of `base` that query i must not return (itself); -1 for none.
    """
    q, b = _unit(queries), _unit(base)
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


def _umap_precomputed(X: np.ndarray, *, n_components: int, n_neighbors: int, min_dist: float, seed: int,
                      n_epochs: int | None = None, init: str = "spectral") -> np.ndarray:
    """UMAP (cosine) on an exact k-nearest-neighbour graph computed here by matrix products: no pynndescent
    index, nothing compiled per process beyond numba's cached kernels."""
    umap = import_umap()
    import warnings

    n = len(X)
    k = max(2, min(n_neighbors, n - 1))
    indices, distances = knn_cosine(X, X, k, return_distance=True)
    model = umap.UMAP(n_components=n_components, n_neighbors=k, min_dist=min_dist, metric="cosine",
                      random_state=seed, n_epochs=n_epochs, precomputed_knn=(indices, distances, None),
                      force_approximation_algorithm=True,
                      init=init if n > 3 * n_components + 2 else "random")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(model.fit_transform(np.asarray(X, dtype=np.float32)), dtype=np.float32)


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


# -- the result -----------------------------------------------------------------------------------------------


@dataclass
class ClusteringResult:
    """Per failure: `labels` (cluster id, -1 unclustered; ids ordered by size, 0 largest), `membership` in
    [0, 1], `reassigned` (was noise, joined its nearest cluster), `tier` (systematic / scattered / all /
    confusion_pair / single / slice), `local_error_rate` (NaN without context). Per cluster: `cluster_tier`, and
    `cluster_group` for clusters taken out as a slice group."""

    labels: np.ndarray
    membership: np.ndarray
    reassigned: np.ndarray
    tier: np.ndarray
    local_error_rate: np.ndarray
    coordinates: np.ndarray | None
    method: str
    note: str = ""
    params: dict = field(default_factory=dict)
    cluster_tier: dict = field(default_factory=dict)
    cluster_group: dict = field(default_factory=dict)  # cluster id -> the group (slice id) it was taken out as

    @property
    def n_clusters(self) -> int:
        return int(self.labels.max() + 1) if len(self.labels) and self.labels.max() >= 0 else 0

    @property
    def noise_share(self) -> float:
        return float((self.labels < 0).mean()) if len(self.labels) else 0.0


def default_min_cluster_size(n: int) -> int:
    """max(5, round(sqrt(n) / 2)): 8 for 250 failures, 16 for 1,000, 35 for 5,000, 158 for 100,000."""
    return max(5, int(round(math.sqrt(max(n, 1)) / 2)))


# -- the clustering ---------------------------------------------------------------------------------------------


class FailureClustering:
    """Cluster failing examples. `__init__` stores parameters; `fit` does the work; results end in `_`.

    Parameters
    ----------
    reducer : "umap" | "pca" | "none" | a Reducer
    n_components : reduced dimensions (default 5 for UMAP, 10 for PCA)
    n_neighbors : UMAP neighbourhood
    min_cluster_size : None scales with the number of failures (`default_min_cluster_size`), per tier
    min_samples : HDBSCAN's density smoothing; None = min_cluster_size
    clusterer : a Clusterer; None builds `HDBSCANClusterer(min_cluster_size, min_samples)`
    features : extra FeatureBlocks (e.g. `ConfusionPairFeature`)
    error_aware : split systematic from scattered failures when correct examples are given
    local_k, alpha : neighbours and significance of the local error-rate test
    assign_noise : minimum share of an unclustered failure's nearest clustered neighbours in one cluster for it
        to join that cluster; None never assigns
    group_purity : with `groups`, a group's failures are taken out into their own cluster when no cluster holds
        half of them and they make up, on average, less than this share of the clusters they fall in (0 never
        takes a group out)
    min_failures : below this many failures, group by confusion pair instead of clustering
    max_fit : above this many failures, fit on a seeded sample and assign the rest to their nearest neighbours
    seed : every random step
    """

    def __init__(self, *, reducer="umap", n_components: int | None = None, n_neighbors: int = 15,
                 min_cluster_size: int | None = None, min_samples: int | None = None, clusterer=None,
                 features: Sequence[FeatureBlock] = (), error_aware: bool = True, local_k: int = 15,
                 alpha: float = 0.2, assign_noise: float | None = 0.5, group_purity: float = 0.5,
                 min_failures: int = 20, max_fit: int = 20_000, seed: int = 0):
        self.reducer = reducer
        self.n_components = n_components
        self.n_neighbors = n_neighbors
        self.min_cluster_size = min_cluster_size
        self.min_samples = min_samples
        self.clusterer = clusterer
        self.features = features
        self.error_aware = error_aware
        self.local_k = local_k
        self.alpha = alpha
        self.assign_noise = assign_noise
        self.group_purity = group_purity
        self.min_failures = min_failures
        self.max_fit = max_fit
        self.seed = seed

    def validate(self) -> None:
        """Check every parameter; raises ParameterError with the one message format."""
        if isinstance(self.reducer, str):
            check_param("reducer", self.reducer, self.reducer in REDUCERS, "one of " + ", ".join(REDUCERS))
        else:
            check_param("reducer", self.reducer, hasattr(self.reducer, "fit_transform"),
                        "'umap', 'pca', 'none' or an object with fit_transform")
        check_param("n_components", self.n_components,
                    self.n_components is None or (_is_int(self.n_components) and 1 <= self.n_components <= 100),
                    "an integer in [1, 100]")
        check_param("n_neighbors", self.n_neighbors, _is_int(self.n_neighbors) and 2 <= self.n_neighbors <= 200,
                    "an integer in [2, 200]")
        check_param("min_cluster_size", self.min_cluster_size,
                    self.min_cluster_size is None or (_is_int(self.min_cluster_size) and self.min_cluster_size >= 2),
                    "an integer >= 2")
        check_param("min_samples", self.min_samples,
                    self.min_samples is None or (_is_int(self.min_samples) and self.min_samples >= 1), "an integer >= 1")
        check_param("local_k", self.local_k, _is_int(self.local_k) and 2 <= self.local_k <= 200,
                    "an integer in [2, 200]")
        check_param("alpha", self.alpha, isinstance(self.alpha, (int, float)) and 0 < self.alpha < 1, "a number in (0, 1)")
        check_param("assign_noise", self.assign_noise,
                    self.assign_noise is None or (isinstance(self.assign_noise, (int, float)) and 0 <= self.assign_noise <= 1),
                    "a number in [0, 1], or None to keep noise unassigned")
        check_param("group_purity", self.group_purity, isinstance(self.group_purity, (int, float))
                    and not isinstance(self.group_purity, bool) and 0 <= self.group_purity <= 1, "a number in [0, 1]")
        check_param("min_failures", self.min_failures, _is_int(self.min_failures) and self.min_failures >= 2,
                    "an integer >= 2")
        check_param("max_fit", self.max_fit, _is_int(self.max_fit) and self.max_fit >= 100, "an integer >= 100")
        check_param("seed", self.seed, _is_int(self.seed) and self.seed >= 0, "an integer >= 0")

    def fit(self, vectors: np.ndarray, failed: np.ndarray | None = None, frame=None,
            groups: np.ndarray | None = None) -> "FailureClustering":
        """Cluster the rows of `vectors` where `failed` (all rows when None); the other rows are context.

        `frame` (optional) holds one row per failure, in order, with at least `label` and `pred`; it feeds the
        confusion-pair fallback and the feature blocks. `groups` (optional) gives each failure, in order, the
        group it belongs to (a slice id, lower ids preferred; -1 for none); see `take_out_groups`.
        """
        self.validate()
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2:
            raise DataError(f"vectors: shape {vectors.shape} is not [n, d].")
        failed = np.ones(len(vectors), dtype=bool) if failed is None else np.asarray(failed, dtype=bool)
        if failed.shape != (len(vectors),):
            raise DataError(f"failed: {failed.shape[0]} flags for {len(vectors)} vectors; give one per row.")
        if not np.isfinite(vectors).all():
            raise DataError("vectors: contain NaN or infinite values; fix the embedder that produced them.")
        X = vectors[failed]
        n = len(X)
        if frame is not None and len(frame) != n:
            raise DataError(f"frame: {len(frame)} rows for {n} failures; give one row per failure, in order.")
        if groups is not None:
            groups = np.asarray(groups)
            if groups.shape != (n,) or not np.issubdtype(groups.dtype, np.integer):
                raise DataError(f"groups: {groups.shape} {groups.dtype} values for {n} failures; give one integer "
                                "per failure (-1 for none).")
        mcs = self.min_cluster_size or default_min_cluster_size(n)
        self.min_cluster_size_ = mcs
        params = {"min_cluster_size": mcs, "n_failures": n}
        if n == 0:
            self.result_ = self._result(np.zeros(0, np.int64), None, method="empty", note="no failures to cluster",
                                        params=params)
            return self
        if n < self.min_failures:
            self.result_ = self._by_pair(frame, n, params)
            return self
        if float(np.ptp(X, axis=0).max()) < 1e-6:
            labels = np.zeros(n, dtype=np.int64)
            self.result_ = self._result(labels, np.ones(n, np.float32), method="single",
                                        note=f"all {n} failures have the same vector; one cluster", params=params,
                                        tier=np.full(n, SINGLE, dtype=object))
            return self

        extra = self._feature_matrix(frame, n)
        rng = np.random.default_rng(self.seed)
        fit_rows = np.arange(n) if n <= self.max_fit else np.sort(rng.choice(n, self.max_fit, replace=False))
        # error-aware tiers from the local error rate over all examples
        rate = np.full(n, np.nan, dtype=np.float32)
        systematic = np.zeros(n, dtype=bool)
        context = self.error_aware and (~failed).any()
        if context:
            all_rows = np.flatnonzero(failed)
            keep_ctx = np.flatnonzero(~failed)
            if len(keep_ctx) > self.max_fit:
                keep_ctx = np.sort(rng.choice(keep_ctx, self.max_fit, replace=False))
            ref = np.concatenate([all_rows[fit_rows], keep_ctx])
            ref_failed = np.zeros(len(ref), dtype=bool)
            ref_failed[: len(fit_rows)] = True
            r, s, base = local_error_rate(vectors[ref], ref_failed, k=self.local_k, alpha=self.alpha)
            rate[fit_rows], systematic[fit_rows] = r, s
            params.update(base_error_rate=round(base, 4), local_k=self.local_k, alpha=self.alpha)

        reducer = self._reducer()
        Y = reducer.fit_transform(X[fit_rows])
        mu, sd = Y.mean(axis=0), max(float(Y.std(axis=0).mean()), 1e-12)
        Y = (Y - mu) / sd
        Z = np.hstack([Y, extra[fit_rows]]).astype(np.float32)
        clusterer = self.clusterer or HDBSCANClusterer(mcs, self.min_samples)

        m = len(fit_rows)
        labels = np.full(m, -1, dtype=np.int64)
        strength = np.zeros(m, dtype=np.float32)
        tier = np.full(m, ALL, dtype=object)
        cluster_tier: dict[int, str] = {}
        tiers = [(ALL, np.ones(m, dtype=bool))]
        if context:
            sys_fit = systematic[fit_rows]
            tiers = [(SYSTEMATIC, sys_fit), (SCATTERED, ~sys_fit)]
            params["systematic_share"] = round(float(sys_fit.mean()), 4)
        offset = 0
        reassigned = np.zeros(m, dtype=bool)
        for name, mask in tiers:
            tier[mask] = name
            if mask.sum() < 2:
                continue
            tier_clusterer = clusterer
            if self.clusterer is None and self.min_cluster_size is None and name != ALL:
                # each tier is its own clustering problem: the default size scales with the tier
                tier_mcs = default_min_cluster_size(int(mask.sum()))
                tier_clusterer = HDBSCANClusterer(tier_mcs, self.min_samples)
                params.setdefault("tier_min_cluster_size", {})[name] = tier_mcs
            lab, st = tier_clusterer.fit(Z[mask])
            if self.assign_noise is not None:
                lab, st, moved = _assign_noise(Z[mask], lab, st, self.assign_noise)
                reassigned[mask] = moved
            found = lab >= 0
            lab[found] += offset
            for c in np.unique(lab[found]):
                cluster_tier[int(c)] = name
            offset = int(lab.max()) + 1 if found.any() else offset
            labels[mask], strength[mask] = lab, st

        full_labels = np.full(n, -1, dtype=np.int64)
        full_strength = np.zeros(n, dtype=np.float32)
        full_tier = np.full(n, ALL, dtype=object)
        full_reassigned = np.zeros(n, dtype=bool)
        full_labels[fit_rows], full_strength[fit_rows] = labels, strength
        full_tier[fit_rows], full_reassigned[fit_rows] = tier, reassigned
        coords = np.zeros((n, Y.shape[1]), dtype=np.float32)
        coords[fit_rows] = Y
        note = ""
        if m < n:  # the rest join their nearest fitted neighbours (cosine, original space)
            rest = np.setdiff1d(np.arange(n), fit_rows)
            near, dist = knn_cosine(X[rest], X[fit_rows], 10, return_distance=True)
            lab, st = _vote(labels[near])
            _, ref_dist = knn_cosine(X[fit_rows[: min(m, 5000)]], X[fit_rows], 11, return_distance=True)
            d90 = float(np.quantile(ref_dist[:, 1:].mean(axis=1), 0.9))
            st = st * np.minimum(1.0, d90 / np.maximum(dist.mean(axis=1), 1e-12))
            full_labels[rest], full_strength[rest] = lab, np.where(lab >= 0, st * 0.5, 0)
            full_reassigned[rest] = False
            full_tier[rest] = tier[near[:, 0]]
            weights = 1.0 / np.maximum(dist, 1e-6)
            coords[rest] = (Y[near] * weights[..., None]).sum(axis=1) / weights.sum(axis=1, keepdims=True)
            note = f"fitted on a sample of {m} of {n} failures; the rest joined their nearest neighbours"
            params["fit_sample"] = m
        cluster_group: dict[int, int] = {}
        if groups is not None and self.group_purity > 0:
            min_size = min([mcs, *params.get("tier_min_cluster_size", {}).values()])
            full_labels, cluster_group = take_out_groups(full_labels, groups, min_size=min_size,
                                                         max_purity=self.group_purity)
            for c in cluster_group:
                rows = full_labels == c
                full_tier[rows], full_strength[rows], full_reassigned[rows] = SLICE, 1.0, False
                cluster_tier[c] = SLICE
            full_reassigned[full_labels < 0] = False  # members of a dissolved remainder are unclustered again
            params.update(group_purity=self.group_purity, groups_taken_out=len(cluster_group))
        self.result_ = self._result(full_labels, full_strength, method="hdbscan", note=note, params=params,
                                    tier=full_tier, reassigned=full_reassigned, rate=rate, coords=coords,
                                    cluster_tier=cluster_tier, cluster_group=cluster_group)
        return self

    # -- helpers ------------------------------------------------------------------------------------------

    def _feature_matrix(self, frame, n: int) -> np.ndarray:
        """The weighted feature blocks for all n failures, computed once so every subset shares columns."""
        blocks = [np.zeros((n, 0), dtype=np.float32)]
        for block in self.features:
            if block.weight > 0:
                if frame is None:
                    raise DataError(f"feature {block.name!r} needs the failures' rows (frame=...).")
                values = np.asarray(block.transform(frame), dtype=np.float32)
                if values.ndim != 2 or len(values) != n:
                    raise DataError(f"feature {block.name!r}: shape {values.shape} is not [{n}, k].")
                blocks.append(block.weight * values)
        return np.hstack(blocks)

    def _reducer(self):
        if not isinstance(self.reducer, str):
            return self.reducer
        return make_reducer(self.reducer, n_components=self.n_components, n_neighbors=self.n_neighbors,
                            seed=self.seed)

    def _by_pair(self, frame, n: int, params: dict) -> ClusteringResult:
        if frame is None:
            labels = np.zeros(n, dtype=np.int64)
            note = f"only {n} failures (< {self.min_failures}); too few to cluster, kept as one group"
        else:
            pairs = (frame["label"].astype(str) + "\x1f" + frame["pred"].astype(str)).to_numpy()
            _, labels = np.unique(pairs, return_inverse=True)
            labels = labels.reshape(-1).astype(np.int64)
            note = f"only {n} failures (< {self.min_failures}); too few to cluster by content, grouped by confusion pair"
        return self._result(labels, np.ones(n, np.float32), method="confusion_pairs", note=note, params=params,
                            tier=np.full(n, BY_PAIR, dtype=object))

    def _result(self, labels, strength, *, method, note, params, tier=None, reassigned=None, rate=None,
                coords=None, cluster_tier=None, cluster_group=None) -> ClusteringResult:
        n = len(labels)
        labels, mapping = relabel_by_size(labels)
        ct = {mapping[old]: t for old, t in (cluster_tier or {}).items() if old in mapping}
        cg = {mapping[old]: int(g) for old, g in (cluster_group or {}).items() if old in mapping}
        tier = np.full(n, ALL, dtype=object) if tier is None else tier
        for c in range(int(labels.max()) + 1 if n and labels.max() >= 0 else 0):
            if c not in ct:
                members = tier[labels == c]
                values, counts = np.unique(members.astype(str), return_counts=True)
                ct[c] = str(values[counts.argmax()])
        strength = np.zeros(n, np.float32) if strength is None else np.asarray(strength, dtype=np.float32)
        strength = np.where(labels >= 0, np.clip(strength, 0, 1), 0).astype(np.float32)
        return ClusteringResult(
            labels=labels, membership=strength,
            reassigned=np.zeros(n, bool) if reassigned is None else reassigned,
            tier=tier, local_error_rate=np.full(n, np.nan, np.float32) if rate is None else rate,
            coordinates=coords, method=method, note=note, params=params, cluster_tier=ct, cluster_group=cg)


def take_out_groups(labels: np.ndarray, groups: np.ndarray, *, min_size: int, max_purity: float = 0.5
                    ) -> tuple[np.ndarray, dict[int, int]]:
    """Take the failures of each group that the clustering scattered out into a cluster of their own.

    labels: cluster per failure (-1 unclustered); groups: group per failure (-1 none). Groups are tried in
    increasing id order (slice ids rank best first). A group with at least `min_size` failures is scattered when
    no cluster holds half of them and its purity (see `group_scatter`) is below `max_purity`: its failures were a
    minority wherever they landed, so the embedding did not see what they share. A group the embedding split
    into clusters it dominates (sub-types), or kept mostly in one cluster, is left alone. A cluster left with
    fewer than `min_size` failures is dissolved (its failures become unclustered). Returns the new labels and
    {new cluster id: group id}.
    """
    labels = np.asarray(labels, dtype=np.int64).copy()
    groups = np.asarray(groups, dtype=np.int64)
    taken: dict[int, int] = {}
    next_id = int(labels.max()) + 1 if len(labels) else 0
    for g in np.unique(groups[groups >= 0]):
        rows = np.flatnonzero(groups == g)
        if len(rows) < min_size:
            continue
        largest, purity = group_scatter(labels, rows)
        if largest >= 0.5 or purity >= max_purity:
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


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def relabel_by_size(labels: np.ndarray) -> tuple[np.ndarray, dict[int, int]]:
    """Renumber clusters 0.. by size, largest first (ties: first seen first); -1 stays -1."""
    labels = np.asarray(labels, dtype=np.int64)
    ids = [c for c in np.unique(labels) if c >= 0]
    first = {c: int(np.flatnonzero(labels == c)[0]) for c in ids}
    order = sorted(ids, key=lambda c: (-int((labels == c).sum()), first[c]))
    mapping = {int(c): i for i, c in enumerate(order)}
    out = np.full(len(labels), -1, dtype=np.int64)
    for old, new in mapping.items():
        out[labels == old] = new
    return out, mapping


def _assign_noise(Z: np.ndarray, labels: np.ndarray, strength: np.ndarray, threshold: float, k: int = 10):
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
    out, share = _vote(ref_labels[idx])
    return out, (share * closeness).astype(np.float32)


def _vote(votes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of labels: the most frequent (ties: smallest) and its share."""
    out = np.full(len(votes), -1, dtype=np.int64)
    share = np.zeros(len(votes), dtype=np.float32)
    for i, row in enumerate(votes):
        values, counts = np.unique(row, return_counts=True)
        j = counts.argmax()
        out[i], share[i] = values[j], counts[j] / len(row)
    return out, share


def cluster_failures(vectors: np.ndarray, failed: np.ndarray | None = None, frame=None, groups=None,
                     **params) -> ClusteringResult:
    """Functional form: `FailureClustering(**params).fit(vectors, failed, frame, groups).result_`."""
    return FailureClustering(**params).fit(vectors, failed, frame, groups).result_


# -- 2-D layout -----------------------------------------------------------------------------------------------


def layout_2d(vectors: np.ndarray, *, method: str = "umap", seed: int = 0, max_fit: int = 5_000,
              n_neighbors: int = 15) -> np.ndarray:
    """float32 [n, 2] for display. "umap": UMAP (cosine, min_dist 0.1, PCA start, 200 epochs) fitted on up to
    `max_fit` rows,
    the rest placed at the distance-weighted mean of their 10 nearest fitted rows; "pca": the first two principal
    components; "none": NaN."""
    check_param("layout", method, method in REDUCERS, "one of " + ", ".join(REDUCERS))
    vectors = np.asarray(vectors, dtype=np.float32)
    n = len(vectors)
    if method == "none" or n == 0:
        return np.full((n, 2), np.nan, dtype=np.float32)
    if method == "pca" or n <= 8:
        return PCAReducer(2, seed=seed).fit_transform(vectors)
    rng = np.random.default_rng(seed)
    fit = np.arange(n) if n <= max_fit else np.sort(rng.choice(n, max_fit, replace=False))
    out = np.zeros((n, 2), dtype=np.float32)
    out[fit] = _umap_precomputed(vectors[fit], n_components=2, n_neighbors=n_neighbors, min_dist=0.1, seed=seed,
                                 n_epochs=200, init="pca")
    if len(fit) < n:
        rest = np.setdiff1d(np.arange(n), fit)
        near, dist = knn_cosine(vectors[rest], vectors[fit], 10, return_distance=True)
        weights = 1.0 / np.maximum(dist, 1e-6)
        out[rest] = (out[fit][near] * weights[..., None]).sum(axis=1) / weights.sum(axis=1, keepdims=True)
    return out
