"""The labeled error taxonomy of a run: one table that joins predictions, clusters and labels, and the exports
the app and `erroranalysis export` share (JSON with a versioned schema, CSV, Markdown).

    from erroranalysis.stages import export

    doc = export.build_taxonomy(Run.open("runs/sample"), LabelStore("runs/labels.sqlite"))
    export.export_taxonomy("runs/sample", "csv", "labels.csv")  # what the CLI does

The JSON format is documented in docs/taxonomy.md.
"""

from __future__ import annotations

from pathlib import Path

from erroranalysis.core import files
from erroranalysis.core.errors import UserError
from erroranalysis.core.validation import check_param
from erroranalysis.labels import FLAGS, LabelStore, labels_db_for
from erroranalysis.labels.document import taxonomy_document
from erroranalysis.labels.taxonomy import EXPORT_FORMATS, EXTENSIONS, to_csv, to_json, to_markdown, validate
from erroranalysis.rundir import Run, readers


def base_table(run: Run):
    """One row per example, in eval-set order: predictions.parquet plus cluster_id (-1 when unclustered or the run
    has no clusters), cluster_name, membership, x and y (NaN without a layout). A token-classification run's
    examples are its spans (spans.parquet: the rows its clusters group and its labels name)."""
    import numpy as np
    import pandas as pd

    df = readers.read_units(run)
    for col in ("confidence", "loss"):
        if col not in df.columns:
            df[col] = np.nan
    assign = readers.read_assignments(run, optional=True)
    if assign is None:
        df["cluster_id"] = np.int64(-1)
        df["cluster_name"] = ""
        df["membership"] = np.nan
        df["x"] = np.nan
        df["y"] = np.nan
        return df
    assign = assign.drop_duplicates("example_id")
    # One hash lookup, then array takes: much faster than a merge on 100k string keys.
    pos = pd.Index(assign["example_id"]).get_indexer(df["example_id"])
    found = pos >= 0
    take = np.where(found, pos, 0)
    cluster = assign["cluster_id"].to_numpy()[take] if len(assign) else np.zeros(len(df), dtype=np.int64)
    df["cluster_id"] = np.where(found, cluster, -1).astype(np.int64)
    for col in ("membership", "x", "y"):
        if col in assign.columns and len(assign):
            df[col] = np.where(found, assign[col].to_numpy(dtype=float)[take], np.nan)
        else:
            df[col] = np.nan
    clusters = readers.read_clusters(run, optional=True)
    names = dict(zip(clusters["cluster_id"], clusters["name"])) if clusters is not None else {}
    df["cluster_name"] = df["cluster_id"].map(names).astype(object).fillna("").astype(str)
    return df


def label_tables(store: LabelStore | None, key: str):
    """(assignments, flags, notes) DataFrames of one run from the store (empty ones without a store)."""
    import pandas as pd

    if store is None:
        return (pd.DataFrame(columns=["run", "example_id", "error_type_id", "error_type", "severity", "source",
                                      "status", "cluster_id", "updated", "updated_by"]),
                pd.DataFrame(columns=["run", "example_id", "flag", "created", "created_by"]),
                pd.DataFrame(columns=["run", "example_id", "text", "updated", "updated_by"]))
    return store.assignments(key), store.flags(key), store.notes(key)


