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

# The columns a multi-label or a regression run adds to predictions.parquet after the core ones (docs/tasks/):
# the gold, predicted, missed and spurious label lists; the gold value, the predicted value, prediction - gold, |error|.
TASK_COLUMNS = {"multilabel": ("gold_labels", "pred_labels", "missed", "spurious"),
                "regression": ("target", "prediction", "error", "abs_error")}

# clusters.parquet: what cluster.describe_clusters makes, then what the cluster stage adds from the slices and checks
CLUSTER_NAMING_COLUMNS = (
    "cluster_id", "size", "share_of_failures", "name", "kind", "keywords", "keyword_scores", "exemplar_ids",
    "top_confusions", "top_confusion_counts", "top_confusion_shares", "gold_labels", "gold_shares", "pred_labels",
    "pred_shares", "mean_confidence", "mean_loss", "mean_n_tokens", "truncated_share", "mean_membership",
    "local_error_rate", "reassigned", "summary", "parent_id", "parent_name")
_CLUSTER_LISTS = ("keywords", "keyword_scores", "exemplar_ids", "top_confusions", "top_confusion_counts",
                  "top_confusion_shares", "gold_labels", "gold_shares", "pred_labels", "pred_shares", "slices")
CLUSTERS = Table(
    columns=CLUSTER_NAMING_COLUMNS + ("slice_id", "slice", "slices", "label_issue_share", "probably_mislabeled",
                                      "keyword_name"),
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

# predictions.parquet of a token-classification run: one row per sentence; these columns follow the core ones
TOKEN_PREDICTION_COLUMNS = ("tokens", "gold_tags", "pred_tags", "word_confidence", "n_words", "n_gold_spans",
                            "n_pred_spans", "n_error_spans", "error_kinds", "char_offsets")

# spans.parquet (token classification): one row per gold span and per predicted span that is no gold span's match,
# shaped as predictions (example_id is the span's id, label/pred its gold/predicted type or "O", correct its kind
# being "correct"), so the slices and the clusters group error spans as they group failing examples
SPAN_FEATURES = ("entity_type", "span_length", "position", "prev_word", "capitalization", "seen_in_train")
SPANS = Table(
    columns=("example_id", "text", "label", "pred", "correct", "confidence", "loss", "n_tokens", "truncated",
             "sentence_id", "source", "kind", "start", "end", "char_start", "char_end", "gold_type", "pred_type",
             "match_start", "match_end", "context", *SPAN_FEATURES),
    required=("example_id", "text", "label", "pred", "correct", "sentence_id", "source", "kind", "start", "end"),
    open=True,
    dtypes={"example_id": "object", "sentence_id": "object", "start": "int32", "end": "int32",
            "char_start": "int32", "char_end": "int32", "match_start": "int32", "match_end": "int32",
            "span_length": "int32", "n_tokens": "int32", "correct": "bool", "truncated": "bool",
            "confidence": "float64", "loss": "float64"})  # typed even when a block has no span: its shard's types
    # are the folder's (a reader takes a folder's schema from its first shard)
# sft_findings.parquet: one row per finding of `erroranalysis sft-check` (row: 0-based row of the data file; line:
# its line there; source: the --source-column value, when given)
SFT_FINDINGS = Table(columns=("row", "line", "kind", "detail", "source"), required=("row", "kind", "detail"),
                     dtypes={"row": "int64", "line": "int64", "kind": "object", "detail": "object"})

# sft_rows.parquet: every row of the data file as the trainer sees it: its tokens before truncation, those with a
# label, the kinds found, and its text in spans of one state each (segment_state: 0 masked, 1 trained, 2 cut)
SFT_ROWS = Table(columns=("row", "line", "source", "n_tokens", "n_trained", "kinds", "segments", "segment_state"),
                 required=("row", "n_tokens", "n_trained", "kinds", "segments", "segment_state"),
                 lists=("kinds", "segments", "segment_state"),
                 dtypes={"row": "int64", "line": "int64", "n_tokens": "int64", "n_trained": "int64"})
