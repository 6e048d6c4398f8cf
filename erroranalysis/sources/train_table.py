"""A training file (`--train`): read as an eval set is, in any of its formats, with one line naming every column
it lacks."""

from __future__ import annotations

from pathlib import Path

from erroranalysis.core.errors import DataError, preview
from erroranalysis.sources.table import as_source, load_eval_set, read_table


def read_train_set(path: str | Path, *, text_column: str = "text", label_column: str = "label",
                    id_column: str | None = None, encoding: str = "utf-8", split: str | None = None, read=None):
    """A training file in any eval-set format. A file without the expected columns is a one-line DataError
    naming the file and every missing column. `read(path, (frame, format))`: the rows read as another task reads
    its gold (the checks' `train_gold.TrainGold.read`), instead of one class label per row (`read_train_rows`). A URL
    (s3://, gs://, az://) is read from object storage."""
    path = as_source(path)
    if read is not None:
        return read_train_rows(path, read_table(path, encoding=encoding, split=split), read, text_column=text_column,
                               label_column=label_column, id_column=id_column)
    try:
        return load_eval_set(path, text_column=text_column, label_column=label_column, id_column=id_column,
                             encoding=encoding, split=split)
    except DataError as exc:
        if "no column" not in str(exc) and "no id column" not in str(exc):
            raise
    raw, _ = read_table(path, encoding=encoding, split=split)
    raise train_columns_error(path, list(raw.columns), text_column, label_column, id_column)


def read_train_rows(path: Path, table: tuple, read, *, text_column: str, label_column: str, id_column: str | None):
    """`read(path, table)` of a training file's rows already read (`table`: frame with `_line` and format; no rows:
    only its columns checked), a missing column the one-line error of `read_train_set`."""
    try:
        return read(path, table)
    except DataError as exc:
        if "no column" not in str(exc) and "no id column" not in str(exc):
            raise
    raise train_columns_error(path, list(table[0].columns), text_column, label_column, id_column)


def train_columns_error(path, columns, text_column: str, label_column: str, id_column: str | None) -> DataError:
    """The one-line error of a training file without the columns asked for (`columns`: those it has)."""
    found = [str(c) for c in columns if c != "_line"]
    missing = [c for c in (text_column, label_column, id_column) if c and c not in columns]
    return DataError(f"{path}: the train file lacks the eval set's column(s) {', '.join(repr(c) for c in missing)} "
                     f"(columns found: {preview(found, 8)}); rename them in the train file or pass "
                     "--train-text-column / --train-label-column.")

