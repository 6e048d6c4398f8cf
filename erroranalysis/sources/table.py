"""Load and validate eval sets: JSONL, CSV, Parquet, or a Hugging Face dataset saved with `save_to_disk`.

Every problem is one line naming the file, the line (1-based lines of the file, a CSV's header is line 1; Parquet
and datasets folders: 1-based rows) and column, and the fix."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from erroranalysis.core import storage
from erroranalysis.core.errors import DataError, preview, where
from erroranalysis.core.params import Int, Params, Text, param
from erroranalysis.core.schemas import PREDICTIONS
from erroranalysis.core.validation import check_int
from erroranalysis.sources import cells
from erroranalysis.sources.gold import refuse_lists

# Texts are cut at this many characters when they are read (flagged `truncated`): every model reads far fewer,
# and one 50 MB line would otherwise cost minutes and gigabytes in every stage that tokenizes or splits words.
MAX_CHARS = 100_000

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "csv",
           ".parquet": "parquet", ".pq": "parquet"}


@dataclass(frozen=True)
class DataOptions(Params):
    """How to read the eval set: which columns hold what, the encoding, the split, the longest text kept."""

    text_column: str = param("text", Text(), "Column holding the input text.")
    label_column: str = param("label", Text(), "Column holding the gold label.")
    id_column: str | None = param(None, Text(), "Column of unique example ids.", none="the row number")
    encoding: str = param("utf-8", Text(), "Text encoding of CSV/JSONL files.")
    split: str | None = param(None, Text(), "Split of a saved DatasetDict.", none="the only split")
    max_chars: int = param(MAX_CHARS, Int(1), "Texts longer than this are cut when read (and flagged truncated).")


@dataclass(frozen=True, eq=False)
class InMemory:
    """An eval set held in memory (a DataFrame the Python API was given), read as a file is: messages name it
    `name`, and its row i (0-based) is "line i + 1", as a Parquet file's rows are."""

    frame: pd.DataFrame
    name: str = "DataFrame"

    def __str__(self) -> str:
        return self.name

    def sha256(self) -> str:
        import hashlib

        text = self.frame.to_json(orient="records", lines=True, default_handler=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def as_source(data) -> Path | InMemory | storage.ObjectPath:
    """A path (str or Path) as a Path, an object-storage URL (s3://, gs://, az://) as a `storage.ObjectPath`; an
    `InMemory` table as it is."""
    if isinstance(data, (InMemory, storage.ObjectPath)):
        return data
    return storage.ObjectPath.parse(data) if storage.is_url(data) else Path(data)


@dataclass
class EvalSet:
    """An eval set in a standard shape: example_id, text, label (may be absent), then metadata columns."""

    frame: pd.DataFrame
    path: Path | InMemory | storage.ObjectPath
    format: str
    sha256: str
    columns: dict = field(default_factory=dict)  # {"text": ..., "label": ..., "id": ...} as mapped
    metadata_columns: list[str] = field(default_factory=list)
    max_chars: int = MAX_CHARS
    notes: list[str] = field(default_factory=list)  # metadata set aside by `cells.metadata`, said to the user

    def __len__(self) -> int:
        return len(self.frame)

    def line_of(self, row: int) -> int:
        """The line (or row) number a user sees for 0-based row `row`."""
        return int(self.frame["_line"].iat[row])

    def describe(self) -> dict:
        """The manifest's `data` entry (the path absolute, a URL as given: it holds no secret; a table by name)."""
        return {"path": storage.record_name(self.path), "sha256": self.sha256, "rows": len(self), "format": self.format,
                "columns": self.columns, "metadata_columns": self.metadata_columns, "max_chars": self.max_chars,
                "n_cut": int(self.frame["_cut"].sum()), **({"set_aside": self.notes} if self.notes else {})}


def read_eval_set(path: str | Path | InMemory | storage.ObjectPath, opts: DataOptions = DataOptions(), required: tuple[str, ...] = ()) -> EvalSet:
    """`load_eval_set` with the options as one object (what the stages pass)."""
    return load_eval_set(path, text_column=opts.text_column, label_column=opts.label_column,
                         id_column=opts.id_column, encoding=opts.encoding, split=opts.split, required=required,
                         max_chars=opts.max_chars)


def load_eval_set(path: str | Path | InMemory, *, text_column: str = "text", label_column: str | None = "label",
                  id_column: str | None = None, encoding: str = "utf-8", split: str | None = None,
                  required: tuple[str, ...] = (), max_chars: int = MAX_CHARS, keep_end: bool = False,
                  strings_only: bool = True, table: tuple[pd.DataFrame, str] | None = None,
                  sha256: str | None = None) -> EvalSet:
    """Read an eval set and map its columns to example_id, text, label; `required` columns are kept by name.

    Every other column becomes metadata (for slices); a name that clashes with a predictions column gets `meta_`.
    Texts longer than `max_chars` are cut (the end kept with `keep_end`, for prompts) and flagged in `_cut`;
    `strings_only=False` lets the text column hold other values (chat messages). `table`: the file already read
    (frame with `_line`, format name), by a reader of another tool's format, or a block of rows of a file
    (`erroranalysis.sources.blocks`), with the file's `sha256` known.
    """
    check_int("max_chars", max_chars, 1)
    path = as_source(path)
    raw, fmt = table if table is not None else read_table(path, encoding=encoding, split=split)
    wanted = [c for c in (text_column, label_column, *required) if c]
    missing = [c for c in wanted if c not in raw.columns]
    if missing:
        flag = {text_column: "--text-column", label_column: "--label-column"}.get(missing[0], "")
        raise DataError(f"{path}: no column {missing[0]!r}; columns found: {preview(c for c in raw.columns if c != '_line')}"
                        + (f"; name the right one with {flag}." if flag else "."))
    if id_column and id_column not in raw.columns:
        raise DataError(f"{path}: no id column {id_column!r}; columns found: "
                        f"{preview(c for c in raw.columns if c != '_line')}; fix --id-column or drop it.")
    frame = pd.DataFrame({"_line": raw["_line"].to_numpy()})
    frame["example_id"] = _ids(raw, id_column, path)
    frame["text"], cut = _texts(raw, text_column, path, max_chars, keep_end, strings_only)
    if label_column:
        frame["label"] = _labels(raw, label_column, path)
    frame["_cut"] = cut
    for column in required:
        frame[column] = raw[column].to_numpy()
    kept = {"_line", "_cut", text_column, label_column, id_column, *required}
    def rename(column: str) -> str:  # a clash with a run's own columns
        return f"meta_{column}" if column in PREDICTIONS.columns or column in ("pred", "output") else str(column)

    read, notes = cells.metadata(raw, [c for c in raw.columns if c not in kept], source=path, rename=rename)
    for name, values in read.items():
        frame[name] = values
    if sha256 is None:
        sha256 = path.sha256() if isinstance(path, InMemory) else storage.digest(path)["sha256"]
    return EvalSet(frame=frame, path=path, format=fmt, sha256=sha256,
                   columns={"text": text_column, "label": label_column, "id": id_column},
                   metadata_columns=list(read), max_chars=max_chars, notes=notes)


def read_table(path: Path | InMemory | storage.ObjectPath, *, encoding: str = "utf-8", split: str | None = None
               ) -> tuple[pd.DataFrame, str]:
    """Read any supported file (or an in-memory table) into a DataFrame with a `_line` column of user-facing
    line/row numbers."""
    if isinstance(path, InMemory):
        if len(path.frame) == 0:
            raise DataError(f"{path}: no rows; pass at least one example.")
        frame = path.frame.reset_index(drop=True).copy()
        frame.columns = [str(c) for c in frame.columns]
        frame["_line"] = np.arange(1, len(frame) + 1, dtype=np.int64)
        return frame, "in_memory"
    if not path.exists():
        raise DataError(storage.missing(path) if isinstance(path, storage.ObjectPath) else
                        f"{path}: no such file; check the path.")
    if path.is_dir():
        storage.refuse_prefix(path)
        return _read_dataset_dir(path, split), "hf_dataset"
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(f"{path}: unknown file type {path.suffix!r}; use .jsonl, .csv, .parquet or a "
                        "folder saved with datasets' save_to_disk.")
    if (path.size() if isinstance(path, storage.ObjectPath) else path.stat().st_size) == 0:
        raise DataError(f"{path}: the file is empty; it needs a header or at least one example.")
    reader = {"jsonl": _read_jsonl, "csv": _read_csv, "parquet": _read_parquet}[fmt]
    frame = reader(path, encoding)
    if len(frame) == 0:
        raise DataError(f"{path}: no examples (only a header or blank lines); add at least one row.")
    return frame, fmt


def _decode(path: Path, encoding: str) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode(encoding)
    except LookupError:
        raise DataError(f"--encoding {encoding!r} is not a known text encoding; try utf-8, latin-1 or cp1252.") from None
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise DataError(f"{where(path, line)}: byte 0x{raw[exc.start]:02x} is not valid {encoding}; "
                        "pass the file's real encoding with --encoding (for example latin-1).") from None


def json_lines(text: str) -> list[str]:
    """The lines of a JSON Lines text: split on "\n" alone (a "\r" before it dropped). str.splitlines also splits on
    U+2028, U+0085 and other characters that JSON strings may hold raw, which would cut a valid record in two."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def jsonl_records(path: Path, encoding: str = "utf-8") -> list[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSONL file; a line that is not a JSON object is a
    one-line DataError naming it (the readers of other tools' JSONL files use this too)."""
    found = []
    for number, line in enumerate(json_lines(_decode(path, encoding)), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where(path, number)}: not valid JSON ({exc.msg} at character {exc.colno}); "
                            "fix or remove that line.") from None
        if not isinstance(record, dict):
            raise DataError(f"{where(path, number)}: expected a JSON object per line, got "
                            f"{type(record).__name__}; write one {{...}} object per line.")
        found.append((number, record))
    return found


