"""One typed reader per artifact: the only code that opens a run's files.

Every reader first asks the manifest for the artifact's last commit (none yet: a RunError naming the stage, its state
and the command to run), checks the file against the size and sha256 recorded at that commit (damaged or swapped
files are refused), then validates what it returns (columns, dtypes, shapes) once, so stages, the CLI
and the app get the same checked data and the same one-line messages. With `optional=True` a reader returns None
instead of raising when the artifact cannot be used.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from erroranalysis.core import shards
from erroranalysis.core.errors import RunError, UserError, preview
from erroranalysis.rundir.artifacts import (
    ASSIGNMENTS,
    CENTROIDS,
    CHECKS,
    CHECKS_JSON,
    CLUSTERS,
    DOCTOR_JSON,
    DOCTOR_MD,
    EMBEDDINGS,
    EMBEDDINGS_META,
    HIDDEN,
    METRICS,
    PREDICTIONS,
    PROBS,
    SFT_FINDINGS,
    SFT_ROWS,
    SFT_SUMMARY,
    SLICE_MEMBERS,
    SLICES,
    SPANS,
    SUGGESTIONS,
    TABLES,
    TRAINER_STATE,
)
from erroranalysis.rundir.confine import (  # noqa: F401  (readers.confined & co. are the readers' public API)
    OutsideError,
    check_allowed,
    check_tree,
    confined,
    real_roots,
)
from erroranalysis.rundir.formats import json_doc, npy, parquet, parquet_columns, require_columns
from erroranalysis.rundir.resolve import NotCommitted, artifact_path, optional_reader, usable  # noqa: F401  (public API)


@optional_reader
def read_predictions(run, columns=None):
    """predictions.parquet with ids as strings, `correct` as booleans and texts as strings, checked once here:
    the core columns present, ids unique, no missing `correct`. `columns` limits what is read (the checked
    columns are always read)."""
    return _examples(run, PREDICTIONS, columns)


@optional_reader
def read_spans(run, columns=None):
    """spans.parquet of a token-classification run (one row per gold or predicted span, shaped as predictions),
    checked as `read_predictions` checks predictions."""
    return _examples(run, SPANS, columns)


UNITS_OF = {"token-classification": SPANS}  # task -> the table its slices and clusters group, if not predictions


def units_artifact(run) -> str:
    """The table whose rows a run's slices and clusters group: predictions.parquet, or spans.parquet for token
    classification (its error spans are the failures)."""
    return UNITS_OF.get(run.task, PREDICTIONS)


@optional_reader
def read_units(run, columns=None):
    """The rows the slices and clusters group (`units_artifact`), read as `read_predictions` reads predictions."""
    return _examples(run, units_artifact(run), columns)


def _examples(run, name: str, columns=None):
    file = artifact_path(run, name)
    checked = TABLES[name].required
    wanted = None if columns is None else list(dict.fromkeys([*checked, *columns]))
    if wanted is not None:
        available = parquet_columns(file)
        wanted = [c for c in wanted if c in available or c in checked]
    frame = parquet(file, wanted)
    require_columns(file, frame, checked)
    ids = frame["example_id"]
    check_missing(file, {"example_id": int(ids.isna().sum())})
    ids = ids.astype(str)
    if ids.duplicated().any():
        raise RunError(f"{file}, column 'example_id': duplicate ids {preview(ids[ids.duplicated()].unique())}; "
                        "give every example its own id.")
    correct = frame["correct"]
    check_missing(file, {"correct": int(correct.isna().sum())})
    if correct.dtype != bool and not set(np.unique(correct.to_numpy())) <= {0, 1}:
        raise RunError(f"{file}, column 'correct': values {preview(np.unique(correct.to_numpy())[:3])} are not "
                        "booleans; run the stage that writes predictions again.")
    frame = frame.reset_index(drop=True)
    frame["example_id"] = ids.to_numpy()
    frame["correct"] = correct.astype(bool).to_numpy()
    frame["text"] = frame["text"].fillna("").astype(str)
    frame["label"] = frame["label"].astype(str)
    frame["pred"] = frame["pred"].fillna("").astype(str)
    if columns is not None:
        frame = frame[[c for c in dict.fromkeys([*columns, *checked]) if c in frame.columns]]
    return frame


_MISSING = {"example_id": "missing ids; every example needs one.",
            "correct": "missing values; run the stage that writes predictions again."}


def check_missing(file, counts: dict) -> None:
    """The one-line error for missing ids or `correct` values of a predictions-shaped table, from their counts (in
    one frame, or summed over the blocks a distributed stage read)."""
    for column, message in _MISSING.items():
        if counts.get(column):
            raise RunError(f"{file}, column '{column}': {counts[column]} {message}")


@optional_reader
def read_prediction_rows(run, ids, columns=("example_id", "text", "label", "pred", "correct")):
    """The predictions of the examples `ids` alone (a report's exemplars), without loading every row."""
    return read_rows_by_id(run, PREDICTIONS, ids, columns)


@optional_reader
def read_rows_by_id(run, name: str, ids, columns):
    """The rows of a per-example table (predictions, checks, slice members) whose `example_id` is one of `ids`,
    filtered as they are read (a file, shards, or shards on object storage), so no caller holds the whole table."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    dataset = shards.dataset(artifact_path(run, name))
    kind = dataset.schema.field("example_id").type
    wanted = pa.array([str(i) for i in ids]).cast(kind) if pa.types.is_string(kind) or pa.types.is_large_string(
        kind) else pa.array([int(i) for i in ids if str(i).lstrip("-").isdigit()], type=kind)
    present = [c for c in columns if c in dataset.schema.names]
    frame = dataset.to_table(columns=present, filter=ds.field("example_id").isin(wanted)).to_pandas()
    frame["example_id"] = frame["example_id"].astype(str)
    return frame


def shared_path(run, name: str, required: bool = True):
    """`artifact_path`, where every worker of a cluster reads it: for a run being built for object storage, the URL
    of its shards (`core.shards.shared`), not the pointer in this disk's mirror. For a path sent to workers."""
    return shards.shared(artifact_path(run, name, required))


def n_predictions(run, name: str = PREDICTIONS) -> int:
    """Rows of predictions.parquet (or of the table `name`), from the file's metadata (nothing else is read)."""
    file = artifact_path(run, name)
    try:
        return sum(shards.open_parquet(p).metadata.num_rows for p in shards.parts(file, ".parquet"))
    except UserError:  # a pointer refused, an object unreachable: already one line
        raise
    except Exception as exc:
        raise RunError(f"{file}: unreadable, damaged ({type(exc).__name__}); run the stage that writes it "
                       "again.") from None


@optional_reader
def read_probs(run) -> np.ndarray | None:
    """probs.npy [n, n_classes] (class order = the manifest's labels), or None for a run without probabilities."""
    file = artifact_path(run, PROBS, required=False)
    if file is None:
        return None
    probs = npy(file)
    expected = (n_predictions(run), len(run.labels))
    if probs.shape != expected:
        raise RunError(f"{file}: shape {tuple(probs.shape)}, expected {expected} (predictions x labels); run the "
                       "stage that writes it again.")
    return probs


@optional_reader
def read_hidden(run) -> np.ndarray | None:
    """hidden_states.npy [n, d] (the checkpoint's mean-pooled last hidden state), or None when not kept."""
    file = artifact_path(run, HIDDEN, required=False)
    if file is None:
        return None
    states = npy(file)  # one row per unit: per prediction, or per span of a token-classification run
    if states.ndim != 2 or states.shape[0] != n_predictions(run, units_artifact(run)):
        raise RunError(f"{file}: shape {tuple(states.shape)} does not have one row per prediction; run the stage "
                       "that writes it again.")
    return states


@optional_reader
def read_trainer_state(run) -> Path | None:
    """The checkpoint's trainer_state.json as copied into the run by inference, or None."""
    return artifact_path(run, TRAINER_STATE, required=False)


@optional_reader
def read_metrics(run) -> dict:
    file = artifact_path(run, METRICS)
    metrics = json_doc(file)
    if not isinstance(metrics, dict) or not {"overall", "per_class", "confusion"} <= set(metrics):
        raise RunError(f"{file}: not a metrics report (overall, per_class, confusion); run: "
                       f"{run.resume_command('metrics')}")
    return metrics


@optional_reader
def read_checks(run):
    """checks.parquet: one row per example (predictions order) with label-issue, duplicate and leakage columns."""
    file = artifact_path(run, CHECKS)
    frame = parquet(file)
    require_columns(file, frame, TABLES[CHECKS].required)
    frame["example_id"] = frame["example_id"].astype(str)
    for column in ("label_issue", "duplicate_conflict", "in_train", "train_label_differs"):
        if column in frame.columns:  # all-missing flags come back from Parquet as objects
            frame[column] = frame[column].astype("boolean")
    return frame


@optional_reader
def read_checks_report(run) -> dict:
    """checks.json: counts, top suspects, duplicate groups, leakage, shift and findings."""
    return json_doc(artifact_path(run, CHECKS_JSON))


@optional_reader
def read_slices(run):
    """(slices, members): slices.parquet and slice_members.parquet with string example ids."""
    slices_file, members_file = artifact_path(run, SLICES), artifact_path(run, SLICE_MEMBERS)
    slices, members = parquet(slices_file), parquet(members_file)
    require_columns(slices_file, slices, TABLES[SLICES].required)
    require_columns(members_file, members, TABLES[SLICE_MEMBERS].required)
    members["example_id"] = members["example_id"].astype(str)
    return slices, members


@optional_reader
def read_embeddings(run):
    """(vectors [n_failures, d], meta): embeddings.npy and embeddings.json (embedder, example ids)."""
    meta_file = artifact_path(run, EMBEDDINGS_META)
    meta = json_doc(meta_file)
    if not isinstance(meta, dict) or not isinstance(meta.get("embedder"), dict):
        raise RunError(f"{meta_file}: no 'embedder' entry; run: {run.resume_command('cluster')}")
    vectors = npy(artifact_path(run, EMBEDDINGS))
    ids = meta.get("example_ids") or []
    if len(vectors) != len(ids):
        raise RunError(f"{meta_file}: {len(ids)} example ids for {len(vectors)} vectors; run: "
                       f"{run.resume_command('cluster')}")
    return vectors, meta


@optional_reader
def read_clusters(run):
    """clusters.parquet sorted by size (largest first), list columns as lists."""
    file = artifact_path(run, CLUSTERS)
    frame = parquet(file)
    require_columns(file, frame, TABLES[CLUSTERS].required)
    for column in TABLES[CLUSTERS].lists:
        values = frame[column] if column in frame.columns else [None] * len(frame)
        frame[column] = [_as_list(v) for v in values]
    frame["cluster_id"] = frame["cluster_id"].astype("int64")
    frame["size"] = frame["size"].astype("int64")
    frame["name"] = frame["name"].fillna("").astype(str)
    return frame.sort_values(["size", "cluster_id"], ascending=[False, True]).reset_index(drop=True)


def _as_list(value) -> list:
    if value is None:
        return []
    if isinstance(value, float) and np.isnan(value):
        return []
    return list(value)


@optional_reader
def read_centroids(run):
    """cluster_centroids.parquet (kept by `timeline --prune` in place of embeddings.npy): (cluster ids [k], unit
    centroids [k, d] float32, the embedder key)."""
    file = artifact_path(run, CENTROIDS)
    frame = parquet(file)
    require_columns(file, frame, TABLES[CENTROIDS].required)
    ids = frame["cluster_id"].to_numpy(dtype=np.int64)
    vectors = np.array([np.asarray(v, dtype=np.float32) for v in frame["centroid"]], dtype=np.float32)
    if len(ids) and vectors.ndim != 2:
        raise RunError(f"{file}: centroids of unequal length; run: {run.resume_command('prune')}")
    key = str(frame["embedder_key"].iat[0]) if len(frame) else None
    return ids, vectors.reshape(len(ids), -1), key


@optional_reader
def read_assignments(run):
    """assignments.parquet: one row per example (predictions order): cluster_id (-1 none), failure, membership, x, y."""
    file = artifact_path(run, ASSIGNMENTS)
    frame = parquet(file)
    require_columns(file, frame, TABLES[ASSIGNMENTS].required)
    frame["example_id"] = frame["example_id"].astype(str)
    frame["cluster_id"] = frame["cluster_id"].astype("int64")
    return frame


@optional_reader
def read_suggestions(run):
    """taxonomy_suggestions.parquet: apply-taxonomy's suggestion for each failure."""
    file = artifact_path(run, SUGGESTIONS)
    frame = parquet(file)
    require_columns(file, frame, TABLES[SUGGESTIONS].required)
    frame["example_id"] = frame["example_id"].astype(str)
    return frame


@optional_reader
def read_doctor(run) -> tuple[str, dict]:
    """(doctor.md, doctor.json) of a run made by `erroranalysis doctor`."""
    md = artifact_path(run, DOCTOR_MD)
    try:
        text = md.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunError(f"{md}: unreadable ({type(exc).__name__}); run erroranalysis doctor again.") from None
    return text, json_doc(artifact_path(run, DOCTOR_JSON))


@optional_reader
def read_sft(run) -> tuple[dict, object, object]:
    """(sft_summary.json, sft_findings.parquet, sft_rows.parquet) of an sft-check run; the rows' list columns as
    Python lists."""
    summary_file, findings_file, rows_file = (artifact_path(run, name) for name in (SFT_SUMMARY, SFT_FINDINGS,
                                                                                    SFT_ROWS))
    summary = json_doc(summary_file)
    if not isinstance(summary, dict) or not {"rows", "counts"} <= set(summary):
        raise RunError(f"{summary_file}: not an sft-check summary (rows, counts); run sft-check again "
                       f"({run.resume_command('sft_check')}).")
    findings, rows = parquet(findings_file), parquet(rows_file)
    require_columns(findings_file, findings, TABLES[SFT_FINDINGS].required)
    require_columns(rows_file, rows, TABLES[SFT_ROWS].required)
    for column in TABLES[SFT_ROWS].lists:
        rows[column] = [_as_list(v) for v in rows[column]]
    return summary, findings, rows
