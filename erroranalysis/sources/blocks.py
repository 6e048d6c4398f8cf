"""An eval set read in blocks of rows by whichever process needs them: what lets Ray workers read a Parquet eval
set themselves (on a shared disk or object storage) while the driver holds none of its rows.

`scan` reads what the driver needs without the rows: the row count and schema from the Parquet footer, a streamed
sha256, and the first rows, validated as in-process (so a wrong column name fails before any worker starts).
`read_block` reads rows start..start+n and applies the same validation, per block, with the same one-line errors
(`erroranalysis.sources.table.load_eval_set`; rows are numbered in the whole file, ids default to the row number in the
whole file), then maps the gold labels onto the model's. What one block cannot check, ids unique across blocks,
holds nothing on the driver: the workers write each block's ids cut by hash into parts (`write_id_parts`) and one
task per part finds the id used twice whose first row comes first (`first_duplicate`, `duplicate_error`).

A JSONL or CSV file cannot be cut into row ranges without reading it (a CSV's quoted cells may hold newlines):
`to_parquet` reads it whole with the in-process reader (the same rules, types and one-line errors) and writes a
Parquet copy that keeps each row's `_line` (`erroranalysis.sources.table`'s numbering); one worker makes it, and the
blocks are then read from the copy as from a Parquet file, their errors naming the user's file. A `save_to_disk`
folder goes the same way, streamed: its split chosen and its Arrow record batches read by the in-process reader's
`table.dataset_batches`, written on in row groups, so the worker never holds the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from erroranalysis.core import shards, storage
from erroranalysis.core.errors import DataError, where
from erroranalysis.sources.table import FORMATS, DataOptions, EvalSet, as_source, load_eval_set, map_labels

HEAD_ROWS = 1000  # rows the driver reads and validates before the run starts
COPY = b"erroranalysis.copy"  # schema metadata of a `to_parquet` copy: its `_line` column is the file's numbering
COPY_ROW_GROUP = 16_384


@dataclass
class Scanned(EvalSet):
    """An eval set known by its footer and first rows: `frame` holds the first rows only, `n_rows` all of them.
    `n_cut` (texts cut at max_chars) is known once the workers have read every block."""

    n_rows: int = 0
    n_cut: int | None = None
    sources: dict = field(default_factory=dict)  # metadata column -> the file's column
    rows_path: object = None  # the Parquet file the workers read: `path` itself, or a `to_parquet` copy of it

    @property
    def rows(self):
        return self.rows_path if self.rows_path is not None else self.path

    def __len__(self) -> int:
        return self.n_rows

    def describe(self) -> dict:
        entry = super().describe()
        return {**entry, "rows": self.n_rows, "n_cut": self.n_cut}


def readable(path) -> bool:
    """Whether workers can read `path` in blocks: a Parquet file, on a local disk or object storage."""
    source = as_source(path)
    return (isinstance(source, (Path, storage.ObjectPath)) and FORMATS.get(source.suffix.lower()) == "parquet"
            and source.is_file())


def convertible(path) -> bool:
    """Whether `to_parquet` can make a copy workers read in blocks: a JSONL or CSV file, a folder on a local disk
    (a `save_to_disk` folder; any other is refused by the copy with the in-process error)."""
    source = as_source(path)
    if isinstance(source, Path) and source.is_dir():
        return True
    return (isinstance(source, (Path, storage.ObjectPath)) and FORMATS.get(source.suffix.lower()) in ("jsonl", "csv")
            and source.is_file())


def format_of(source) -> str:
    """The format name the in-process reader gives `source`: a `save_to_disk` folder's, else its suffix's."""
    if isinstance(source, Path) and source.is_dir():
        return "hf_dataset"
    return FORMATS.get(source.suffix.lower(), "parquet")


def to_parquet(source, target, encoding: str = "utf-8", split: str | None = None) -> int:
    """Write JSONL or CSV file `source` as Parquet file `target` with its `_line` column (read whole, in the process
    that calls this: a worker); its rows. A column Arrow cannot store as one type is a one-line DataError: the
    in-process one for cells of two kinds (`cells.column_kind`), else one saying so (numbers and text). A
    `save_to_disk` folder (its split `split`) is streamed instead (`_stream_folder`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from erroranalysis.sources import cells
    from erroranalysis.sources.table import read_table

    source = as_source(source)
    if isinstance(source, Path) and source.is_dir():
        return _stream_folder(source, target, split)
    frame, _ = read_table(source, encoding=encoding)
    try:
        table = pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowException, TypeError, ValueError):
        for name in frame.columns:  # which column: its cells differ in kind (a number on one line, text on another)
            try:
                pa.Table.from_pandas(frame[[name]], preserve_index=False)
            except (pa.ArrowException, TypeError, ValueError) as exc:
                cells.column_kind(frame[name], source=source, lines=frame["_line"].to_numpy(), column=name)
                raise DataError(f"{source}: column {name!r} mixes kinds of values that Parquet cannot hold in one "
                                f"column ({storage.reason(exc)}); write every cell one way, or use --engine local."
                                ) from None
        raise
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), COPY: b"1"})
    shards.write_file(target, lambda p: pq.write_table(table, p, row_group_size=COPY_ROW_GROUP))  # a path or a URL
    return len(frame)