def attach_labels(base, assignments, flags, notes, *, ids=None):
    """base_table plus the labels: error_type_id (-1 = none), error_type, severity, source, status,
    labeled_cluster_id (the cluster when it was labeled), label_wrong, not_error, note, updated, updated_by.

    The app rebuilds its table with this when `patch_labels` cannot patch it, over every example of the run, so its
    cost follows the labeled rows: they are looked up in `ids` (pd.Index(base["example_id"]); pass the same one each time and its hash table
    is built once) and the label columns spread from them by position (arrow `take`), not built row by row."""
    import numpy as np
    import pandas as pd

    ids = pd.Index(base["example_id"]) if ids is None else ids
    df = base.copy(deep=False)  # new columns only: base's own columns are shared, not copied
    a = assignments.drop_duplicates("example_id")
    at = _rows_of(ids, a["example_id"])
    found = at >= 0
    df["error_type_id"] = np.where(found, a["error_type_id"].to_numpy(dtype=np.int64)[np.where(found, at, 0)]
                                   if len(a) else -1, -1).astype("int64")
    for col in ("error_type", "severity", "source", "status", "updated", "updated_by"):
        df[col] = _spread(a[col], at)
    cluster = a["cluster_id"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    df["labeled_cluster_id"] = pd.array(np.where(found, cluster[np.where(found, at, 0)] if len(a) else np.nan,
                                                 np.nan), dtype="Float64").astype("Int64")
    for flag in FLAGS:
        df[flag] = _rows_of(ids, flags.loc[flags["flag"] == flag, "example_id"] if len(flags) else []) >= 0
    df["note"] = _spread(notes["text"] if len(notes) else [], _rows_of(ids, notes["example_id"] if len(notes) else []))
    return df


def patch_labels(table, store: LabelStore, key: str, since: int, until: int, *, ids=None, max_rows: int = 100_000):
    """`table` (attach_labels of run `key` at labels version `since`) at version `until`, from the events between
    them: what the app does after a labeling change instead of reading every label of the run again. None when the
    table must be rebuilt: events were archived (ids not contiguous), a backup was restored up to now (it replaces
    every row and records none), an error type changed up to now (names and severities of many rows; error types
    are read as they are now), an assignment names a type deleted since, or more than `max_rows` rows changed.
    The events are read column by column and the changed rows set column by column: no dict per row."""
    import numpy as np
    import pandas as pd

    from erroranalysis.labels import eventlog
    from erroranalysis.labels.fields import clean_run

    key = clean_run(key)  # as the store keeps it
    after = store.events(limit=None, with_payload=True, after=since, columns=True)
    events = [e for e in after if e.id <= until]
    # a restore or an error-type change up to now, not only up to `until`: a copy restored since may hold other
    # events under the same ids, and error types are read as they are now
    if len(events) != until - since or any(e.action == "restore" for e in after):
        return None
    if any(g["table"] == "error_types" for e in after for g in e.payload["groups"]):
        return None
    if sum(e.n_changes for e in events) > max_rows:
        return None
    changed = eventlog.changed_rows([g for e in reversed(events) for g in e.payload["groups"]], key)
    if not changed:
        return table
    ids = pd.Index(table["example_id"]) if ids is None else ids
    df = table.copy(deep=False)  # copy on write: only the columns set below are copied
    a = changed.get("assignments")
    if a is not None:
        live = a["present"].to_numpy(bool)
        type_ids = np.where(live, a["error_type_id"].to_numpy(dtype=object), -1).astype(np.int64)
        types = {t.id: t for t in store.error_types()}
        if any(int(t) not in types for t in np.unique(type_ids[live])):
            return None  # a type deleted since `until` (another writer, just now): the rebuild reads what is there
        of_type = pd.Series(type_ids)

        def text(col: str):
            return np.where(live, a[col].to_numpy(dtype=object), "")

        _set(df, ids, a["example_id"], {
            "error_type_id": type_ids,
            "error_type": of_type.map({i: t.name for i, t in types.items()}).fillna("").to_numpy(dtype=object),
            "severity": of_type.map({i: t.severity for i, t in types.items()}).fillna("").to_numpy(dtype=object),
            "source": text("source"), "status": text("status"), "updated": text("updated"),
            "updated_by": text("updated_by"),
            "labeled_cluster_id": pd.array(np.where(live, a["cluster_id"].to_numpy(dtype=object), None),
                                           dtype="Int64")})
    f = changed.get("flags")
    for flag in FLAGS if f is not None else ():
        rows = f[f["flag"] == flag]
        _set(df, ids, rows["example_id"], {flag: rows["present"].to_numpy(bool)})
    n = changed.get("notes")
    if n is not None:
        _set(df, ids, n["example_id"], {"note": np.where(n["present"].to_numpy(bool),
                                                         n["text"].to_numpy(dtype=object), "")})
    return df


def _set(df, ids, example_ids, columns: dict) -> None:
    """Set, at the rows of `example_ids` (in `ids`), each column of `columns` (values in the same order)."""
    import numpy as np
    import pandas as pd

    at = ids.get_indexer(np.asarray(example_ids, dtype=object))
    keep = at >= 0
    if not keep.any():
        return
    for col, values in columns.items():
        values = values[keep]
        # one value for all (a bulk assignment's type, user, time) is set as a scalar: no array to convert
        shared = not pd.isna(values).any() and bool((values == values[0]).all())
        df.iloc[at[keep], df.columns.get_loc(col)] = values[0] if shared else values


def _rows_of(ids, example_ids):
    """For each row of the table `ids` indexes: the position of its example in `example_ids` (unique), or -1."""
    import numpy as np

    where = ids.get_indexer(list(example_ids))
    at = np.full(len(ids), -1, dtype=np.int64)
    hit = where >= 0
    at[where[hit]] = np.flatnonzero(hit)
    return at


def _spread(values, at):
    """A text column: values[at[i]] at row i, "" where at[i] is -1 (and where the value is missing)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    strings = pc.fill_null(pa.array(pd.Series(values, dtype="str"), from_pandas=True).cast(pa.large_string()), "")
    strings = pa.concat_arrays([strings, pa.array([""], pa.large_string())])
    return pd.array(strings.take(pa.array(at % len(strings))), dtype="str")  # -1 wraps to the trailing ""


def example_table(run: Run, store: LabelStore | None = None):
    """base_table(run) with the run's labels from `store` attached (see attach_labels)."""
    key = store.run_key(run) if store is not None else run.name
    return attach_labels(base_table(run), *label_tables(store, key))


def build_taxonomy(run: Run, store: LabelStore | None = None, *, exemplars: int = 3, include_text: bool = True,
                   table=None, error_types=None) -> dict:
    """The labeled taxonomy of `run` as a JSON-ready dict (validates against JSON_SCHEMA).

    `table` (an example_table) and `error_types` (store.error_types()) may be passed when already at hand.
    """
    if table is None:
        table = example_table(run, store)
    if error_types is None:
        error_types = store.error_types() if store is not None else []
    manifest = run.manifest
    info = {"name": run.name, "key": store.run_key(run) if store is not None else run.name,
            "task": manifest.get("task", "classification"), "labels": [str(x) for x in manifest.get("labels", [])],
            "model": (manifest.get("model") or {}).get("path"), "data": (manifest.get("data") or {}).get("path")}
    return taxonomy_document(table, error_types, info, exemplars=exemplars, include_text=include_text)


def render(fmt: str, run: Run, store: LabelStore | None, *, table=None, error_types=None) -> str:
    """The export in `fmt` (json, csv or markdown) as text."""
    check_param("format", fmt, fmt in EXPORT_FORMATS, f"one of {', '.join(EXPORT_FORMATS)}")
    if table is None:
        table = example_table(run, store)
    if fmt == "csv":
        return to_csv(table)
    doc = build_taxonomy(run, store, table=table, error_types=error_types)
    if fmt == "json":
        validate(doc)
        return to_json(doc)
    return to_markdown(doc)


def open_store(run_path: str | Path, labels_db: str | Path | None = None) -> LabelStore | None:
    """The labels store for a run: `labels_db` when given (it must exist), else the database the workspace rule
    picks (erroranalysis.labels.labels_db_for) when it exists, else None (a run nobody labeled yet exports with no
    error types). The store is checked when opened: a damaged one is an error, never a partial export."""
    path = Path(labels_db) if labels_db is not None else labels_db_for(run_path)
    if not path.exists():
        if labels_db is not None:
            raise UserError(f"{path}: no labels database here; check --labels-db.")
        return None
    return LabelStore(path, create=False)


# the stages whose files an export reads beside the predictions, and what it lacks when they are not done
EXPORT_READS = {"cluster": "clusters (every example's cluster_id is -1, error types list no clusters)",
                "cluster_names": "the newest cluster names"}


def export_notes(run_path: str | Path) -> list[str]:
    """What an export of the run lacks, or shows from an older commit, because a stage it reads is not done (the
    stage interrupted, failed or running, with the command that resumes it, as `show` says); [] when nothing."""
    run = Run.open(run_path)
    manifest = run.manifest
    notes = []
    for stage, lacks in EXPORT_READS.items():
        if stage not in manifest.get("stages", {}):
            continue  # never run (e.g. --no-cluster): nothing is missing that was asked for
        older = run.notice(stage)
        reason = older or run.explain(stage, manifest)
        if reason:
            notes.append(f"{stage}: {reason}" if older else f"{stage}: {reason}; so the export has no {lacks}")
    return notes


def export_taxonomy(run_path: str | Path, fmt: str, out: str | Path, *, labels_db: str | Path | None = None) -> Path:
    """Write the run's taxonomy export to `out` atomically; return the path."""
    check_param("format", fmt, fmt in EXPORT_FORMATS, f"one of {', '.join(EXPORT_FORMATS)}")
    run = Run.open(run_path)
    store = open_store(run.path, labels_db)
    text = render(fmt, run, store)
    out = Path(out)
    if out.is_dir():
        raise UserError(f"{out}: is a directory; pass a file name such as {out / ('taxonomy' + EXTENSIONS[fmt])}.")
    files.write_text(out, text)
    return out
