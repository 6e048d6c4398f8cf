"""The example table of a run (predictions with clusters, the 2-D layout and the labels attached), the workspace's
labels store, and what the pages count over them (erroranalysis.report.summaries), cached.

The table is cached on the run's artifact stamps (eaui.data) and the store's version (its newest event id); after a
labeling change it is patched from the events since, not rebuilt. Large tables are cached with st.cache_resource
(shared, not copied per rerun): treat them as read-only.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import streamlit as st

from erroranalysis import stages
from erroranalysis.core.errors import UserError
from erroranalysis.labels import LabelStore
from erroranalysis.labels.workspace import keyed_by_path
from erroranalysis.report import summaries
from erroranalysis.rundir import ASSIGNMENTS, CLUSTERS, PREDICTIONS, SPANS
from erroranalysis_ui.eaui.data import clusters, file_stamps, open_run, slice_stamps, slices

TABLE_FILES = (PREDICTIONS, SPANS, ASSIGNMENTS, CLUSTERS)  # what the example table is made of (spans: token runs)


def base_table(path: Path):
    """Predictions joined with clusters and the 2-D layout (stages.base_table). Shared, read-only."""
    return _base_table(str(path), file_stamps(path, *TABLE_FILES))


# Ids looked up when the example-id index is made. By hand at 1M rows: after a warm-up of 10,000 ids the first
# lookup of 27,758 still took 0.094 s, after 30,000 ids 0.009 s.
WARM_LOOKUP = 30_000


@st.cache_resource(show_spinner="Reading the run…", max_entries=4)
def _base_table(path: str, stamps):
    return one_chunk(stages.base_table(open_run(path)))


def one_chunk(df):
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
    """The run's key in the labels database (the store's rule: a run outside the database's folder is keyed by the
    id in its manifest, read here within the app's folders; one whose manifest cannot be read is keyed by its path)."""
    if keyed_by_path(path, db.path):  # inside the database's folder: no manifest to read
        return db.run_key(path)
    try:
        run = open_run(path)
    except UserError:
        run = SimpleNamespace(path=Path(path), id=None)
    return db.run_key(run)


def label_tables(db: LabelStore, key: str):
    """(assignments, flags, notes) of one run, cached on the store's version."""
    return _label_tables(str(db.path), key, db.version(), db)


@st.cache_data(show_spinner=False, max_entries=16)
def _label_tables(db_path: str, key: str, version: int, _db: LabelStore):
    return stages.label_tables(_db, key)


def examples(path: Path, db: LabelStore):
    """The run's example table with labels attached (stages.attach_labels). Shared, read-only."""
    key = run_key(db, path)
    version = db.version()
    return _examples(str(path), file_stamps(path, *TABLE_FILES), str(db.path), key, version, db)


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
    return _export_text(fmt, str(path), file_stamps(path, *TABLE_FILES), str(db.path),
                        run_key(db, path), db.version(), db)


@st.cache_data(show_spinner="Preparing the export…", max_entries=12)
def _export_text(fmt: str, path: str, stamps, db_path: str, key: str, version: int, _db: LabelStore) -> str:
    table = _examples(path, stamps, db_path, key, version, _db)
    return stages.render(fmt, open_run(path), _db, table=table, error_types=_error_types(db_path, version, _db))


def taxonomy_doc(path: Path, db: LabelStore) -> dict:
    return _taxonomy_doc(str(path), file_stamps(path, *TABLE_FILES), str(db.path),
                         run_key(db, path), db.version(), db)


@st.cache_data(show_spinner=False, max_entries=8)
def _taxonomy_doc(path: str, stamps, db_path: str, key: str, version: int, _db: LabelStore) -> dict:
    table = _examples(path, stamps, db_path, key, version, _db)
    return stages.build_taxonomy(open_run(path), _db, table=table, error_types=_error_types(db_path, version, _db),
                                   include_text=False, exemplars=5)


# -- clusters -----------------------------------------------------------------------------------------------------


def cluster_summary(path: Path, db: LabelStore):
    """erroranalysis.report.summaries.cluster_summary of the run's example table and clusters, cached on their stamps and
    the labels version."""
    key = run_key(db, path)
    return _cluster_summary(str(path), file_stamps(path, *TABLE_FILES), str(db.path), key, db.version(), db)