def _stream_folder(source: Path, target, split: str | None) -> int:
    """A `save_to_disk` folder's split as Parquet file `target` with `_line`: its record batches
    (`table.dataset_batches`, the in-process split choice and errors) written as they come, in row groups of about
    `COPY_ROW_GROUP` rows (`_row_groups`); its rows."""
    import pyarrow.parquet as pq

    from erroranalysis.sources.table import dataset_batches, empty_dataset

    folder, batches = dataset_batches(source, split)
    rows = []

    def write(path: Path) -> None:
        writer = None
        try:
            for group in _row_groups(batches, COPY_ROW_GROUP):
                if writer is None:
                    writer = pq.ParquetWriter(path, group.schema.with_metadata({**(group.schema.metadata or {}),
                                                                                COPY: b"1"}))
                writer.write_table(group, row_group_size=group.num_rows)
                rows.append(group.num_rows)
        finally:
            if writer is not None:
                writer.close()
        if not rows:
            raise empty_dataset(folder)

    shards.write_file(target, write)
    return sum(rows)


def _row_groups(batches, size: int):
    """Record batches with `_line` (the 1-based row, as `read_table` numbers them; a `_line` of the dataset's own
    replaced in place, as pandas does), gathered into tables of at least `size` rows (the last: what is left)."""
    import pyarrow as pa

    pending, n = [], 0
    for batch in batches:
        if not batch.num_rows:
            continue
        lines = pa.array(np.arange(n + 1, n + 1 + batch.num_rows, dtype=np.int64))
        names = batch.schema.names
        pending.append(batch.set_column(names.index("_line"), "_line", lines) if "_line" in names
                       else batch.append_column("_line", lines))
        n += batch.num_rows
        if sum(b.num_rows for b in pending) >= size:
            yield pa.Table.from_batches(pending)
            pending = []
    if pending:
        yield pa.Table.from_batches(pending)


def is_copy(schema) -> bool:
    """Whether a Parquet schema is a `to_parquet` copy's (its `_line` column numbers the user's file)."""
    return COPY in (schema.metadata or {})


def with_lines(frame: pd.DataFrame, start: int, copy: bool) -> pd.DataFrame:
    """A block's rows with `_line`: a copy's own column, else the 1-based row in the whole file."""
    if not copy:
        frame["_line"] = np.arange(start + 1, start + 1 + len(frame), dtype=np.int64)
    return frame


def parquet_file(path: Path | storage.ObjectPath):
    """An input's ParquetFile (`core.shards.open_parquet`), a damaged one as the input's one-line error."""
    try:
        return shards.open_parquet(path)
    except DataError:
        raise
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise DataError(f"{path}: not a readable Parquet file ({storage.reason(exc)}).") from None


def read_rows(path: Path | storage.ObjectPath, start: int, rows: int, file=None) -> pd.DataFrame:
    """Rows start..start+rows of a Parquet file, with `_line` (1-based row in the file): only the row groups that
    hold them are read."""
    import pyarrow as pa

    file = file or parquet_file(path)
    meta, groups, first, at = file.metadata, [], None, 0
    for g in range(meta.num_row_groups):
        n = meta.row_group(g).num_rows
        if at + n > start and at < start + rows:
            groups.append(g)
            first = at if first is None else first
        at += n
    if not groups:
        raise DataError(f"{path}: rows {start + 1} to {start + rows} are past its end ({at} rows); was the file "
                        "replaced during the run?")
    try:
        table = file.read_row_groups(groups).slice(start - first, rows)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: not a readable Parquet file ({storage.reason(exc)}).") from None
    return with_lines(table.to_pandas(), start, is_copy(file.schema_arrow))


def scan(path, opts: DataOptions, labels: list[str] | None, *, required: tuple[str, ...] = (),
         rows_path=None) -> Scanned:
    """What the driver knows of an eval set without reading its rows (see the module's docstring): `path` a Parquet
    file, or the user's JSONL/CSV file whose `to_parquet` copy is `rows_path`. `labels` None: the gold labels are
    not mapped (`analyze` learns them later)."""
    source = as_source(path)
    rows_path = as_source(rows_path) if rows_path is not None else None
    file = parquet_file(rows_path or source)
    n_rows = file.metadata.num_rows
    if n_rows == 0:
        raise DataError(f"{source}: no examples (an empty Parquet file); add at least one row.")
    sha256 = storage.digest(source)["sha256"]
    head = block(source, 0, min(n_rows, HEAD_ROWS), opts, labels, sha256=sha256, file=file, required=required)[0]
    names = set(file.schema_arrow.names)
    sources = {m: m if m in names else m.removeprefix("meta_") for m in head.metadata_columns}  # meta_x: a clash
    return Scanned(frame=head.frame, path=source, format=format_of(source), sha256=sha256,
                   columns=head.columns, metadata_columns=head.metadata_columns, max_chars=head.max_chars,
                   notes=head.notes, n_rows=n_rows, sources=sources, rows_path=rows_path)


