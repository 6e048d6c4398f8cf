"""The cell types of an eval set's columns: one rule, declared once, that every reader and use applies.

A column is read as one kind, from its present cells (missing cells go with any kind):

- scalar: strings, numbers, booleans, dates;
- list: lists (or arrays) of scalars, such as tags or sources: a multi-valued feature;
- struct: mappings with string keys (nested metadata);
- scores: the model's output per class, in a column given as such (`probs`, `scores`, `logits`): a list of
  numbers in label order, a {label: number} mapping, or the list of {"label", "score"} dicts that
  `transformers.pipeline(..., top_k=None)` returns (sorted by score: reordered by label here).

What each use accepts (`ACCEPTS`): metadata takes scalar, list (one group and one slice per value) and struct
(flattened one level into `column.key` columns; a struct inside a struct is set aside, saying so); the label and
prediction columns take scalars; a scores column takes scores. Any other cell (a list of lists or of dicts, bytes,
an object) is a one-line DataError naming the column and line, raised while reading, before anything is written.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from erroranalysis.core.errors import DataError, preview, where

SCALAR, LIST, STRUCT, SCORES = "scalar", "list", "struct", "scores"
MISSING, OTHER = "missing", "other"
ACCEPTS = {"metadata": (SCALAR, LIST, STRUCT), "label": (SCALAR,), "scores": (SCORES,)}
SCORES_COLUMNS = ("probs", "scores", "logits")  # what `analyze` takes as the model's output, in this order
SCALARS = (str, bool, int, float, np.generic, dt.date, dt.time, dt.timedelta, decimal.Decimal)
SUM_TOLERANCE = 1e-3  # single-label probabilities sum to 1 within this (float32 softmax rounding)


def cell_kind(value) -> str:
    """MISSING, SCALAR, LIST (of scalars; missing items allowed), STRUCT or OTHER for one cell."""
    if value is None or value is pd.NA or value is pd.NaT:
        return MISSING
    if isinstance(value, (list, tuple, np.ndarray)):  # first: the common non-scalar cell, checked fast
        if isinstance(value, np.ndarray) and value.ndim != 1:
            return OTHER
        return LIST if all(v is None or isinstance(v, SCALARS) for v in value) else OTHER
    if isinstance(value, SCALARS):
        return MISSING if isinstance(value, (float, np.floating)) and math.isnan(value) else SCALAR
    if isinstance(value, Mapping):
        return STRUCT if all(isinstance(k, str) for k in value) else OTHER
    return OTHER


def column_kind(values, *, source, lines, column: str) -> str:
    """SCALAR, LIST or STRUCT: the kind every present cell of `values` has (SCALAR when none is present). A cell of
    another kind, or two kinds in one column, is a one-line DataError naming the column and line."""
    if _typed(values):  # numbers, booleans, dates, strings as pandas types them
        return SCALAR
    found, first = SCALAR, None
    for row, value in enumerate(objects(values)):
        kind = SCALAR if type(value) is str else cell_kind(value)
        if kind == MISSING:
            continue
        if kind == OTHER:
            raise DataError(f"{where(source, int(lines[row]), column)}: {describe(value)} is not a cell erroranalysis "
                            "reads (a value, a list of values or a mapping); drop the column or flatten that value.")
        if first is None:
            found, first = kind, row
        elif kind != found:
            raise DataError(f"{where(source, int(lines[row]), column)}: {describe(value)} where line "
                            f"{int(lines[first])} holds {_article(found)}; write every cell of a column the same way "
                            "(one value in a list: [\"x\"]).")
    return found


def _typed(values) -> bool:
    """Whether a column has a typed (non-object) dtype: its cells are scalars without looking at them."""
    return hasattr(values, "dtype") and not pd.api.types.is_object_dtype(values.dtype)


def require(values, use: str, *, source, lines, column: str) -> str:
    """The column's kind when `use` (a key of ACCEPTS) accepts it, else a one-line DataError naming the column."""
    kind = column_kind(values, source=source, lines=lines, column=column)
    if kind not in ACCEPTS[use]:
        cells = objects(values)
        row = next(i for i, v in enumerate(cells) if cell_kind(v) == kind)
        raise DataError(f"{where(source, int(lines[row]), column)}: {describe(cells[row])}; the {use} column takes "
                        "one value per row.")
    return kind


