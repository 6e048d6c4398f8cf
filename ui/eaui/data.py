"""Cached reads of the workspace's runs and their artifacts. Every artifact is read here, through the
erroranalysis library, and cached on its path and modification stamp (mtime and size), so a re-run stage is picked
up on the next render and an unchanged run costs nothing. The example table, the labels store and what is counted
over them are in eaui.labeled.

Large tables are cached with st.cache_resource (shared, not copied per rerun): treat them as read-only.
Readers raise erroranalysis.core.errors.UserError (RunError) for a missing or damaged artifact; pages show the message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from erroranalysis import stages
from erroranalysis.core.errors import RunError, UserError
from erroranalysis.labels import LabelStore
from erroranalysis.rundir import (
    ASSIGNMENTS,
    CHECKS,
    CHECKS_JSON,
    CLUSTERS,
    MANIFEST,
    METRICS,
    PREDICTIONS,
    SUGGESTIONS,
    Run,
    readers,
)
from erroranalysis_ui.eaui.workspace import Workspace


def stamp(path: Path) -> tuple[int, int] | None:
    try:
        st_ = path.stat()
    except OSError:
        return None
    return (st_.st_mtime_ns, st_.st_size)


def file_stamps(run_dir: Path, *names: str) -> tuple:
    return tuple(stamp(run_dir / n) for n in names)


def open_run(path: str | Path) -> Run:
    """Run.open, once the manifest it reads passes the readers' allow-list (every page runs confined to the app's
    folders: eaui.workspace)."""
    readers.check_allowed(Path(path) / MANIFEST)
    return Run.open(path)


# -- the workspace ------------------------------------------------------------------------------------------------


def workspace(ws: Workspace | str | Path) -> Workspace:
    """`ws`, or the workspace of a runs folder given as a path (no other folder allowed)."""
    return ws if isinstance(ws, Workspace) else Workspace.of(Path(ws))


def discover(ws: Workspace | Path) -> list[str]:
    """Run keys (paths relative to the runs folder, posix) of every run in the workspace, sorted."""
    return workspace(ws).discover()


def run_dir(ws: Workspace | Path, key: str) -> Path:
    """The folder of run `key`, refusing anything outside the app's folders (eaui.workspace)."""
    return workspace(ws).run_dir(key)


def list_runs(ws: Workspace | Path):
    """One row per run: key, task, created, examples, accuracy, failures, stages, clustered, problem. Whether a
    process holds each run is part of the cache key: a stage whose process died reads as interrupted though no file
    changed."""
    root = workspace(ws).runs_root
    keys = discover(ws)
    stamps = tuple((k, file_stamps(root / k, MANIFEST, METRICS, CLUSTERS), _writer_alive(root / k)) for k in keys)
    return _list_runs(str(root), stamps)


def _writer_alive(path: Path) -> bool:
    """Part of a run's cache key: a stage recorded as running turns interrupted when its process goes, though no
    file changes."""
    from erroranalysis.rundir.lock import writer_alive

    return writer_alive(path)


