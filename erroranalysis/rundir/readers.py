"""One typed reader per artifact: the only code that opens a run's files.

Every reader first asks the manifest for the artifact's last commit (none yet: a RunError naming the stage, its state
and the command to run), checks the file against the size and sha256 recorded at that commit (damaged or swapped
files are refused), then validates what it returns (columns, dtypes, shapes) once, so stages, the CLI
and the app get the same checked data and the same one-line messages. With `optional=True` a reader returns None
instead of raising when the artifact cannot be used.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from erroranalysis import files
from erroranalysis.errors import RunError, preview
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
    MANIFEST,
    METRICS,
    PREDICTIONS,
    PROBS,
    SFT_FINDINGS,
    SFT_ROWS,
    SFT_SUMMARY,
    SLICE_MEMBERS,
    SLICES,
    SOURCE_STAGES,
    SPANS,
    STAGE_ARTIFACTS,
    SUGGESTIONS,
    TABLES,
    TRAINER_STATE,
    owner,
)
from erroranalysis.rundir.confine import (  # noqa: F401  (readers.confined & co. are the readers' public API)
    OutsideError,
    check_allowed,
    check_tree,
    confined,
    real_roots,
)
from erroranalysis.rundir.formats import json_doc, npy, parquet, parquet_columns, require_columns

VERIFY_LIMIT = 256 << 20  # sha256 checked for artifacts up to this size (sizes are always checked)


_VERIFIED: dict[tuple, str] = {}  # (realpath, mtime_ns, size) -> sha256, so the app does not re-hash on every rerun


def artifact_path(run, name: str, required: bool = True, *, allowed_roots=None) -> Path | None:
    """The file of artifact `name` as its stage last committed it, checked against the recorded size and sha256.

    An artifact never committed is refused with the reason (its stage was not run, is running, was interrupted or
    failed, or an input stage is not done) and the command to run. A later attempt of the stage that is running,
    failed or was interrupted leaves the committed artifacts usable (they are a whole, consistent set); only a
    stage caught while moving its files into place (`committing`) makes them unusable until it is finished. When
    the stage is done but did not write `name`: None if not `required` (probabilities of a run without them),
    else a RunError.

    The run's manifest and the file are opened only inside `allowed_roots` (default: those of `confined`, if
    any): a symlink that leads out of them is refused (OutsideError) before anything is read."""
    check_allowed(run.path / MANIFEST, allowed_roots)
    manifest = run.manifest
    entry = manifest.get("artifacts", {}).get(name)
    if entry is None:
        stage = _expected_stage(run, manifest, name)
        reason = run.explain(stage, manifest)
        if reason:
            raise NotCommitted(f"{run.path}: {name} is not available: {reason}")
        if required and _pruned(run, manifest, name):
            raise NotCommitted(f"{run.path}: {name} was removed by 'erroranalysis timeline --prune' (an old step "
                               f"of a training run); run: {run.resume_command(stage)}")
        if required:
            raise NotCommitted(f"{run.path}: stage {stage!r} wrote no {name}; run: {run.resume_command(stage)}")
        return None
    stage = entry["stage"]
    state = run.state(stage, manifest) or {}
    if state.get("status") == "committing" or state.get("recorded_status") == "committing":
        raise NotCommitted(f"{run.path}: {name} is not available: stage {stage!r} was stopped while saving its files; "
                       f"run: {run.resume_command(stage)}")
    file = run.path / name
    check_tree(file, allowed_roots)
    _verify(run, file, entry, stage)
    return file


def usable(run, name: str) -> bool:
    """Whether artifact `name` is committed (damage is not checked: readers report it)."""
    try:
        return artifact_path(run, name, required=False) is not None
    except RunError:
        return False


def _expected_stage(run, manifest: dict, name: str) -> str:
    stages = owner(name)
    if set(stages) & set(SOURCE_STAGES):
        return run.source_stage(manifest)
    ran = [s for s in stages if s in manifest.get("stages", {})]
    return ran[0] if ran else stages[0]


def _pruned(run, manifest: dict, name: str) -> bool:
    return name in STAGE_ARTIFACTS["prune"] and (run.state("prune", manifest) or {}).get("status") == "done"


def _verify(run, file: Path, entry: dict, stage: str) -> None:
    command = run.resume_command(stage)
    if not file.exists():
        raise RunError(f"{file}: missing, though stage {stage!r} recorded it; run: {command}")
    size = files.size_of(file)
    if "bytes" in entry and size != entry["bytes"]:
        raise RunError(f"{file}: {size} bytes, but stage {stage!r} wrote {entry['bytes']} (damaged or replaced "
                       f"since); run: {command}")
    if "sha256" not in entry or size > VERIFY_LIMIT:
        return
    key = (os.path.realpath(file), _mtime(file), size)
    sha = _VERIFIED.get(key) or files.digest(file)["sha256"]
    if sha != entry["sha256"]:
        raise RunError(f"{file}: does not match the checksum stage {stage!r} recorded (damaged or changed since); "
                       f"run: {command}")
    _VERIFIED[key] = sha


def _mtime(file: Path) -> int:
    if file.is_dir():
        return max((p.stat().st_mtime_ns for p in file.rglob("*")), default=file.stat().st_mtime_ns)
    return file.stat().st_mtime_ns


class NotCommitted(RunError):
    """The artifact has no commit yet (its stage was not run, is running, was interrupted or failed first)."""


def _optional(read):
    """Give a reader `optional=`: None instead of a RunError when its artifact was never committed. A committed
    artifact that is damaged is still an error: a page must say so, not show nothing."""
    def wrapper(run, *args, optional: bool = False, **kwargs):
        try:
            return read(run, *args, **kwargs)
        except NotCommitted:
            if optional:
                return None
            raise

    wrapper.__name__, wrapper.__doc__ = read.__name__, read.__doc__
    return wrapper


@_optional
def read_predictions(run, columns=None):
    """predictions.parquet with ids as strings, `correct` as booleans and texts as strings, checked once here:
    the core columns present, ids unique, no missing `correct`. `columns` limits what is read (the checked
    columns are always read)."""
    return _examples(run, PREDICTIONS, columns)


@_optional
def read_spans(run, columns=None):
    """spans.parquet of a token-classification run (one row per gold or predicted span, shaped as predictions),
    checked as `read_predictions` checks predictions."""
    return _examples(run, SPANS, columns)


UNITS_OF = {"token-classification": SPANS}  # task -> the table its slices and clusters group, if not predictions


def units_artifact(run) -> str:
    """The table whose rows a run's slices and clusters group: predictions.parquet, or spans.parquet for token
    classification (its error spans are the failures)."""
    return UNITS_OF.get(run.task, PREDICTIONS)


@_optional
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
    if ids.isna().any():
        raise RunError(f"{file}, column 'example_id': {int(ids.isna().sum())} missing ids; every example needs one.")
    ids = ids.astype(str)
    if ids.duplicated().any():
        raise RunError(f"{file}, column 'example_id': duplicate ids {preview(ids[ids.duplicated()].unique())}; "
                        "give every example its own id.")
    correct = frame["correct"]
    if correct.isna().any():
        raise RunError(f"{file}, column 'correct': {int(correct.isna().sum())} missing values; run the stage that "
                        "writes predictions again.")
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


@_optional
def read_prediction_rows(run, ids, columns=("example_id", "text", "label", "pred", "correct")):
    """The predictions of the examples `ids` alone (a report's exemplars), without loading every row: the file
    is checked as `read_predictions` checks it and filtered on `example_id` as it is read."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    file = artifact_path(run, PREDICTIONS)
    dataset = ds.dataset(str(file), format="parquet")
    kind = dataset.schema.field("example_id").type
    wanted = pa.array([str(i) for i in ids]).cast(kind) if pa.types.is_string(kind) or pa.types.is_large_string(
        kind) else pa.array([int(i) for i in ids if str(i).lstrip("-").isdigit()], type=kind)
    present = [c for c in columns if c in dataset.schema.names]
    frame = dataset.to_table(columns=present, filter=ds.field("example_id").isin(wanted)).to_pandas()
    frame["example_id"] = frame["example_id"].astype(str)
    return frame


def n_predictions(run, name: str = PREDICTIONS) -> int:
    """Rows of predictions.parquet (or of the table `name`), from the file's metadata (nothing else is read)."""
    import pyarrow.parquet as pq

    file = artifact_path(run, name)
    parts = sorted(file.glob("*.parquet")) if file.is_dir() else [file]
    try:
        return sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
    except Exception as exc:
        raise RunError(f"{file}: unreadable, damaged ({type(exc).__name__}); run the stage that writes it "
                       "again.") from None


@_optional
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


@_optional
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


@_optional
def read_trainer_state(run) -> Path | None:
    """The checkpoint's trainer_state.json as copied into the run by inference, or None."""
    return artifact_path(run, TRAINER_STATE, required=False)


@_optional
def read_metrics(run) -> dict:
    file = artifact_path(run, METRICS)
    metrics = json_doc(file)
    if not isinstance(metrics, dict) or not {"overall", "per_class", "confusion"} <= set(metrics):
        raise RunError(f"{file}: not a metrics report (overall, per_class, confusion); run: "
                       f"{run.resume_command('metrics')}")
    return metrics


@_optional
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


@_optional
def read_checks_report(run) -> dict:
    """checks.json: counts, top suspects, duplicate groups, leakage, shift and findings."""
    return json_doc(artifact_path(run, CHECKS_JSON))


@_optional
def read_slices(run):
    """(slices, members): slices.parquet and slice_members.parquet with string example ids."""
    slices_file, members_file = artifact_path(run, SLICES), artifact_path(run, SLICE_MEMBERS)
    slices, members = parquet(slices_file), parquet(members_file)
    require_columns(slices_file, slices, TABLES[SLICES].required)
    require_columns(members_file, members, TABLES[SLICE_MEMBERS].required)
    members["example_id"] = members["example_id"].astype(str)
    return slices, members


@_optional
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


@_optional
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


@_optional
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


@_optional
def read_assignments(run):
    """assignments.parquet: one row per example (predictions order): cluster_id (-1 none), failure, membership, x, y."""
    file = artifact_path(run, ASSIGNMENTS)
    frame = parquet(file)
    require_columns(file, frame, TABLES[ASSIGNMENTS].required)
    frame["example_id"] = frame["example_id"].astype(str)
    frame["cluster_id"] = frame["cluster_id"].astype("int64")
    return frame


@_optional
def read_suggestions(run):
    """taxonomy_suggestions.parquet: apply-taxonomy's suggestion for each failure."""
    file = artifact_path(run, SUGGESTIONS)
    frame = parquet(file)
    require_columns(file, frame, TABLES[SUGGESTIONS].required)
    frame["example_id"] = frame["example_id"].astype(str)
    return frame


@_optional
def read_doctor(run) -> tuple[str, dict]:
    """(doctor.md, doctor.json) of a run made by `erroranalysis doctor`."""
    md = artifact_path(run, DOCTOR_MD)
    try:
        text = md.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunError(f"{md}: unreadable ({type(exc).__name__}); run erroranalysis doctor again.") from None
    return text, json_doc(artifact_path(run, DOCTOR_JSON))


@_optional
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