def block(path, start: int, rows: int, opts: DataOptions, labels: list[str] | None, *, sha256: str = "",
          file=None, required: tuple[str, ...] = (), rows_path=None) -> tuple[EvalSet, np.ndarray | None]:
    """(eval set of rows start..start+rows, gold labels as the model's names, None without `labels`), validated as
    in-process; read from `rows_path` (or `file`, an open ParquetFile) when the rows are in a copy of `path`."""
    source = as_source(path)
    raw = read_rows(as_source(rows_path) if rows_path is not None else source, start, rows, file)
    eval_set = rows_of(raw, start, opts, source=source, required=required, sha256=sha256)
    if labels is None:
        return eval_set, None
    gold = map_labels(eval_set.frame["label"].to_numpy(), labels, source=str(source),
                      lines=eval_set.frame["_line"].to_numpy(), column=opts.label_column)
    return eval_set, gold


def rows_of(raw: pd.DataFrame, start: int, opts: DataOptions, *, source, required: tuple[str, ...] = (),
            sha256: str = "") -> EvalSet:
    """The eval set of a block `raw` (with `_line`) whose first row is row `start` of `source`, validated as
    in-process (`load_eval_set`): ids default to the row number in the whole file."""
    eval_set = load_eval_set(source, text_column=opts.text_column, label_column=opts.label_column,
                             id_column=opts.id_column, max_chars=opts.max_chars, required=required,
                             table=(raw, format_of(source)), sha256=sha256)
    if not opts.id_column:  # the row number in the whole file, as in-process
        eval_set.frame["example_id"] = np.arange(start, start + len(raw)).astype(str).astype(object)
    return eval_set


def id_hashes(ids) -> np.ndarray:
    """64-bit hashes of example ids: which part of `write_id_parts` each goes to."""
    return pd.util.hash_array(np.asarray(ids, dtype=object)).astype(np.uint64)


ID_PARTS = 16  # hash partitions of the ids, each checked by one task (`write_id_parts`, `first_duplicate`)


def write_id_parts(folder, start: int, ids, lines) -> None:
    """A block's ids (first row `start`) with their rows and lines, cut by hash into `ID_PARTS` folders
    `ids-<k>/part-<start>.parquet`: an id used twice lands twice in one folder, whichever blocks hold it, so
    `first_duplicate` finds it there and the driver holds none of them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = np.asarray(ids, dtype=object)
    part = id_hashes(ids) % ID_PARTS
    for k, target in enumerate(id_parts(folder)):
        rows = np.flatnonzero(part == k)
        table = pa.table({"id": pa.array(ids[rows].tolist(), pa.string()), "row": start + rows,
                          "line": np.asarray(lines, dtype=np.int64)[rows]})
        shards.write(target["folder"], f"part-{start:012d}.parquet", lambda p, t=table: pq.write_table(t, p),
                     digest=False)


def id_parts(folder) -> list[dict]:
    """The `ID_PARTS` folders of `write_id_parts` under `folder` (a path or a URL), as `first_duplicate`'s calls."""
    return [{"folder": str(shards.location(folder) / f"ids-{k:02d}")} for k in range(ID_PARTS)]


def first_duplicate(folder) -> tuple[int, int, int, str] | None:
    """(first row, its line, the line of the id's next row, the id) of the id used twice whose first row comes
    first in one `write_id_parts` folder; None when every id there is unique."""
    folder = shards.location(folder)
    parts = shards.listed(folder, ".parquet")
    if not parts:
        return None
    frame = pd.concat([shards.read_table(folder / p).to_pandas() for p in parts], ignore_index=True).sort_values("row")
    twice = frame[frame["id"].duplicated(keep=False)]
    if twice.empty:
        return None
    first = twice.iloc[0]
    second = twice[twice["id"] == first["id"]].iloc[1]
    return int(first["row"]), int(first["line"]), int(second["line"]), str(first["id"])


def duplicate_error(found: list, path, opts: DataOptions) -> None:
    """The in-process one-line error for the id used twice whose first row comes first, from the partitions'
    `first_duplicate` results."""
    found = [f for f in found if f is not None]
    if found:
        _, first, second, value = min(found)
        raise DataError(f"{where(as_source(path), second, opts.id_column)}: duplicate id {value!r} (first on line "
                        f"{first}); ids must be unique.")


def conform(table, schema, sources: dict):
    """A block's metadata columns cast to the file's types: pandas gives a column with nulls in one block float,
    int in the next, and the shards of one predictions table must share one schema."""
    for name, column in sources.items():
        if name in table.column_names and column in schema.names:
            want = schema.field(column).type
            i = table.column_names.index(name)
            if table.schema.field(i).type != want:
                try:
                    table = table.set_column(i, name, table.column(i).cast(want))
                except Exception:  # a type Arrow cannot cast back (kept as pandas made it)
                    continue
    return table