@st.cache_data(show_spinner=False, max_entries=16)
def _cluster_summary(path: str, stamps, db_path: str, key: str, version: int, _db: LabelStore):
    table = _examples(path, stamps, db_path, key, version, _db)
    return summaries.cluster_summary(table, clusters(Path(path)))


def confusion_pairs(path: Path):
    """erroranalysis.report.summaries.confusion_pairs of every failure of the run, cached on its stamps."""
    return _confusion_pairs(str(path), file_stamps(path, *TABLE_FILES))


@st.cache_data(show_spinner=False, max_entries=8)
def _confusion_pairs(path: str, stamps):
    return summaries.confusion_pairs(_base_table(path, stamps))


MAP_BACKGROUND = 20_000  # correct examples drawn behind the failures, at most
MAP_FAILURES = 20_000  # failing points drawn, at most: a sample by cluster above that (the browser stays fast)
MAP_PER_CLUSTER = 200  # ...keeping up to this many of every cluster, so a small cluster still shows


def cluster_map_figure(path: Path, db: LabelStore, *, highlight: int | None, show_correct: bool):
    """The map as a Plotly figure; the point arrays are built once per run and shared, so switching the highlighted
    cluster only restyles markers."""
    from erroranalysis_ui.eaui import charts

    stamps = file_stamps(path, *TABLE_FILES)
    return charts.fast_figure(charts.styled_map(_cluster_map_base(str(path), stamps, show_correct), highlight))


@st.cache_resource(show_spinner=False, max_entries=8)
def _cluster_map_base(path: str, stamps, show_correct: bool) -> dict:
    from erroranalysis_ui.eaui import charts

    table = _base_table(path, stamps)
    placed = table[table["x"].notna() & table["y"].notna()]
    failing = summaries.sample_by_cluster(placed[~placed["correct"].astype(bool)], MAP_FAILURES, MAP_PER_CLUSTER)
    found = clusters(Path(path))
    names = dict(zip(found["cluster_id"], found["name"])) if found is not None else {}
    background = None
    if show_correct:
        correct = placed[placed["correct"].astype(bool)]
        background = correct.sample(MAP_BACKGROUND, random_state=0) if len(correct) > MAP_BACKGROUND else correct
    return charts.map_traces(failing, names, background=background)


# -- slices -------------------------------------------------------------------------------------------------------


def slice_rows(path: Path) -> tuple[dict[int, Any], Any]:
    """Where the slices' examples are in the example table (examples): {slice_id: sorted row positions}, and
    the positions of every example in some slice. Computed once per run, so a rerun of the Slices page takes its
    rows by position instead of matching a million example ids."""
    return _slice_rows(str(path), file_stamps(path, *TABLE_FILES), slice_stamps(path))


@st.cache_resource(show_spinner=False, max_entries=4)
def _slice_rows(path: str, stamps, member_stamps):
    import numpy as np
    import pandas as pd

    members = slices(Path(path))[1]
    at = _example_ids(path, stamps).get_indexer(members["example_id"])
    keep = at >= 0
    groups = pd.Series(at[keep]).groupby(members["slice_id"].to_numpy()[keep])
    return {int(k): np.sort(v.to_numpy()) for k, v in groups}, np.unique(at[keep])


def slice_summary(path: Path, db: LabelStore):
    """One row per slice, best first: slices.parquet's columns plus labeled (share of its failures with an error
    type), main_type (the commonest of them) and main_cluster (the cluster most of its failures are in)."""
    key = run_key(db, path)
    stamps = file_stamps(path, *TABLE_FILES)
    return _slice_summary(str(path), stamps, slice_stamps(path), str(db.path), key, db.version(), db)


@st.cache_data(show_spinner=False, max_entries=16)
def _slice_summary(path: str, stamps, member_stamps, db_path: str, key: str, version: int, _db: LabelStore):
    found = slices(Path(path))
    if found is None:
        return None
    return summaries.slice_summary(*found, _examples(path, stamps, db_path, key, version, _db))
