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
  end up scattered over topic clusters, or inside a broader one, a minority wherever they land. When they make up
  less than `group_purity` of the clusters they fall in, they are taken out into one cluster of kind "slice". A
  slice the embedding already groups (a cluster, or sub-type clusters, it fills) is left alone.

Edges: no failures (nothing to do), fewer than `min_failures` (grouped by confusion pair, and the result says
so), identical vectors (one cluster). Above `max_fit` failures the reducer and clusterer are fitted on a seeded
sample stratified by confusion pair (`_sample`: each (gold, pred) pair keeps its share, and at least twice the
minimum cluster size; within a pair the failures with the smallest seeded hash of their id, a rule that does not
depend on how rows are cut into blocks) and the rest join their nearest fitted neighbours, so memory and time stay
bounded. `fit_sample` is the same fit for a caller that holds only the sample (the `--engine ray` stage).

Heavy imports (umap, hdbscan, sklearn) happen inside functions. `import_umap()` turns on numba's on-disk cache
for UMAP, so only the first process on a machine pays the ~30 s of compilation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from erroranalysis.cluster._assigned import ALL, Assigned, place_the_rest
from erroranalysis.cluster._blocks import ConfusionPairFeature, FeatureBlock, HDBSCANClusterer
from erroranalysis.cluster._groups import relabel_by_size, take_out_groups
from erroranalysis.cluster._hierarchy import cluster_parents
from erroranalysis.cluster._neighbors import assign_noise_by_vote, local_error_rate
from erroranalysis.cluster._params import ClusteringParams
from erroranalysis.cluster._reduce import make_reducer
from erroranalysis.cluster._sample import strata_of, stratified_sample
from erroranalysis.core.errors import DataError

SYSTEMATIC, SCATTERED, BY_PAIR, SINGLE, SLICE = "systematic", "scattered", "confusion_pair", "single", "slice"


@dataclass
class ClusteringResult:
    """Per failure: `labels` (cluster id, -1 unclustered; ids ordered by size, 0 largest), `membership` in
    [0, 1], `reassigned` (was noise, joined its nearest cluster), `tier` (systematic / scattered / all /
    confusion_pair / single / slice), `local_error_rate` (NaN without context). Per cluster: `cluster_tier`,
    `cluster_group` for clusters taken out as a slice group, and `cluster_parent` for clusters that share a parent
    (a coarser error type, `cluster_parents`)."""

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
    cluster_parent: dict = field(default_factory=dict)  # cluster id -> parent id, for clusters that share a parent

    def parents(self) -> np.ndarray:
        """Parent id per failure (-1: unclustered, or a cluster without a parent)."""
        out = np.full(len(self.labels), -1, dtype=np.int64)
        for c, p in self.cluster_parent.items():
            out[self.labels == c] = p
        return out

    @property
    def n_clusters(self) -> int:
        return int(self.labels.max() + 1) if len(self.labels) and self.labels.max() >= 0 else 0

    @property
    def noise_share(self) -> float:
        return float((self.labels < 0).mean()) if len(self.labels) else 0.0


def _checked_inputs(vectors, failed, frame, groups):
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2:
        raise DataError(f"vectors: shape {vectors.shape} is not [n, d].")
    failed = np.ones(len(vectors), dtype=bool) if failed is None else np.asarray(failed, dtype=bool)
    if failed.shape != (len(vectors),):
        raise DataError(f"failed: {failed.shape[0]} flags for {len(vectors)} vectors; give one per row.")
    if not np.isfinite(vectors).all():
        raise DataError("vectors: contain NaN or infinite values; fix the embedder that produced them.")
    n = int(failed.sum())
    if frame is not None and len(frame) != n:
        raise DataError(f"frame: {len(frame)} rows for {n} failures; give one row per failure, in order.")
    if groups is not None:
        groups = np.asarray(groups)
        if groups.shape != (n,) or not np.issubdtype(groups.dtype, np.integer):
            raise DataError(f"groups: {groups.shape} {groups.dtype} values for {n} failures; give one integer "
                            "per failure (-1 for none).")
    return vectors, failed, groups


