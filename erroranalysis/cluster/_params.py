"""The clustering's and the naming's parameters, each declared once (`erroranalysis.core.params`).

`FailureClustering` takes a `ClusteringParams`; `describe_clusters` a `NamingParams`; the cluster stage's
`ClusterParams` extends both with what only the stage needs (the embedder, the layout), so the same declaration
makes the library's defaults, the stage's record and the CLI's options.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from erroranalysis.cluster._reduce import REDUCERS
from erroranalysis.core.params import SEED, Choice, Flag, Float, Int, Object, Params, param, spec_field

# The smallest cluster HDBSCAN may form: one rule for the clustering's parameter and for a clusterer built by hand.
MIN_CLUSTER_SIZE = Int(2)
MIN_SAMPLES = Int(1)
PAIR_WEIGHT = Float(0, 10)


@dataclass(frozen=True)
class ClusteringParams(Params):
    """How failures are grouped: reduce, cluster each tier, assign noise, take out slice groups, find parents."""

    reducer: Any = param("umap", Choice(*REDUCERS) | Object(("fit_transform",), "an object with fit_transform"),
                         "umap (cosine, 5-d), pca (no compilation) or none.")
    n_components: int | None = param(None, Int(1, 100), "Reduced dimensions.", flag="--components",
                                     none="5 for umap, 10 for pca")
    n_neighbors: int = param(15, Int(2, 200), "UMAP neighbourhood size.", flag="--neighbors")
    min_cluster_size: int | None = param(
        None, MIN_CLUSTER_SIZE, "Smallest error cluster.", short="-m",
        none="scales with the failures: max(5, sqrt(n)/2) for n failures, per tier with --error-aware")
    min_samples: int | None = param(None, MIN_SAMPLES, "HDBSCAN density smoothing; lower finds more, smaller "
                                    "clusters.", none="the min cluster size")
    error_aware: bool = param(True, Flag(), "Cluster failures in regions where the model fails more than usual "
                              "apart from failures scattered among correct examples.")
    local_k: int = param(15, Int(2, 200), "Neighbours of the local error rate that splits systematic from "
                         "scattered failures.", advanced=True)
    alpha: float = param(0.2, Float(0, 1, low_open=True, high_open=True), "Significance of the local error-rate "
                         "test.", flag="--tier-alpha", advanced=True)
    pair_weight: float = param(0.0, PAIR_WEIGHT, "Let the (label, pred) confusion pair take part in clustering "
                               "with this weight (0 = off; 0.3 to 0.7 nudges clusters toward one confusion each).")
    assign_noise: float | None = param(
        0.5, Float(0, 1), "An unclustered failure joins its nearest cluster when this share of its nearest "
        "clustered neighbours is in it (0 to 1).", none="never assign", none_flag="--keep-noise",
        none_help="Never assign unclustered failures.")
    group_purity: float = param(0.7, Float(0, 1), "A strong slice becomes a cluster of its own when, on average, "
                                "its failures make up less than this share of the clusters they fall in "
                                "(unclustered counts as 0; 0 turns slice groups off).")
    parent_similarity: float | None = param(
        0.6, Float(-1, 1), "Clusters whose directions are at least this similar (cosine) get a shared parent error "
        "type.", none="no parents", none_flag="--no-parents", none_help="Do not group clusters under parents.")
    min_failures: int = param(20, Int(2), "Below this many failures, group by confusion pair instead of "
                              "clustering.", advanced=True)
    max_fit: int = param(20_000, Int(100), "Above this many failures, fit on a seeded sample and assign the rest "
                         "to their nearest fitted neighbours.")
    seed: int = spec_field(SEED)


@dataclass(frozen=True)
class NamingParams(Params):
    """How clusters are described: keywords and exemplars (names change without re-clustering)."""

    n_keywords: int = param(8, Int(1, 50), "Keywords per cluster.", flag="--keywords")
    n_exemplars: int = param(5, Int(1, 50), "Exemplar ids per cluster.", flag="--exemplars")
    seed: int = spec_field(SEED)