@st.cache_data(show_spinner=False, max_entries=16)
def _list_runs(root: str, stamps: tuple):
    import pandas as pd

    rows = []
    for key, *_ in stamps:
        path = Path(root) / key
        row: dict[str, Any] = {"run": key, "task": None, "created": None, "model": None, "examples": None,
                               "accuracy": None, "failures": None, "stages": "", "clustered": False, "problem": ""}
        try:
            run = open_run(path)
            manifest = run.manifest
            row["task"] = manifest.get("task")
            row["created"] = str(manifest.get("created", ""))[:16].replace("T", " ")
            row["model"] = (manifest.get("model") or {}).get("path") or (manifest.get("data") or {}).get("path")
            states = {name: run.state(name, manifest) for name in manifest.get("stages", {})}
            row["stages"] = " ".join(f"{_STAGE_ICON.get(v.get('status'), '?')} {k}" for k, v in states.items())
            row["clustered"] = readers.usable(run, CLUSTERS)
            row["examples"] = (manifest.get("data") or {}).get("rows")
            row["problem"] = next((run.explain(k, manifest) for k, v in states.items() if v.get("status") != "done"),
                                  None) or ""
            metrics = readers.read_metrics(run, optional=True)
        except UserError as exc:
            row["problem"] = str(exc).splitlines()[0]
            rows.append(row)
            continue
        if metrics is None and row["task"] == "sft":  # a training-data check: no predictions to score
            row["examples"] = row["examples"] or (manifest.get("data") or {}).get("rows")
        elif metrics is None:
            row["problem"] = row["problem"] or "no metrics yet"
        else:
            overall = metrics.get("overall", {})
            row["examples"] = overall.get("n", row["examples"])
            row["accuracy"] = overall.get("accuracy")
            row["failures"] = overall.get("n_failures")
        rows.append(row)
    return pd.DataFrame(rows, columns=["run", "task", "created", "model", "examples", "accuracy", "failures",
                                       "stages", "clustered", "problem"])


_STAGE_ICON = {"done": "✓", "failed": "✗", "running": "…", "committing": "…", "interrupted": "⏸"}


def stage_messages(path: Path) -> list[str]:
    """What is unfinished in a run, one line per stage that is not done (rundir says why and how to resume), and
    the last completed outputs a failed or interrupted re-run left in place."""
    run = open_run(path)
    manifest = run.manifest
    return [run.notice(name) or run.explain(name, manifest) for name in manifest.get("stages", {})
            if run.stage_status(name) != "done"]




# -- one run's artifacts ------------------------------------------------------------------------------------------


def manifest(path: Path) -> dict:
    return _manifest(str(path), stamp(path / MANIFEST))


@st.cache_data(show_spinner=False, max_entries=64)
def _manifest(path: str, mtime) -> dict:
    return open_run(path).manifest


def metrics(path: Path) -> dict:
    return _metrics(str(path), stamp(path / METRICS))


@st.cache_data(show_spinner=False, max_entries=32)
def _metrics(path: str, mtime) -> dict:
    data = open_run(path).metrics()
    if not isinstance(data, dict) or "overall" not in data:
        raise RunError(f"{Path(path) / METRICS}: no 'overall' section; run 'erroranalysis metrics {path}' again.")
    return data


def clusters(path: Path):
    """clusters.parquet sorted by impact (size), or None when the run has not been clustered."""
    return _clusters(str(path), file_stamps(path, CLUSTERS, MANIFEST))


@st.cache_data(show_spinner=False, max_entries=32)
def _clusters(path: str, stamps) -> Any:
    return readers.read_clusters(open_run(path), optional=True)


# -- comparing runs and reviewing suggestions (issue 5) ----------------------------------------------------------

_COMPARE_FILES = (MANIFEST, PREDICTIONS, ASSIGNMENTS, CLUSTERS)


def comparison(ws: Workspace | Path, base: str, candidates: list[str], db: LabelStore):
    """erroranalysis.stages.compare_runs of runs in the workspace (keys), cached on their files and the labels
    version. Shared, read-only. Raises UserError for runs over different eval sets."""
    paths = [run_dir(ws, k) for k in [base, *candidates]]
    stamps = tuple(file_stamps(p, *_COMPARE_FILES) for p in paths)
    return _comparison(tuple(str(p) for p in paths), stamps, str(db.path), db.version(), db)


@st.cache_resource(show_spinner="Comparing runs…", max_entries=8)
def _comparison(paths: tuple, stamps, db_path: str, version: int, _db: LabelStore):
    return stages.compare_runs(paths[0], list(paths[1:]), store=_db)


def suggestions(path: Path):
    """The run's taxonomy_suggestions.parquet (what apply-taxonomy matched, with distances), or None."""
    return _suggestions(str(path), file_stamps(path, SUGGESTIONS, MANIFEST))