def default_min_cluster_size(n: int) -> int:
    """max(5, round(sqrt(n) / 2)): 8 for 250 failures, 16 for 1,000, 35 for 5,000, 158 for 100,000."""
    return max(5, int(round(math.sqrt(max(n, 1)) / 2)))


class FailureClustering:
    """Cluster failing examples. `__init__` stores parameters; `fit` does the work; results end in `_`.

    `params` (a `ClusteringParams`, checked when built; keyword values override it) says how: see the help of each
    field there. `clusterer` (anything with `fit(Y) -> (labels, strengths)`) replaces the HDBSCAN one built per
    tier; `features` are extra FeatureBlocks (a `ConfusionPairFeature` is added when `pair_weight` > 0).
    """

    def __init__(self, params: ClusteringParams | None = None, *, clusterer=None,
                 features: Sequence[FeatureBlock] = (), **values):
        # the parameters are checked once, when `params` is built; keyword values override them
        params = params if params is not None else ClusteringParams()
        self.params = params.replace(**values) if values else params
        self.clusterer = clusterer
        self.features = list(features)
        if self.params.pair_weight > 0:
            self.features.append(ConfusionPairFeature(self.params.pair_weight))

    def fit(self, vectors: np.ndarray, failed: np.ndarray | None = None, frame=None,
            groups: np.ndarray | None = None) -> FailureClustering:
        """Cluster the rows of `vectors` where `failed` (all rows when None); the other rows are context.

        `frame` (optional) holds one row per failure, in order, with at least `label` and `pred`; it feeds the
        confusion-pair fallback and the feature blocks. `groups` (optional) gives each failure, in order, the
        group it belongs to (a slice id, lower ids preferred; -1 for none); see `take_out_groups`.
        """
        vectors, failed, groups = _checked_inputs(vectors, failed, frame, groups)
        X = vectors[failed]
        n = len(X)
        mcs = self.params.min_cluster_size or default_min_cluster_size(n)
        self.min_cluster_size_ = mcs
        params = {"min_cluster_size": mcs, "n_failures": n}
        self.result_ = self._trivial(X, frame, params)
        if self.result_ is not None:
            return self
        fit_rows = self._fit_rows(frame, n, mcs, params)
        fitted, Y, rate = self._fit_on(vectors, failed, fit_rows, frame, mcs, params)
        placed, note = place_the_rest(X, fit_rows, fitted, Y, params)
        cluster_group = self._take_out(placed, groups, mcs, params)
        result = self._result(placed.labels, placed.strength, method="hdbscan", note=note, params=params,
                              tier=placed.tier, reassigned=placed.reassigned, rate=rate, coords=placed.coords,
                              cluster_tier=placed.cluster_tier, cluster_group=cluster_group)
        if self.params.parent_similarity is not None:
            result.cluster_parent = cluster_parents(X, result.labels, min_similarity=self.params.parent_similarity)
            params["n_parents"] = len(set(result.cluster_parent.values()))
        self.result_ = result
        return self

    def fit_sample(self, vectors: np.ndarray, failed: np.ndarray | None, frame, n_failures: int):
        """Fit on failures that are the `_sample` of `n_failures` failures, as `fit` fits its own sample: the
        `--engine ray` cluster stage's driver holds only the sample and places the rest on the workers
        (`_assigned.place`). Returns (the sample's Assigned, before relabelling by size; its local error rate;
        the resolved parameters)."""
        vectors, failed, _ = _checked_inputs(vectors, failed, frame, None)
        m = int(failed.sum())
        mcs = self.params.min_cluster_size or default_min_cluster_size(n_failures)
        self.min_cluster_size_ = mcs
        params = {"min_cluster_size": mcs, "n_failures": n_failures}
        self._record_sample(strata_of(frame, m), mcs, params)
        fitted, _, rate = self._fit_on(vectors, failed, np.arange(m), frame, mcs, params)
        params["fit_sample"] = m
        return fitted, rate, params

    def _fit_on(self, vectors, failed, fit_rows, frame, mcs: int, params: dict):
        """Tiers, coordinates and clusters of the failures `fit_rows`: (their Assigned, their coordinates, the
        local error rate of every failure, NaN outside the fit)."""
        rng = np.random.default_rng(self.params.seed)
        n = int(failed.sum())
        rate, systematic = self._local_tiers(vectors, failed, fit_rows, rng, params)
        Y, Z = self._coordinates(vectors[failed], fit_rows, self._feature_matrix(frame, n))
        fitted = self._cluster_tiers(Z, None if systematic is None else systematic[fit_rows], mcs, params)
        return fitted, Y, rate

    def _trivial(self, X: np.ndarray, frame, params: dict) -> ClusteringResult | None:
        """The results that need no clustering: no failures, too few, or all on one vector."""
        n = len(X)
        if n == 0:
            return self._result(np.zeros(0, np.int64), None, method="empty", note="no failures to cluster",
                                params=params)
        if n < self.params.min_failures:
            return self._by_pair(frame, n, params)
        if float(np.ptp(X, axis=0).max()) < 1e-6:
            return self._result(np.zeros(n, dtype=np.int64), np.ones(n, np.float32), method="single",
                                note=f"all {n} failures have the same vector; one cluster", params=params,
                                tier=np.full(n, SINGLE, dtype=object))
        return None

    def _fit_rows(self, frame, n: int, mcs: int, params: dict) -> np.ndarray:
        """All failures, or above `max_fit` a seeded sample stratified by confusion pair, by the smallest seeded
        hashes of the example ids (`_sample`; row positions stand in for ids without a frame holding them)."""
        if n <= self.params.max_fit:
            return np.arange(n)
        strata = strata_of(frame, n)
        self._record_sample(strata, mcs, params)
        ids = frame["example_id"].to_numpy() if frame is not None and "example_id" in frame.columns else np.arange(n)
        return stratified_sample(strata, ids, self.params.max_fit, self.params.seed, floor=2 * mcs)

    def _record_sample(self, strata, mcs: int, params: dict) -> None:
        params.update(fit_sample_seed=self.params.seed, fit_sample_strata="label, pred" if strata.any() else "none",
                      fit_sample_floor=2 * mcs, fit_sample_rule="smallest seeded hash of example_id per stratum")

    def _local_tiers(self, vectors, failed, fit_rows, rng, params: dict):
        """(local error rate, systematic?) per failure from the correct examples around it; (NaN, None) without
        error awareness or correct examples."""
        n = int(failed.sum())
        rate = np.full(n, np.nan, dtype=np.float32)
        if not (self.params.error_aware and (~failed).any()):
            return rate, None
        systematic = np.zeros(n, dtype=bool)
        keep_ctx = np.flatnonzero(~failed)
        if len(keep_ctx) > self.params.max_fit:
            keep_ctx = np.sort(rng.choice(keep_ctx, self.params.max_fit, replace=False))
        ref = np.concatenate([np.flatnonzero(failed)[fit_rows], keep_ctx])
        ref_failed = np.zeros(len(ref), dtype=bool)
        ref_failed[: len(fit_rows)] = True
        r, s, base = local_error_rate(vectors[ref], ref_failed, k=self.params.local_k, alpha=self.params.alpha)
        rate[fit_rows], systematic[fit_rows] = r, s
        params.update(base_error_rate=round(base, 4), local_k=self.params.local_k, alpha=self.params.alpha)
        return rate, systematic

    def _coordinates(self, X, fit_rows, extra):
        """(the reduced, standardized coordinates Y of the fitted rows, Y beside the feature blocks)."""
        Y = self._reducer().fit_transform(X[fit_rows])
        mu, sd = Y.mean(axis=0), max(float(Y.std(axis=0).mean()), 1e-12)
        Y = (Y - mu) / sd
        return Y, np.hstack([Y, extra[fit_rows]]).astype(np.float32)

    def _cluster_tiers(self, Z, systematic, mcs: int, params: dict) -> Assigned:
        """Cluster each tier (systematic, scattered; or all) apart, then assign noise within it."""
        m = len(Z)
        out = Assigned.empty(m)
        tiers = [(ALL, np.ones(m, dtype=bool))]
        if systematic is not None:
            tiers = [(SYSTEMATIC, systematic), (SCATTERED, ~systematic)]
            params["systematic_share"] = round(float(systematic.mean()), 4)
        offset = 0
        for name, mask in tiers:
            out.tier[mask] = name
            if mask.sum() < 2:
                continue
            lab, st = self._tier_clusterer(name, int(mask.sum()), mcs, params).fit(Z[mask])
            if self.params.assign_noise is not None:
                lab, st, out.reassigned[mask] = assign_noise_by_vote(Z[mask], lab, st, self.params.assign_noise)
            found = lab >= 0
            lab[found] += offset
            out.cluster_tier.update({int(c): name for c in np.unique(lab[found])})
            offset = int(lab.max()) + 1 if found.any() else offset
            out.labels[mask], out.strength[mask] = lab, st
        return out

    def _tier_clusterer(self, name: str, size: int, mcs: int, params: dict):
        if self.clusterer is not None:
            return self.clusterer
        if self.params.min_cluster_size is None and name != ALL:
            # each tier is its own clustering problem: the default size scales with the tier
            tier_mcs = default_min_cluster_size(size)
            params.setdefault("tier_min_cluster_size", {})[name] = tier_mcs
            return HDBSCANClusterer(tier_mcs, self.params.min_samples)
        return HDBSCANClusterer(mcs, self.params.min_samples)

    def _take_out(self, placed: Assigned, groups, mcs: int, params: dict) -> dict[int, int]:
        """Strong slices the embedding scattered become clusters of their own (`take_out_groups`)."""
        if groups is None or self.params.group_purity <= 0:
            return {}
        min_size = min([mcs, *params.get("tier_min_cluster_size", {}).values()])
        placed.labels, cluster_group = take_out_groups(placed.labels, groups, min_size=min_size,
                                                       max_purity=self.params.group_purity)
        for c in cluster_group:
            rows = placed.labels == c
            placed.tier[rows], placed.strength[rows], placed.reassigned[rows] = SLICE, 1.0, False
            placed.cluster_tier[c] = SLICE
        placed.reassigned[placed.labels < 0] = False  # members of a dissolved remainder are unclustered again
        params.update(group_purity=self.params.group_purity, groups_taken_out=len(cluster_group))
        return cluster_group

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
        if not isinstance(self.params.reducer, str):
            return self.params.reducer
        return make_reducer(self.params.reducer, n_components=self.params.n_components, n_neighbors=self.params.n_neighbors,
                            seed=self.params.seed)

    def _by_pair(self, frame, n: int, params: dict) -> ClusteringResult:
        if frame is None:
            labels = np.zeros(n, dtype=np.int64)
            note = f"only {n} failures (< {self.params.min_failures}); too few to cluster, kept as one group"
        else:
            pairs = (frame["label"].astype(str) + "\x1f" + frame["pred"].astype(str)).to_numpy()
            _, labels = np.unique(pairs, return_inverse=True)
            labels = labels.reshape(-1).astype(np.int64)
            note = f"only {n} failures (< {self.params.min_failures}); too few to cluster by content, grouped by confusion pair"
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




def cluster_failures(vectors: np.ndarray, failed: np.ndarray | None = None, frame=None, groups=None,
                     **params) -> ClusteringResult:
    """Functional form: `FailureClustering(**params).fit(vectors, failed, frame, groups).result_`."""
    return FailureClustering(**params).fit(vectors, failed, frame, groups).result_
