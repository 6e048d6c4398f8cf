"""The gold of each sequence task, read from an eval set's columns into the arrays its metrics take.

- single-label: class names (`erroranalysis.sources.table.map_labels`); a list in the label column is refused here, since
  it is multi-label gold for a single-label head, never guessed;
- multi-label: a multi-hot matrix [n, k] in the model's label order, from a list of names or ids per example, a
  delimited string (`--label-sep`), or one 0/1 column per label (`--label-per-column`);
- regression: float targets.

Every problem is one line naming the file, the line, the column and the value.
"""

from __future__ import annotations

import json

import numpy as np

from erroranalysis.core.errors import DataError, preview, where

NONE = "(none)"  # how an example with no gold (or no predicted) label reads in the label/pred columns
JOIN = " | "  # the label/pred columns of a multi-label run: the set's names in the model's label order


def is_listlike(value) -> bool:
    return isinstance(value, (list, tuple, np.ndarray))


def _loc(source, lines, row, column):
    return where(source, int(lines[row]) if lines is not None else None, column)


class ListLabels(DataError):
    """A label column holding lists (multi-label gold) where one label per example is read."""


def refuse_lists(values, *, source, lines=None, column="label") -> None:
    """One label per example expected: a list there is multi-label gold, refused naming the row and the fix."""
    for row, value in enumerate(values):
        if is_listlike(value):
            raise ListLabels(f"{_loc(source, lines, row, column)}: the gold is a list ({list(value)[:4]!r}), "
                             "multi-label gold, where one label per example is read; pass --task multilabel for a "
                             "multi-label model.")


def multilabel_gold(values, labels: list[str], *, sep: str | None, source, lines=None,
                    column: str = "label") -> np.ndarray:
    """Multi-hot [n, k] (uint8) from one value per example: a list of label names or integer ids, a JSON list in a
    string (CSV), or with `sep` a delimited string ("" or (none) is no label)."""
    index = {name: i for i, name in enumerate(labels)}
    out = np.zeros((len(values), len(labels)), dtype=np.uint8)
    for row, value in enumerate(values):
        for item in _items(value, sep, _loc(source, lines, row, column)):
            out[row, _position(item, index, labels, _loc(source, lines, row, column))] = 1
    return out


def multilabel_items(value, sep, loc) -> list:
    """The labels (names or ids) one gold or predicted value lists."""
    return _items(value, sep, loc)


def _items(value, sep, loc) -> list:
    if is_listlike(value):
        return list(value)
    if value is None or (isinstance(value, float) and np.isnan(value)):
        if sep is not None:  # an empty cell of a delimited column (CSV reads it as missing): no label
            return []
        raise DataError(f"{loc}: empty gold; give the example's labels (an empty list [] for none).")
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError:
                raise DataError(f"{loc}: {value!r} starts like a JSON list but is not one; write [\"a\", \"b\"] "
                                "or pass --label-sep.") from None
            if isinstance(parsed, list):
                return parsed
        if sep is None:
            raise DataError(f"{loc}: the gold is the string {value!r}, not a list of labels; pass --label-sep "
                            "(e.g. ',') if labels are joined in one string, or write a list.")
        return [p.strip() for p in text.split(sep) if p.strip() and p.strip() != NONE]
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return [int(value)]
    raise DataError(f"{loc}: the gold is a {type(value).__name__} ({value!r}); multi-label gold is a list of "
                    "label names or ids, a delimited string (--label-sep), or 0/1 columns (--label-per-column).")


def _position(item, index: dict, labels: list[str], loc: str) -> int:
    if isinstance(item, str) and item in index:
        return index[item]
    if isinstance(item, (int, np.integer)) and not isinstance(item, bool) or (isinstance(item, str) and item.isdigit()):
        i = int(item)
        if 0 <= i < len(labels):
            return i
        raise DataError(f"{loc}: label id {i} is out of range: the model has {len(labels)} labels (ids "
                        f"0-{len(labels) - 1}: {preview(labels, 8)}); fix the gold or use the matching checkpoint.")
    raise DataError(f"{loc}: label {item!r} is not one the model knows (known: {preview(labels, 8)}); fix the "
                    "gold or use the matching checkpoint.")


def multilabel_columns(frame, labels: list[str], *, source, lines=None) -> np.ndarray:
    """Multi-hot [n, k] from one 0/1 (or true/false) column per label, named as the model's labels."""
    missing = [name for name in labels if name not in frame.columns]
    if missing:
        raise DataError(f"{source}: --label-per-column needs a 0/1 column per model label; no column "
                        f"{missing[0]!r} (labels: {preview(labels, 8)}; columns: "
                        f"{preview(c for c in frame.columns if c != '_line')}).")
    out = np.zeros((len(frame), len(labels)), dtype=np.uint8)
    for j, name in enumerate(labels):
        column = frame[name].to_numpy(dtype=object)
        for row, value in enumerate(column):
            if value in (0, 1, True, False) and not isinstance(value, float) or value in (0.0, 1.0):
                out[row, j] = int(bool(value))
            elif isinstance(value, str) and value.strip().lower() in ("0", "1", "true", "false"):
                out[row, j] = int(value.strip().lower() in ("1", "true"))
            else:
                raise DataError(f"{_loc(source, lines, row, name)}: {value!r} is not 0 or 1; a label column holds "
                                "1 where the example has the label, 0 where not.")
    return out


def regression_gold(values, *, source, lines=None, column: str = "label") -> np.ndarray:
    """Float targets; a value that is not a finite number is refused."""
    out = np.empty(len(values), dtype=np.float64)
    for row, value in enumerate(values):
        try:
            number = float(value) if not isinstance(value, bool) and not is_listlike(value) else None
        except (TypeError, ValueError):
            number = None
        if number is None or not np.isfinite(number):
            raise DataError(f"{_loc(source, lines, row, column)}: {value!r} is not a number; a regression head "
                            "needs a finite numeric gold value per example.")
        out[row] = number
    return out


def read_thresholds(threshold, labels: list[str]) -> np.ndarray:
    """Per-label thresholds [k]: one number for every label, or a JSON file {label: threshold} naming each."""
    from pathlib import Path

    if not isinstance(threshold, str):
        return np.full(len(labels), float(threshold))
    path = Path(threshold)
    if not path.is_file():
        raise DataError(f"--threshold {threshold}: neither a number in (0, 1) nor a JSON file; give 0.5 or a file "
                        "{\"label\": 0.4, ...}.")
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not valid JSON ({exc}); write {{\"label\": threshold, ...}}.") from None
    if not isinstance(table, dict):
        raise DataError(f"{path}: holds a {type(table).__name__}; write an object {{\"label\": threshold, ...}}.")
    unknown = [k for k in table if k not in labels]
    if unknown:
        raise DataError(f"{path}: label {unknown[0]!r} is not one the model knows (known: {preview(labels, 8)}).")
    missing = [name for name in labels if name not in table]
    if missing:
        raise DataError(f"{path}: no threshold for label {missing[0]!r}; name every label ({preview(labels, 8)}).")
    values = np.array([table[name] for name in labels], dtype=object)
    for name, value in zip(labels, values):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise DataError(f"{path}: threshold {value!r} of label {name!r} is not a number in (0, 1).")
    return values.astype(np.float64)


def label_set(row: np.ndarray, names: np.ndarray) -> str:
    """The label/pred column's text for one multi-hot row: the names joined, or (none)."""
    on = np.flatnonzero(row)
    return JOIN.join(names[on]) if len(on) else NONE
