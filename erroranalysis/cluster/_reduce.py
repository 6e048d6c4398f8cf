"""Reducers (UMAP, PCA, none) and the 2-D layout for display.

`import_umap()` turns on numba's on-disk cache for UMAP, so only the first process on a machine pays the ~30 s of
compilation.
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np

from erroranalysis.cluster._neighbors import knn_cosine, unit_rows
from erroranalysis.core.sampling import seeded_rows
from erroranalysis.core.validation import check_param

REDUCERS = ("umap", "pca", "none")


def numba_cache_dir():
    from erroranalysis.embed.models import cache_root

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


class Reducer(Protocol):
    """Vectors [n, d] in, coordinates [n, k] out. Rows beyond `max_fit` never reach the reducer: they are placed
    by their nearest fitted neighbours in the original space."""

    def fit_transform(self, X: np.ndarray) -> np.ndarray: ...




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

    def fit(self, X: np.ndarray) -> PCAReducer:
        from sklearn.decomposition import PCA

        X = unit_rows(X)
        k = max(1, min(self.n_components, X.shape[1], len(X)))
        self.model_ = PCA(n_components=k, random_state=self.seed).fit(X)
        return self

    def fit_transform(self, X: np.ndarray) -> np.ndarray:
        return self.fit(X).transform(X)

    def transform(self, X: np.ndarray) -> np.ndarray:
        Y = self.model_.transform(unit_rows(X)).astype(np.float32)
        if Y.shape[1] < self.n_components:  # fewer points than components: pad, so shapes stay fixed
            Y = np.hstack([Y, np.zeros((len(Y), self.n_components - Y.shape[1]), dtype=np.float32)])
        return Y


class NoReducer:
    """The L2-normalized vectors themselves (euclidean on unit vectors = cosine)."""

    def fit_transform(self, X: np.ndarray) -> np.ndarray:
        return unit_rows(X)

    def transform(self, X: np.ndarray) -> np.ndarray:
        return unit_rows(X)


def make_reducer(name: str, *, n_components: int | None = None, n_neighbors: int = 15, seed: int = 0) -> Reducer:
    check_param("reducer", name, name in REDUCERS, "one of " + ", ".join(REDUCERS))
    if name == "umap":
        return UMAPReducer(n_components=n_components or 5, n_neighbors=n_neighbors, seed=seed)
    if name == "pca":
        return PCAReducer(n_components=n_components or 10, seed=seed)
    return NoReducer()


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
    fit = seeded_rows(n, max_fit, seed)
    out = np.zeros((n, 2), dtype=np.float32)
    out[fit] = _umap_precomputed(vectors[fit], n_components=2, n_neighbors=n_neighbors, min_dist=0.1, seed=seed,
                                 n_epochs=200, init="pca")
    if len(fit) < n:
        rest = np.setdiff1d(np.arange(n), fit)
        near, dist = knn_cosine(vectors[rest], vectors[fit], 10, return_distance=True)
        weights = 1.0 / np.maximum(dist, 1e-6)
        out[rest] = (out[fit][near] * weights[..., None]).sum(axis=1) / weights.sum(axis=1, keepdims=True)
    return out