def _read_jsonl(path: Path, encoding: str) -> pd.DataFrame:
    found = jsonl_records(path, encoding)
    records, lines = [r for _, r in found], [n for n, _ in found]
    frame = pd.DataFrame.from_records(records) if records else pd.DataFrame()
    frame["_line"] = np.asarray(lines, dtype=np.int64)
    return frame


def _read_csv(path: Path, encoding: str) -> pd.DataFrame:
    text = _decode(path, encoding)
    sep = "\t" if path.suffix.lower() == ".tsv" else ","
    try:
        frame = pd.read_csv(io.StringIO(text), sep=sep, skip_blank_lines=True)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: no header and no rows; the first line must name the columns.") from None
    except pd.errors.ParserError as exc:
        raise DataError(_csv_problem(path, text, sep) or f"{path}: not valid CSV ({str(exc).strip()}); check "
                        "quoting on that line.") from None
    starts = _record_lines(text, sep)
    frame["_line"] = np.asarray(starts[1:], dtype=np.int64) if len(starts) == len(frame) + 1 else \
        np.arange(2, len(frame) + 2, dtype=np.int64)  # a dialect the csv module reads otherwise: rows counted
    return frame


def _record_lines(text: str, sep: str) -> list[int]:
    """The physical line each CSV record starts on (the header's first): a quoted cell may span lines, so record
    numbers are not line numbers. Blank lines hold no record, as pandas skips them."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep)
    starts, read = [], 0
    try:
        for row in reader:
            if row:
                starts.append(read + 1)
            read = reader.line_num
    except csv.Error:
        return []
    return starts


def _csv_problem(path: Path, text: str, sep: str) -> str | None:
    """The one line for a CSV pandas could not parse, naming the physical line of the first record whose number
    of fields differs from the header's; None when the csv module finds none."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep)
    header, read = None, 0
    try:
        for row in reader:
            if row and header is None:
                header = row
            elif row and len(row) != len(header):
                return (f"{where(path, read + 1)}: {len(row)} fields where the header has {len(header)}; check the "
                        "quoting and separators of that record.")
            read = reader.line_num
    except csv.Error as exc:
        return f"{where(path, reader.line_num)}: not valid CSV ({exc}); check the quoting on that line."
    return None


