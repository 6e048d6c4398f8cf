"""Group failing examples into error types: reduce, cluster, assign, name.

The pipeline, like BERTopic's but small: a reducer (`UMAPReducer` by default), feature blocks (the confusion
pair), a clusterer (`HDBSCANClusterer`), noise assignment, slice groups, parent error types (`cluster_parents`);
naming is separate from clustering, so names change without re-clustering (`describe_clusters`). Private modules
hold the parts; this is the API.
"""

from __future__ import annotations

from erroranalysis.cluster._assigned import MODE_STRATA, Assigned, reference_distance, sample_note
from erroranalysis.cluster._blocks import Clusterer, ConfusionPairFeature, FeatureBlock, HDBSCANClusterer
from erroranalysis.cluster._fit import ClusteringResult, FailureClustering, cluster_failures, default_min_cluster_size
from erroranalysis.cluster._groups import group_scatter, relabel_by_size, size_order, take_out_groups
from erroranalysis.cluster._hierarchy import cluster_parents, parents_of
from erroranalysis.cluster._keywords import MAX_CHARS, TOKEN_PATTERN, class_tfidf, pick_keywords, same_stem, stem
from erroranalysis.cluster._modes import (
    MODE,
    ModeRule,
    categories,
    cluster_by_mode,
    group_by_mode,
    mode_of,
    mode_rule,
    place_by_mode,
)
from erroranalysis.cluster._naming import (
    MAX_CORRECT_DOCS,
    cluster_name,
    cluster_summary,
    describe_clusters,
    short_text,
)
from erroranalysis.cluster._neighbors import knn_cosine, local_error_rate
from erroranalysis.cluster._params import ClusteringParams, NamingParams
from erroranalysis.cluster._reduce import (
    REDUCERS,
    NoReducer,
    PCAReducer,
    Reducer,
    UMAPReducer,
    import_umap,
    layout_2d,
    make_reducer,
    numba_cache_dir,
)
from erroranalysis.cluster._sample import quotas, sample_keys, smallest
