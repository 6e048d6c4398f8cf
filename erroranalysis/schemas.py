"""The columns of every table a run directory holds: one declaration per artifact (docs/run-directory.md says what
each column means).

The core that makes a table (cluster naming, the slice search, the checks stage), the stage that writes it and
`erroranalysis.rundir`'s readers all take the columns from here. It is a module of declarations below both: the
pure cores may not import `erroranalysis.rundir` (the import-linter contracts in pyproject.toml), and a module under
rundir/ cannot be imported without the rundir package, so the declarations live beside `errors.py` and
`findings.py`, and `rundir` checks every table against them when a stage writes it and when a reader reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Table:
    """One Parquet artifact's columns. `columns`: what its stage writes, in order; `required`: what a reader needs
    (runs written by earlier versions may lack the rest); `lists`: list-valued columns, read back as Python lists;
    `dtypes`: the pandas dtype of each column whose type the writer fixes; `open`: other columns may follow (the
    predictions carry the eval set's own columns)."""

    columns: tuple[str, ...]
    required: tuple[str, ...]
    lists: tuple[str, ...] = ()
    dtypes: dict[str, str] = field(default_factory=dict)
    open: bool = False

    def undeclared(self, columns) -> list[str]:
        """Of `columns`, those this table does not declare (none for an open table)."""
        return [] if self.open else [c for c in columns if c not in self.columns]


# predictions.parquet: the core columns, then the eval set's own (renamed meta_<name> when they clash)
PREDICTIONS = Table(
    columns=("example_id", "text", "label", "pred", "correct", "confidence", "loss", "n_tokens", "truncated"),
    required=("example_id", "text", "label", "pred", "correct"), open=True)

# clusters.parquet: what cluster.describe_clusters makes, then what the cluster stage adds from the slices and checks
CLUSTER_NAMING_COLUMNS = (
    "cluster_id", "size", "share_of_failures", "name", "kind", "keywords", "keyword_scores", "exemplar_ids",
    "top_confusions", "top_confusion_counts", "top_confusion_shares", "gold_labels", "gold_shares", "pred_labels",
    "pred_shares", "mean_confidence", "mean_loss", "mean_n_tokens", "truncated_share", "mean_membership",
    "local_error_rate", "reassigned", "summary", "parent_id", "parent_name")
_CLUSTER_LISTS = ("keywords", "keyword_scores", "exemplar_ids", "top_confusions", "top_confusion_counts",
                  "top_confusion_shares", "gold_labels", "gold_shares", "pred_labels", "pred_shares", "slices")
CLUSTERS = Table(
    columns=CLUSTER_NAMING_COLUMNS + ("slice_id", "slice", "slices", "label_issue_share", "probably_mislabeled"),
    required=("cluster_id", "size", "name"), lists=_CLUSTER_LISTS,
    dtypes={"cluster_id": "int32", "size": "int32", "reassigned": "int32", "parent_id": "Int32",
            "parent_name": "string", "name": "object", "kind": "object", "summary": "object",
            "slice_id": "Int64", "slice": "string", **dict.fromkeys(_CLUSTER_LISTS, "object"),
            **dict.fromkeys(("share_of_failures", "mean_confidence", "mean_loss", "mean_n_tokens", "truncated_share",
                             "mean_membership", "local_error_rate", "label_issue_share"), "float64")})

ASSIGNMENTS = Table(
    columns=("example_id", "cluster_id", "failure", "membership", "reassigned", "tier", "local_error_rate", "x", "y"),
    required=("example_id", "cluster_id"))

SLICES = Table(
    columns=("slice_id", "description", "features", "order", "support", "failures", "error_rate", "lift", "score",
             "p_value", "p_raw"),
    required=("slice_id", "description"), lists=("features",),
    dtypes={"slice_id": "int64", "description": "object", "features": "object", "order": "int64", "support": "int64",
            "failures": "int64", **dict.fromkeys(("error_rate", "lift", "score", "p_value", "p_raw"), "float64")})

SLICE_MEMBERS = Table(columns=("example_id", "slice_id"), required=("example_id", "slice_id"),
                      dtypes={"example_id": "object", "slice_id": "int64"})

CHECKS = Table(
    columns=("example_id", "label_issue_score", "label_issue", "suggested_label", "duplicate_group", "duplicate_kind",
             "duplicate_conflict", "in_train", "train_id", "train_similarity", "train_label_differs",
             "contaminated_fields", "train_row"),
    required=("example_id", "label_issue_score", "label_issue"))

SUGGESTIONS = Table(
    columns=("example_id", "label", "pred", "status", "error_type", "closest_type", "basis", "distance", "vote",
             "nearest_id", "cluster_id"),
    required=("example_id", "label", "pred", "status", "error_type", "closest_type", "basis", "distance", "vote",
              "nearest_id", "cluster_id"))

CENTROIDS = Table(columns=("cluster_id", "embedder_key", "centroid"), required=("cluster_id", "centroid",
                                                                               "embedder_key"), lists=("centroid",))