def _read_parquet(path: Path | storage.ObjectPath, encoding: str) -> pd.DataFrame:
    try:
        frame = storage.read_parquet(path).to_pandas()
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise DataError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]}).") from None
    frame["_line"] = np.arange(1, len(frame) + 1, dtype=np.int64)
    return frame


def _read_dataset_dir(path: Path, split: str | None) -> pd.DataFrame:
    """A datasets `save_to_disk` folder, read with pyarrow alone (no `datasets` import needed)."""
    import pyarrow as pa

    folder, batches = dataset_batches(path, split)
    batches = list(batches)
    if not sum(b.num_rows for b in batches):
        raise empty_dataset(folder)
    frame = pa.Table.from_batches(batches).to_pandas()
    frame["_line"] = np.arange(1, len(frame) + 1, dtype=np.int64)
    return frame


def dataset_batches(path: Path, split: str | None):
    """(the folder read, its Arrow record batches) of a `save_to_disk` folder: a DatasetDict's split `split` (or its
    only one), its `data-*.arrow` files (Arrow IPC streams) in order, memory-mapped and read batch by batch, so a
    caller that writes each batch on (`blocks.to_parquet`) never holds the table. The split's and the folder's
    problems are one-line errors here, an unreadable file's when its batches are read."""
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text())["splits"]
        if split is None:
            if len(splits) != 1:
                raise DataError(f"{path}: a DatasetDict with splits {preview(splits)}; choose one with --split.")
            split = splits[0]
        if split not in splits:
            raise DataError(f"{path}: no split {split!r}; splits found: {preview(splits)}.")
        path = path / split
    state = path / "state.json"
    if not state.is_file():
        raise DataError(f"{path}: is a directory, not an eval-set file; pass a .jsonl, .csv or .parquet file "
                        "or a folder saved with datasets' save_to_disk.")
    parts = [path / f["filename"] for f in json.loads(state.read_text()).get("_data_files", [])]
    if not parts:
        raise DataError(f"{state}: lists no data files; re-save the dataset with save_to_disk.")
    return path, _stream(path, parts)