@st.cache_data(show_spinner=False, max_entries=8)
def _suggestions(path: str, stamps):
    return readers.read_suggestions(open_run(path), optional=True)


# -- slices (issue 8) ---------------------------------------------------------------------------------------------


def slice_stamps(path: Path) -> tuple:
    """The stamps the slices are cached on."""
    from erroranalysis.rundir import SLICE_MEMBERS, SLICES

    return file_stamps(path, SLICES, SLICE_MEMBERS, MANIFEST)


def slices(path: Path):
    """(slices, members) of the run, best first (slices.parquet, slice_members.parquet with string example ids),
    or None when its slices stage is not done. The stage's manifest entry says why (failed, never run)."""
    return _slices(str(path), slice_stamps(path))


@st.cache_data(show_spinner=False, max_entries=16)
def _slices(path: str, stamps):
    got = readers.read_slices(open_run(path), optional=True)
    if got is None:
        return None
    found, members = got
    return found.sort_values("slice_id").reset_index(drop=True), members


# -- training signals (issue 7) -----------------------------------------------------------------------------------


def trainer_state(path: Path) -> Path | None:
    """The checkpoint's trainer_state.json as `erroranalysis run` copied it into the run, or None."""
    return readers.read_trainer_state(open_run(path), optional=True)


def _log_stamps(file: Path) -> tuple:
    if file.is_dir():  # a TensorBoard run folder: every event file in it
        return tuple(sorted((str(p), stamp(p)) for p in file.iterdir() if "tfevents" in p.name))
    return (stamp(file),)


def training_log(file: Path, kind: str):
    """(log, findings, signals) of a training log: the erroranalysis.checklist.training_log.TrainingLog, its
    findings (most severe first) and a summary per signal (training.summarize), cached on the file's stamp."""
    return _training_log(str(file), kind, _log_stamps(file))


@st.cache_data(show_spinner="Reading the training log…", max_entries=16)
def _training_log(file: str, kind: str, stamps):
    from erroranalysis.checklist import training, training_log

    reader = {"trainer_state": training_log.read_trainer_state, "tensorboard": training_log.read_tensorboard,
              "csv": training_log.read_csv_log, "jsonl": training_log.read_jsonl_log}[kind]
    log = reader(file)
    return log, training.diagnose(log), {name: training.summarize(s) for name, s in log.signals.items()}


# -- data checks and the doctor's report (issue 7) ----------------------------------------------------------------


def checks(path: Path):
    """(checks.json report, checks.parquet table) of the run, or None when its checks stage has not run."""
    return _checks(str(path), file_stamps(path, CHECKS, CHECKS_JSON, MANIFEST))


@st.cache_data(show_spinner=False, max_entries=8)
def _checks(path: str, stamps):
    run = open_run(path)
    report = readers.read_checks_report(run, optional=True)
    return None if report is None else (report, readers.read_checks(run))


def doctor_report(path: Path) -> str | None:
    """doctor.md written by `erroranalysis doctor` into this run, or None."""
    found = readers.read_doctor(open_run(path), optional=True)
    return found[0] if found else None


# -- training data: sft-check runs (issue 25) ---------------------------------------------------------------------


def sft(path: Path):
    """(summary, findings, rows) of an sft-check run (sft_summary.json, sft_findings.parquet, sft_rows.parquet),
    or None when the run has no sft_check stage done. Shared, read-only."""
    from erroranalysis.rundir import SFT_FINDINGS, SFT_ROWS, SFT_SUMMARY

    return _sft(str(path), file_stamps(path, SFT_SUMMARY, SFT_FINDINGS, SFT_ROWS, MANIFEST))


@st.cache_resource(show_spinner="Reading the training rows…", max_entries=4)
def _sft(path: str, stamps):
    return readers.read_sft(open_run(path), optional=True)
