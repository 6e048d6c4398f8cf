"""Cached data access for the app. Every artifact is read here, through the erroranalysis library, and cached on
its path and modification stamp (mtime and size), so a re-run stage is picked up on the next render and an
unchanged run costs nothing. Labels are cached on the store's version (its newest event id).

Large tables are cached with st.cache_resource (shared, not copied per rerun): treat them as read-only.
Readers raise erroranalysis.errors.UserError (RunError) for a missing or damaged artifact; pages show the message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from erroranalysis import stages
from erroranalysis.errors import RunError, UserError
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


def _open(path: str | Path) -> Run:
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
            run = _open(path)
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
        if metrics is None:
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
    run = _open(path)
    manifest = run.manifest
    return [run.notice(name) or run.explain(name, manifest) for name in manifest.get("stages", {})
            if run.stage_status(name) != "done"]




# -- one run's artifacts ------------------------------------------------------------------------------------------


def manifest(path: Path) -> dict:
    return _manifest(str(path), stamp(path / MANIFEST))


@st.cache_data(show_spinner=False, max_entries=64)
def _manifest(path: str, mtime) -> dict:
    return _open(path).manifest


def metrics(path: Path) -> dict:
    return _metrics(str(path), stamp(path / METRICS))


@st.cache_data(show_spinner=False, max_entries=32)
def _metrics(path: str, mtime) -> dict:
    data = _open(path).metrics()
    if not isinstance(data, dict) or "overall" not in data:
        raise RunError(f"{Path(path) / METRICS}: no 'overall' section; run 'erroranalysis metrics {path}' again.")
    return data


def clusters(path: Path):
    """clusters.parquet sorted by impact (size), or None when the run has not been clustered."""
    return _clusters(str(path), file_stamps(path, CLUSTERS, MANIFEST))


@st.cache_data(show_spinner=False, max_entries=32)
def _clusters(path: str, stamps) -> Any:
    return readers.read_clusters(_open(path), optional=True)


def base_table(path: Path):
    """Predictions joined with clusters and the 2-D layout (stages.base_table). Shared, read-only."""
    return _base_table(str(path), file_stamps(path, PREDICTIONS, ASSIGNMENTS, CLUSTERS))


# Ids looked up when the example-id index is made. By hand at 1M rows: after a warm-up of 10,000 ids the first
# lookup of 27,758 still took 0.094 s, after 30,000 ids 0.009 s.
WARM_LOOKUP = 30_000


@st.cache_resource(show_spinner="Reading the run…", max_entries=4)
def _base_table(path: str, stamps):
    return _one_chunk(stages.base_table(_open(path)))


def _one_chunk(df):
    """`df` with each Arrow-backed column (texts, ids, labels) in one chunk. Read from Parquet they are one chunk per
    row group, and taking the rows a table shows from them copies every chunk: `benchmarks/ui.py` prints 25 ms for
    2,000 of 1M texts in 8 chunks, 0.7 ms from one; combining costs 0.036 s per 1M texts, once per run."""
    import pandas as pd

    for col in df.columns:
        values = df[col].array
        if isinstance(values, pd.arrays.ArrowExtensionArray):  # str columns included; numpy-backed ones are whole
            chunked = values.__arrow_array__()
            if chunked.num_chunks > 1:
                df[col] = pd.array(chunked.combine_chunks(), dtype=df[col].dtype)
    return df


@st.cache_resource(show_spinner=False, max_entries=4)
def _example_ids(path: str, stamps):
    """The base table's example ids as an index, kept with it for every labeling change (attach_labels,
    patch_labels). One lookup of many ids is made here, as the page first loads: at 1M rows pandas' first such
    lookup takes 0.19 s and a later one 0.014 s (`benchmarks/ui.py`, 27,758 ids), so the first click no longer
    pays it."""
    import pandas as pd

    index = pd.Index(_base_table(path, stamps)["example_id"])
    index.get_indexer(index[:WARM_LOOKUP])
    return index


# -- labels -------------------------------------------------------------------------------------------------------


def store(db_path: str, read_only: bool = False, viewers: tuple[str, ...] = ()) -> LabelStore:
    """A labels store of the workspace (created on first use), writing as the app; per-session users come from
    `store(...).with_user`. `read_only` (the app's --read-only) and `viewers` are enforced by the store itself. A
    read-only app on a workspace with no labels database yet reads an empty one (it creates nothing there).
    Opening a damaged database raises its one-line DamagedError (a UserError), every time until it is restored."""
    if read_only and not Path(db_path).exists():
        return _empty_store(tuple(viewers))
    return _store(db_path, bool(read_only), tuple(viewers))


@st.cache_resource(show_spinner=False)
def _store(db_path: str, read_only: bool, viewers: tuple[str, ...]) -> LabelStore:
    return LabelStore(db_path, writer="app", read_only=read_only, viewers=viewers)


@st.cache_resource(show_spinner=False)
def _empty_store(viewers: tuple[str, ...]) -> LabelStore:
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="erroranalysis-no-labels-")) / "labels.sqlite"
    LabelStore(path, writer="app")  # creates the schema
    return LabelStore(path, writer="app", read_only=True, viewers=viewers)


def run_key(db: LabelStore, path: Path) -> str:
    return db.run_key(path)


def label_tables(db: LabelStore, key: str):
    """(assignments, flags, notes) of one run, cached on the store's version."""
    return _label_tables(str(db.path), key, db.version(), db)


@st.cache_data(show_spinner=False, max_entries=16)
def _label_tables(db_path: str, key: str, version: int, _db: LabelStore):
    return stages.label_tables(_db, key)


def examples(path: Path, db: LabelStore):
    """The run's example table with labels attached (stages.attach_labels). Shared, read-only."""
    key = db.run_key(path)
    version = db.version()
    return _examples(str(path), file_stamps(path, PREDICTIONS, ASSIGNMENTS, CLUSTERS), str(db.path), key, version, db)


@st.cache_resource(show_spinner=False, max_entries=4)
def _examples(path: str, stamps, db_path: str, key: str, version: int, _db: LabelStore):
    """After a labeling change the newest table is patched from the events since (a few rows), not rebuilt from
    every label of the run; rebuilt when the patch cannot be made (stages.patch_labels)."""
    ids = _example_ids(path, stamps)
    newest = _newest_examples(path, stamps, db_path, key)
    seen = newest.latest  # one read: (version, table) go together, whatever other sessions store meanwhile
    table = None
    if seen is not None and seen[0] <= version:
        table = stages.patch_labels(seen[1], _db, key, seen[0], version, ids=ids)
    if table is None:
        table = stages.attach_labels(_base_table(path, stamps), *_label_tables(db_path, key, version, _db), ids=ids)
    newest.offer(version, table)
    return table


class _Newest:
    """The newest example table made for a run and labels database, with its labels version: what the next version
    is patched from. Shared by every session, so read as one tuple and replaced under a lock, never by an older
    version."""

    def __init__(self):
        import threading

        self.latest: tuple[int, Any] | None = None
        self._lock = threading.Lock()

    def offer(self, version: int, table) -> None:
        with self._lock:
            if self.latest is None or self.latest[0] <= version:
                self.latest = (version, table)


@st.cache_resource(show_spinner=False, max_entries=4)
def _newest_examples(path: str, stamps, db_path: str, key: str) -> _Newest:
    return _Newest()


def error_types(db: LabelStore):
    return _error_types(str(db.path), db.version(), db)


@st.cache_data(show_spinner=False, max_entries=16)
def _error_types(db_path: str, version: int, _db: LabelStore):
    return _db.error_types()


def labeled_per_run(db: LabelStore) -> dict[str, int]:
    return _labeled_per_run(str(db.path), db.version(), db)


@st.cache_data(show_spinner=False, max_entries=8)
def _labeled_per_run(db_path: str, version: int, _db: LabelStore) -> dict[str, int]:
    a = _db.assignments()
    if a.empty:
        return {}
    return {str(k): int(v) for k, v in a[a["status"] == "accepted"].groupby("run").size().items()}


def export_text(fmt: str, path: Path, db: LabelStore) -> str:
    """An export of the run, cached on its stamps and the labels version (so the download is instant)."""
    return _export_text(fmt, str(path), file_stamps(path, PREDICTIONS, ASSIGNMENTS, CLUSTERS), str(db.path),
                        db.run_key(path), db.version(), db)


@st.cache_data(show_spinner="Preparing the export…", max_entries=12)
def _export_text(fmt: str, path: str, stamps, db_path: str, key: str, version: int, _db: LabelStore) -> str:
    table = _examples(path, stamps, db_path, key, version, _db)
    return stages.render(fmt, _open(path), _db, table=table, error_types=_error_types(db_path, version, _db))


def taxonomy_doc(path: Path, db: LabelStore) -> dict:
    return _taxonomy_doc(str(path), file_stamps(path, PREDICTIONS, ASSIGNMENTS, CLUSTERS), str(db.path),
                         db.run_key(path), db.version(), db)


@st.cache_data(show_spinner=False, max_entries=8)
def _taxonomy_doc(path: str, stamps, db_path: str, key: str, version: int, _db: LabelStore) -> dict:
    table = _examples(path, stamps, db_path, key, version, _db)
    return stages.build_taxonomy(_open(path), _db, table=table, error_types=_error_types(db_path, version, _db),
                                   include_text=False, exemplars=5)


# -- clusters -----------------------------------------------------------------------------------------------------


def cluster_summary(path: Path, db: LabelStore):
    """One row per cluster, by impact (failures in it, largest first): cluster_id, name, size, share (of failures),
    top_confusion, labeled (share of its examples with an error type), main_type, keywords, summary (one sentence),
    parent_id (-1 for a cluster without a parent) and parent (its parent's name)."""
    key = db.run_key(path)
    stamps = file_stamps(path, PREDICTIONS, ASSIGNMENTS, CLUSTERS)
    return _cluster_summary(str(path), stamps, str(db.path), key, db.version(), db)


@st.cache_data(show_spinner=False, max_entries=16)
def _cluster_summary(path: str, stamps, db_path: str, key: str, version: int, _db: LabelStore):
    import pandas as pd

    clusters = _clusters(path, file_stamps(Path(path), CLUSTERS, MANIFEST))
    table = _examples(path, stamps, db_path, key, version, _db)
    # counted on columns, never on filtered copies of the table: this reruns after every labeling change
    failed = ~table["correct"].to_numpy(bool)
    cluster = table["cluster_id"].to_numpy()
    member, typed = cluster >= 0, table["error_type_id"].to_numpy() >= 0
    n_fail = max(1, int(failed.sum()))
    fail_count = pd.Series(cluster[member & failed]).value_counts()
    all_count = pd.Series(cluster[member]).value_counts()
    labeled = pd.Series(cluster[member & typed]).value_counts()
    main = table.loc[member & typed, ["cluster_id", "error_type"]].groupby("cluster_id")["error_type"].agg(
        lambda s: s.value_counts().index[0])
    rows = []
    for _, c in clusters.iterrows():
        cid = int(c["cluster_id"])
        n_all = int(all_count.get(cid, 0))
        n_f = int(fail_count.get(cid, 0))
        confusions = list(c["top_confusions"])
        rows.append({
            "cluster_id": cid,
            "name": str(c["name"]) or f"cluster {cid}",
            "size": n_f if n_f else int(c["size"]),
            "share": n_f / n_fail,
            "top_confusion": str(confusions[0]).replace("->", "→") if confusions else "",
            "labeled": (int(labeled.get(cid, 0)) / n_all) if n_all else 0.0,
            "main_type": str(main.get(cid, "")),
            "keywords": [str(k) for k in c["keywords"]][:6],
            "summary": str(c["summary"]) if isinstance(c.get("summary"), str) else "",
            "parent_id": int(c["parent_id"]) if pd.notna(c.get("parent_id", None)) else -1,
            "parent": str(c["parent_name"]) if isinstance(c.get("parent_name"), str) else "",
        })
    out = pd.DataFrame(rows, columns=["cluster_id", "name", "size", "share", "top_confusion", "labeled", "main_type",
                                      "keywords", "summary", "parent_id", "parent"])
    return out.sort_values(["size", "cluster_id"], ascending=[False, True]).reset_index(drop=True)


MAP_BACKGROUND = 20_000  # correct examples drawn behind the failures, at most
MAP_FAILURES = 20_000  # failing points drawn, at most: a sample by cluster above that (the browser stays fast)
MAP_PER_CLUSTER = 200  # ...keeping up to this many of every cluster, so a small cluster still shows


def cluster_map_figure(path: Path, db: LabelStore, *, highlight: int | None, show_correct: bool):
    """The map as a Plotly figure; the point arrays are built once per run and shared, so switching the highlighted
    cluster only restyles markers."""
    from erroranalysis_ui.eaui import charts

    stamps = file_stamps(path, PREDICTIONS, ASSIGNMENTS, CLUSTERS)
    return charts.fast_figure(charts.styled_map(_cluster_map_base(str(path), stamps, show_correct), highlight))


@st.cache_resource(show_spinner=False, max_entries=8)
def _cluster_map_base(path: str, stamps, show_correct: bool) -> dict:
    from erroranalysis_ui.eaui import charts

    table = _base_table(path, stamps)
    placed = table[table["x"].notna() & table["y"].notna()]
    failing = _sample_by_cluster(placed[~placed["correct"].astype(bool)], MAP_FAILURES)
    clusters = _clusters(path, file_stamps(Path(path), CLUSTERS, MANIFEST))
    names = dict(zip(clusters["cluster_id"], clusters["name"])) if clusters is not None else {}
    background = None
    if show_correct:
        correct = placed[placed["correct"].astype(bool)]
        background = correct.sample(MAP_BACKGROUND, random_state=0) if len(correct) > MAP_BACKGROUND else correct
    return charts.map_traces(failing, names, background=background)


def _sample_by_cluster(failing, limit: int):
    """At most `limit` rows: up to MAP_PER_CLUSTER of every cluster (a small cluster still shows), the rest of the
    budget shared by cluster size."""
    import numpy as np
    import pandas as pd

    if len(failing) <= limit:
        return failing
    groups = [group for _, group in failing.groupby("cluster_id", sort=True)]
    sizes = np.array([len(group) for group in groups])
    floor = np.minimum(sizes, max(1, min(MAP_PER_CLUSTER, limit // len(groups))))
    spare = max(0, limit - int(floor.sum()))
    extra = np.floor(spare * (sizes - floor) / max(1, int((sizes - floor).sum()))).astype(int)
    keep = np.minimum(sizes, floor + extra)
    return pd.concat([group.sample(int(k), random_state=0) for group, k in zip(groups, keep)])


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
    return readers.read_suggestions(_open(path), optional=True)


# -- slices (issue 8) ---------------------------------------------------------------------------------------------


def _slice_stamps(path: Path) -> tuple:
    from erroranalysis.rundir import SLICE_MEMBERS, SLICES

    return file_stamps(path, SLICES, SLICE_MEMBERS, MANIFEST)


def slices(path: Path):
    """(slices, members) of the run, best first (slices.parquet, slice_members.parquet with string example ids),
    or None when its slices stage is not done. The stage's manifest entry says why (failed, never run)."""
    return _slices(str(path), _slice_stamps(path))


@st.cache_data(show_spinner=False, max_entries=16)
def _slices(path: str, stamps):
    got = readers.read_slices(_open(path), optional=True)
    if got is None:
        return None
    found, members = got
    return found.sort_values("slice_id").reset_index(drop=True), members


def slice_rows(path: Path) -> tuple[dict[int, Any], Any]:
    """Where the slices' examples are in the example table (data.examples): {slice_id: sorted row positions}, and
    the positions of every example in some slice. Computed once per run, so a rerun of the Slices page takes its
    rows by position instead of matching a million example ids."""
    return _slice_rows(str(path), file_stamps(path, PREDICTIONS, ASSIGNMENTS, CLUSTERS), _slice_stamps(path))


@st.cache_resource(show_spinner=False, max_entries=4)
def _slice_rows(path: str, stamps, slice_stamps):
    import numpy as np
    import pandas as pd

    members = _slices(path, slice_stamps)[1]
    at = _example_ids(path, stamps).get_indexer(members["example_id"])
    keep = at >= 0
    groups = pd.Series(at[keep]).groupby(members["slice_id"].to_numpy()[keep])
    return {int(k): np.sort(v.to_numpy()) for k, v in groups}, np.unique(at[keep])


def slice_summary(path: Path, db: LabelStore):
    """One row per slice, best first: slices.parquet's columns plus labeled (share of its failures with an error
    type), main_type (the commonest of them) and main_cluster (the cluster most of its failures are in)."""
    key = db.run_key(path)
    stamps = file_stamps(path, PREDICTIONS, ASSIGNMENTS, CLUSTERS)
    return _slice_summary(str(path), stamps, _slice_stamps(path), str(db.path), key, db.version(), db)


@st.cache_data(show_spinner=False, max_entries=16)
def _slice_summary(path: str, stamps, slice_stamps, db_path: str, key: str, version: int, _db: LabelStore):
    found = _slices(path, slice_stamps)
    if found is None:
        return None
    slices_, members = found
    table = _examples(path, stamps, db_path, key, version, _db)
    cols = ["example_id", "correct", "error_type_id", "error_type", "cluster_id", "cluster_name"]
    joined = members.merge(table[cols], on="example_id", how="inner")
    failing = joined[~joined["correct"].astype(bool)]
    n_fail = failing.groupby("slice_id").size()
    labeled = failing[failing["error_type_id"] >= 0]
    n_labeled = labeled.groupby("slice_id").size()
    main_type = labeled.groupby("slice_id")["error_type"].agg(lambda s: s.value_counts().index[0])
    clustered = failing[failing["cluster_id"] >= 0]
    main_cluster = clustered.groupby("slice_id")["cluster_name"].agg(
        lambda s: s.value_counts().index[0] if len(s) else "")
    out = slices_.drop(columns=["features"], errors="ignore").copy()
    sid = out["slice_id"]
    out["labeled"] = [int(n_labeled.get(s, 0)) / int(n_fail.get(s, 0)) if n_fail.get(s, 0) else 0.0 for s in sid]
    out["main_type"] = [str(main_type.get(s, "")) for s in sid]
    out["main_cluster"] = [str(main_cluster.get(s, "")) for s in sid]
    return out


# -- training signals (issue 7) -----------------------------------------------------------------------------------


def trainer_state(path: Path) -> Path | None:
    """The checkpoint's trainer_state.json as `erroranalysis run` copied it into the run, or None."""
    return readers.read_trainer_state(_open(path), optional=True)


def _log_stamps(file: Path) -> tuple:
    if file.is_dir():  # a TensorBoard run folder: every event file in it
        return tuple(sorted((str(p), stamp(p)) for p in file.iterdir() if "tfevents" in p.name))
    return (stamp(file),)


def training_log(file: Path, kind: str):
    """(log, findings, signals) of a training log: the erroranalysis.checklist.training_log.TrainingLog, its findings (most
    severe first) and a summary per signal (training.summarize), cached on the file's modification stamp."""
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
    run = _open(path)
    report = readers.read_checks_report(run, optional=True)
    return None if report is None else (report, readers.read_checks(run))


def doctor_report(path: Path) -> str | None:
    """doctor.md written by `erroranalysis doctor` into this run, or None."""
    found = readers.read_doctor(_open(path), optional=True)
    return found[0] if found else None