def _stream(folder: Path, parts: list[Path]):
    import pyarrow as pa

    try:
        for part in parts:
            yield from pa.ipc.open_stream(pa.memory_map(str(part)))
    except (OSError, pa.ArrowInvalid) as exc:
        raise DataError(f"{folder}: unreadable Arrow data ({str(exc).splitlines()[0]}); re-save the dataset.") from None


def empty_dataset(folder: Path) -> DataError:
    return DataError(f"{folder}: the dataset has no rows; add at least one example.")


def _ids(raw: pd.DataFrame, id_column: str | None, path: Path) -> np.ndarray:
    if not id_column:
        return np.arange(len(raw)).astype(str).astype(object)
    values = raw[id_column]
    empty = values.isna().to_numpy()
    if empty.any():
        line = int(raw["_line"].iat[int(np.argmax(empty))])
        raise DataError(f"{where(path, line, id_column)}: empty id; every example needs a unique id.")
    ids = values.astype(str).to_numpy(dtype=object)
    duplicated = pd.Series(ids).duplicated(keep=False).to_numpy()
    if duplicated.any():
        dup_rows = np.flatnonzero(duplicated)
        first = dup_rows[0]
        second = next(r for r in dup_rows[1:] if ids[r] == ids[first])
        raise DataError(f"{where(path, int(raw['_line'].iat[second]), id_column)}: duplicate id {ids[first]!r} "
                        f"(first on line {int(raw['_line'].iat[first])}); ids must be unique.")
    return ids