def objects(values) -> np.ndarray:
    """A column as a 1-d object array (lists stay cells: np.asarray would make equal-length lists a matrix)."""
    if isinstance(values, pd.Series):
        return values.to_numpy(dtype=object)
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def describe(value) -> str:
    """A cell's type and a short preview, for messages: "a list ['a', 1]", "a dict {'k': ...}"."""
    shown = repr(value.tolist() if isinstance(value, np.ndarray) else value)
    name = "list" if isinstance(value, (list, tuple, np.ndarray)) else type(value).__name__
    return f"{_article(name)} {shown[:60] + '...' if len(shown) > 60 else shown}"


def _article(kind: str) -> str:
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def metadata(raw: pd.DataFrame, columns: Sequence[str], *, source, rename) -> tuple[dict[str, list], list[str]]:
    """The metadata columns as the rule reads them: ({name: values}, notes). A struct column becomes one column
    per key, `column.key`; a list column's cells become lists of strings (one category per value, one Parquet type);
    `rename(name)` gives the name a column is kept under (a clash with a run's own columns)."""
    lines = raw["_line"].to_numpy()
    out: dict[str, list] = {}
    notes: list[str] = []
    for column in columns:
        values = raw[column]
        kind = column_kind(values, source=source, lines=lines, column=column)
        if kind != STRUCT:
            out[rename(column)] = list_cells(values) if kind == LIST else values.to_numpy()
            continue
        cells = values.to_numpy(dtype=object)
        keys = dict.fromkeys(k for v in cells if isinstance(v, Mapping) for k in v)
        for key in keys:
            name = rename(f"{column}.{key}")
            sub = pd.Series([v.get(key) if isinstance(v, Mapping) else None for v in cells], dtype=object)
            sub_kind = column_kind(sub, source=source, lines=lines, column=f"{column}.{key}")
            if sub_kind == STRUCT or name in raw.columns or name in out:
                why = "a struct inside a struct" if sub_kind == STRUCT else "a column of that name exists"
                notes.append(f"metadata column {column!r}: key {key!r} set aside ({why}).")
                continue
            out[name] = list_cells(sub) if sub_kind == LIST else pd.Series(sub.tolist()).to_numpy()
    return out, notes


def list_cells(values) -> np.ndarray:
    """A list column's cells as lists of strings (missing items dropped), missing cells as None."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = None if cell_kind(value) == MISSING else [
            v if type(v) is str else str(v.item() if isinstance(v, np.generic) else v)
            for v in value if v is not None and v == v]  # v != v: NaN
    return out


def is_list_column(values) -> bool:
    """Whether a column (of a run's predictions table) holds lists: a multi-valued feature."""
    if _typed(values):
        return False
    present = (v for v in objects(values) if cell_kind(v) != MISSING)
    return cell_kind(next(present, None)) == LIST


def groupable(values) -> bool:
    """Whether a column's values form groups: scalars, or lists (one group per value)."""
    first = next((v for v in objects(values) if cell_kind(v) != MISSING), None) if not _typed(values) else None
    return cell_kind(first) in (SCALAR, LIST, MISSING)


def explode(values) -> tuple[np.ndarray, pd.Series]:
    """(row of each value, the values) of a list column: a row with k distinct values appears k times, a row with
    none once with a missing value."""
    flat = pd.Series(objects(values), dtype=object).explode()  # an empty list or a missing cell: one NaN
    pairs = pd.DataFrame({"row": flat.index.to_numpy(dtype=np.int64), "item": flat.to_numpy()}).drop_duplicates()
    return pairs["row"].to_numpy(), pairs["item"].reset_index(drop=True)


def scores_column(columns: Sequence[str], frame: pd.DataFrame, given: str | None, source) -> str | None:
    """The column holding the model's output: `given` (--probs-column), else the one of SCORES_COLUMNS whose cells
    are lists or mappings (a column of single numbers named `scores` stays metadata); two of them: an error."""
    if given is not None:
        if given not in columns:
            raise DataError(f"{source}: no column {given!r}; columns found: {preview(columns)}; fix --probs-column.")
        return given
    found = [c for c in SCORES_COLUMNS if c in columns and _holds_arrays(frame[c])]
    if len(found) > 1:
        raise DataError(f"{source}: columns {preview(found)} both look like the model's output; name the one to "
                        "use with --probs-column.")
    return found[0] if found else None


def _holds_arrays(values: pd.Series) -> bool:
    first = next((v for v in values.to_numpy(dtype=object) if cell_kind(v) != MISSING), None)
    return isinstance(first, (Mapping, list, tuple, np.ndarray))


def is_logits(column: str) -> bool:
    """A column named `logits` (or ending in it) holds logits; any other scores column holds probabilities."""
    return column.lower().endswith("logits")


def scores_labels(values, *, source, lines, column: str) -> list[str] | None:
    """The labels a mapping-form scores column names (its first row's keys, sorted), or None for plain lists."""
    for row, value in enumerate(values):
        if cell_kind(value) == MISSING:
            continue
        named = _named(value, source, int(lines[row]), column)
        return sort_labels(named) if named is not None else None
    return None


def sort_labels(names) -> list[str]:
    """Label names sorted, numbers in them in numeric order: "2" before "10", "LABEL_2" before "LABEL_10" (the
    names transformers gives a head without id2label, in id order)."""
    def key(name: str) -> list:
        return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part]

    return sorted((str(n) for n in names), key=key)


