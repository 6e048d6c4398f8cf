"""An eval set read in blocks of rows by whichever process needs them: what lets Ray workers read a Parquet eval
set themselves (on a shared disk or object storage) while the driver holds none of its rows.

`scan` reads what the driver needs without the rows: the row count and schema from the Parquet footer, a streamed
sha256, and the first rows, validated as in-process (so a wrong column name fails before any worker starts).
`read_block` reads rows start..start+n and applies the same validation, per block, with the same one-line errors
(`erroranalysis.sources.table.load_eval_set`; rows are numbered in the whole file, ids default to the row number in the
whole file), then maps the gold labels onto the model's. What one block cannot check, ids unique across blocks,
`duplicate_ids` checks from 64-bit hashes the workers send back (8 bytes per row on the driver, with --id-column).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from erroranalysis.core import storage
from erroranalysis.core.errors import DataError, where
from erroranalysis.sources.table import FORMATS, DataOptions, EvalSet, as_source, load_eval_set, map_labels

HEAD_ROWS = 1000  # rows the driver reads and validates before the run starts


@dataclass
class Scanned(EvalSet):
    """An eval set known by its footer and first rows: `frame` holds the first rows only, `n_rows` all of them.
    `n_cut` (texts cut at max_chars) is known once the workers have read every block."""

    n_rows: int = 0
    n_cut: int | None = None
    sources: dict = field(default_factory=dict)  # metadata column -> the file's column

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


def parquet_file(path: Path | storage.ObjectPath):
    import pyarrow.parquet as pq

    try:
        if isinstance(path, storage.ObjectPath):
            fs, key = path.filesystem()
            with storage.errors(path):
                return pq.ParquetFile(fs.open_input_file(key))
        return pq.ParquetFile(path)
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
    frame = table.to_pandas()
    frame["_line"] = np.arange(start + 1, start + 1 + len(frame), dtype=np.int64)
    return frame


def scan(path, opts: DataOptions, labels: list[str]) -> Scanned:
    """What the driver knows of a Parquet eval set without reading its rows (see the module's docstring)."""
    source = as_source(path)
    file = parquet_file(source)
    n_rows = file.metadata.num_rows
    if n_rows == 0:
        raise DataError(f"{source}: no examples (an empty Parquet file); add at least one row.")
    sha256 = storage.digest(source)["sha256"]
    head = block(source, 0, min(n_rows, HEAD_ROWS), opts, labels, sha256=sha256, file=file)[0]
    names = set(file.schema_arrow.names)
    sources = {m: m if m in names else m.removeprefix("meta_") for m in head.metadata_columns}  # meta_x: a clash
    return Scanned(frame=head.frame, path=source, format="parquet", sha256=sha256, columns=head.columns,
                   metadata_columns=head.metadata_columns, max_chars=head.max_chars, n_rows=n_rows,
                   sources=sources)


def block(path, start: int, rows: int, opts: DataOptions, labels: list[str], *, sha256: str = "",
          file=None) -> tuple[EvalSet, np.ndarray]:
    """(eval set of rows start..start+rows, gold labels as the model's names), validated as in-process."""
    source = as_source(path)
    raw = read_rows(source, start, rows, file)
    eval_set = load_eval_set(source, text_column=opts.text_column, label_column=opts.label_column,
                             id_column=opts.id_column, max_chars=opts.max_chars, table=(raw, "parquet"),
                             sha256=sha256)
    if not opts.id_column:  # the row number in the whole file, as in-process
        eval_set.frame["example_id"] = np.arange(start, start + len(raw)).astype(str).astype(object)
    gold = map_labels(eval_set.frame["label"].to_numpy(), labels, source=str(source),
                      lines=eval_set.frame["_line"].to_numpy(), column=opts.label_column)
    return eval_set, gold


def id_hashes(ids) -> np.ndarray:
    """64-bit hashes of example ids: what the driver keeps to find an id used twice across blocks."""
    return pd.util.hash_array(np.asarray(ids, dtype=object)).astype(np.uint64)


def duplicate_ids(hashes: np.ndarray, path, opts: DataOptions) -> None:
    """A one-line DataError naming the second row of an id used twice (hash equal, then ids compared)."""
    order = np.argsort(hashes, kind="stable")
    same = np.flatnonzero(hashes[order][1:] == hashes[order][:-1])
    source = as_source(path)
    file = parquet_file(source) if len(same) else None
    for i in same:
        first, second = sorted((int(order[i]), int(order[i + 1])))
        a = read_rows(source, first, 1, file)[opts.id_column].astype(str).iat[0]
        b = read_rows(source, second, 1, file)[opts.id_column].astype(str).iat[0]
        if a == b:
            raise DataError(f"{where(source, second + 1, opts.id_column)}: duplicate id {a!r} (first on line "
                            f"{first + 1}); ids must be unique.")


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