def _texts(raw: pd.DataFrame, column: str, path: Path, max_chars: int, keep_end: bool, strings_only: bool = True):
    """(texts, cut): strings cut at `max_chars`; a missing text is an empty input (the model still predicts
    something), a number or an object is an error: turned into a string it would be nonsense to the model."""
    values = raw[column]
    present = values.notna().to_numpy()
    is_text = np.fromiter((isinstance(v, str) for v in values.to_numpy(dtype=object)), dtype=bool, count=len(values))
    wrong = present & ~is_text
    if wrong.any() and strings_only:
        row = int(np.argmax(wrong))
        found = type(values.iat[row]).__name__
        raise DataError(f"{where(path, int(raw['_line'].iat[row]), column)}: holds a {found}, not text; the text "
                        "column must hold strings (choose another with --text-column, or convert the values).")
    texts = values.where(present, "").to_numpy(dtype=object)
    lengths = np.fromiter((len(t) if isinstance(t, str) else 0 for t in texts), dtype=np.int64, count=len(texts))
    cut = lengths > max_chars
    for i in np.flatnonzero(cut):
        texts[i] = texts[i][-max_chars:] if keep_end else texts[i][:max_chars]
    return texts, cut


def _labels(raw: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    values = raw[column]
    refuse_lists(values.to_numpy(dtype=object), source=path, lines=raw["_line"].to_numpy(), column=column)
    empty = values.isna().to_numpy() | (values.astype(str).str.strip() == "").to_numpy()
    if empty.any():
        line = int(raw["_line"].iat[int(np.argmax(empty))])
        raise DataError(f"{where(path, line, column)}: empty label; every example needs a gold label "
                        "(drop the row or fill it in).")
    if pd.api.types.is_float_dtype(values):  # CSV readers turn integer labels into floats when any cell is odd
        fraction = np.mod(values.to_numpy(), 1) != 0
        if fraction.any():
            row = int(np.argmax(fraction))
            raise DataError(f"{where(path, int(raw['_line'].iat[row]), column)}: label {values.iat[row].item()!r} is "
                            "neither a class name nor an integer class id; fix that value.")
        values = values.astype(np.int64)
    return values.astype(str).to_numpy(dtype=object)


def map_labels(values: np.ndarray, known: list[str], *, source: str, lines: np.ndarray | None = None,
               column: str = "label") -> np.ndarray:
    """Map gold labels (names, or integer ids into `known`) onto `known` names; unknown labels are an error."""
    known_set = set(known)
    values = np.asarray(values, dtype=object)
    mapped = values.copy()
    unknown = ~np.isin(values, list(known_set))
    if unknown.any():
        digits = np.array([v.isdigit() for v in values[unknown]], dtype=bool)
        if digits.all():  # integer class ids: each must be below the number of classes
            ids = np.array([int(v) for v in values[unknown]], dtype=np.int64)
            if (ids < len(known)).all():
                mapped[unknown] = [known[i] for i in ids]
                return mapped
            first = int(np.flatnonzero(unknown)[int(np.argmax(ids >= len(known)))])
            loc = where(source, int(lines[first]) if lines is not None else None, column)
            raise DataError(f"{loc}: label id {values[first]} is out of range: the model has {len(known)} classes "
                            f"(ids 0-{len(known) - 1}: {preview(known, 8)}); fix the labels or use the matching "
                            "checkpoint.")
    if unknown.any():
        bad = list(dict.fromkeys(values[unknown]))
        first = int(np.argmax(unknown))
        loc = where(source, int(lines[first]) if lines is not None else None, column)
        raise DataError(f"{loc}: label {values[first]!r} is not one the model knows "
                        f"(unknown: {preview(bad, 3)}; known: {preview(known, 8)}); fix the labels or use the "
                        "matching checkpoint.")
    return mapped