def read_scores(values, labels: Sequence[str], *, multilabel: bool, source, lines, column: str) -> np.ndarray:
    """[n, len(labels)] float64 probabilities from a scores column, columns in `labels` order. Logits (the column's
    name says so: `is_logits`) get a softmax, or a sigmoid per label for multi-label; probabilities are checked
    (numbers in [0, 1], each row summing to 1 for single-label) and never transformed beyond renormalizing."""
    labels = [str(label) for label in labels]
    index = {label: j for j, label in enumerate(labels)}
    out = np.empty((len(values), len(labels)), dtype=np.float64)
    for row, value in enumerate(values):
        line = int(lines[row])
        if cell_kind(value) == MISSING:
            raise DataError(f"{where(source, line, column)}: no scores; every row needs the model's output.")
        named = _named(value, source, line, column)
        if named is None:
            out[row] = _numbers(list(value), labels, source, line, column)
            continue
        unknown = [k for k in named if k not in index]
        if unknown or len(named) != len(labels):
            what = f"label {unknown[0]!r} is not one of" if unknown else f"{len(named)} labels where there are"
            raise DataError(f"{where(source, line, column)}: {what} {len(labels)} ({preview(labels, 8)}); give one "
                            "score per label (or name them with --labels).")
        out[row, [index[k] for k in named]] = _numbers(list(named.values()), list(named), source, line, column)
    if is_logits(column):
        return 1 / (1 + np.exp(-out)) if multilabel else _softmax(out)
    bad = (out < 0) | (out > 1)
    if bad.any():
        r, j = np.argwhere(bad)[0]
        raise DataError(f"{where(source, int(lines[r]), column)}: {labels[j]!r} has probability {out[r, j]:.6g}, not "
                        "in [0, 1]; give probabilities, or logits in a column named 'logits'.")
    if not multilabel:
        sums = out.sum(1)
        off = np.abs(sums - 1) > SUM_TOLERANCE
        if off.any():
            r = int(np.argmax(off))
            raise DataError(f"{where(source, int(lines[r]), column)}: the probabilities sum to {sums[r]:.4f}, not 1; "
                            "give softmax probabilities, or logits in a column named 'logits'.")
        out /= sums[:, None]
    return out


def _named(value, source, line: int, column: str) -> dict | None:
    """{label: score} of a mapping or a pipeline's [{"label", "score"}, ...] list; None for a list of numbers."""
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    items = list(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    if items is None:
        raise DataError(f"{where(source, line, column)}: {describe(value)}, not the model's scores; give a list of "
                        "numbers, a {label: score} mapping or pipeline(top_k=None)'s list of {label, score}.")
    if not any(isinstance(i, Mapping) for i in items):
        return None
    if not all(isinstance(i, Mapping) and "label" in i and "score" in i for i in items):
        raise DataError(f"{where(source, line, column)}: {describe(value)} mixes items that are not "
                        "{\"label\", \"score\"} dicts; give pipeline(top_k=None)'s output as it is.")
    return {str(i["label"]): i["score"] for i in items}


def _numbers(items: list, labels: list[str], source, line: int, column: str) -> np.ndarray:
    if len(items) != len(labels):
        raise DataError(f"{where(source, line, column)}: {len(items)} scores where there are {len(labels)} labels "
                        f"({preview(labels, 8)}); give one per label in that order (or name the order with "
                        "--labels).")
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, float, np.integer, np.floating)) or \
                not math.isfinite(item):
            raise DataError(f"{where(source, line, column)}: score {item!r} is not a finite number; give one number "
                            "per label.")
    return np.asarray(items, dtype=np.float64)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(1, keepdims=True))
    return shifted / shifted.sum(1, keepdims=True)
