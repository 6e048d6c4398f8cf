"""Vectors read from a file: the checkpoint's own mean-pooled hidden states saved by inference (`hidden_states.npy`:
how the model under test sees each example) and a user's `.npy` file, whose rows are in predictions order or
matched by example id through a sidecar `<file>.json` (`{"example_ids": [...]}`, the format of a run's own
`embeddings.json`).

- `HiddenStatesEmbedder`, `PrecomputedEmbedder`: the array held (memory-mapped) by the process that embeds;
- `RowVectors`: either of them read by row where `embed` is called (the `--engine ray` cluster stage's workers),
  pickled without its data.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Sequence

import numpy as np

from erroranalysis.core import shards
from erroranalysis.core.errors import DataError


class HiddenStatesEmbedder:
    """Rows of the run's hidden states (mean-pooled last hidden state, predictions row order)."""

    key = "hidden_states"

    def __init__(self, states: np.ndarray, source: str = "hidden_states.npy"):
        check_matrix(states, Path(source))
        self.states = states
        self.source = source

    def embed(self, frame, progress=None) -> np.ndarray:
        positions = frame.index.to_numpy()
        return np.asarray(self.states[positions], dtype=np.float32)


# -- precomputed vectors --------------------------------------------------------------------------------------


class PrecomputedEmbedder:
    """Vectors from a `.npy` file: [n_predictions, d] in predictions order, or rows named by a sidecar JSON.

    The sidecar is `<file without .npy>.json` holding `{"example_ids": [...]}` (a run's embeddings.json works);
    with it the file may cover any superset of the examples that are embedded.
    """

    def __init__(self, path: str | Path, example_ids: Sequence[str]):
        path = Path(path).expanduser()
        vectors = open_npy(path)
        check_matrix(vectors, path)
        self.path = path
        self.vectors = vectors
        self.key = f"file:{path.resolve()}"
        sidecar = path.with_suffix(".json")
        if sidecar.is_file():
            self.row_of = sidecar_rows(sidecar, path, vectors.shape[0])
            self.sidecar = sidecar
        else:
            check_row_count(path, vectors.shape[0], len(example_ids))
            self.row_of = None
            self.sidecar = None

    def rows_for(self, frame) -> np.ndarray:
        if self.row_of is None:
            return frame.index.to_numpy()
        return rows_by_id(self.row_of, self.sidecar, frame)

    def embed(self, frame, progress=None) -> np.ndarray:
        return np.asarray(self.vectors[self.rows_for(frame)], dtype=np.float32)


def open_npy(path: Path) -> np.ndarray:
    """A vectors file memory-mapped (nothing read but its header), or the one-line error of a missing, misnamed or
    unreadable one."""
    if not path.is_file():
        raise DataError(f"{path}: no such embeddings file; pass --embedder minilm, hidden or an existing .npy file.")
    if path.suffix != ".npy":
        raise DataError(f"{path}: embeddings must be a .npy file (float [n, d]); save them with numpy.save.")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: unreadable as .npy ({str(exc).splitlines()[0]}); save it with numpy.save.") from None


def sidecar_rows(sidecar: Path, path: Path, n: int) -> dict:
    """{example id: row} of a vectors file's sidecar `{"example_ids": [...]}`, checked: one unique id per row."""
    try:
        ids = json.loads(sidecar.read_text(encoding="utf-8"))["example_ids"]
        ids = [str(i) for i in ids]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{sidecar}: expected JSON with an 'example_ids' list ({exc}); fix or remove it.") from None
    if len(ids) != n:
        raise DataError(f"{sidecar}: {len(ids)} example ids for {n} rows in {path.name}; they must match one to one.")
    if len(set(ids)) != len(ids):
        raise DataError(f"{sidecar}: example ids are not unique; each row needs its own id.")
    return {i: r for r, i in enumerate(ids)}


def check_row_count(path: Path, rows: int, n_predictions: int) -> None:
    if rows != n_predictions:
        raise DataError(f"{path}: {rows} rows but the run has {n_predictions} predictions; save one row per "
                        f"prediction in order, or add {path.with_suffix('.json').name} with 'example_ids'.")


def rows_by_id(row_of: dict, sidecar, frame) -> np.ndarray:
    ids = frame["example_id"].astype(str).tolist()
    missing = [i for i in ids if i not in row_of]
    if missing:
        from erroranalysis.core.errors import preview

        raise DataError(f"{sidecar}: no vectors for example ids {preview(missing)}; "
                        "embed every example that is clustered.")
    return np.array([row_of[i] for i in ids], dtype=np.int64)


class RowVectors:
    """Hidden states or a vectors file read by row where `embed` is called, never as a whole: what a Ray worker of
    the `--engine ray` cluster stage reads (the fit sample's rows on one, each block's failures on the others).
    It pickles without its data: `path` is a .npy file or a folder of `part-*.npy` shards in row order; rows are the
    frame's index (row positions in predictions order, as `HiddenStatesEmbedder` takes them) or, with `sidecar`, its
    example ids (`PrecomputedEmbedder`'s rule). `description` is what `describe` records for the in-process
    embedder it stands for; `source` names the file in the one-line error of a NaN."""

    def __init__(self, path, description: dict, source: str, sidecar: str | None = None):
        self.path, self.description, self.source, self.sidecar = str(shards.shared(path)), dict(description), source, \
            sidecar  # shared: the workers read the shards where they are, not through this disk's pointer
        self.key = description["key"]
        self._opened: list | None = None  # [(first row, shape, file)], per process
        self.row_of: dict | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_opened": None, "row_of": None}

    def describe(self) -> dict:
        return dict(self.description)

    def rows_for(self, frame) -> np.ndarray:
        if self.sidecar is None:
            return frame.index.to_numpy()
        if self.row_of is None:
            sidecar = Path(self.sidecar)
            stamp = sidecar.stat().st_mtime_ns if sidecar.is_file() else 0
            self.row_of = _sidecar_once(self.sidecar, stamp, self.path, self.shape()[0])
        return rows_by_id(self.row_of, self.sidecar, frame)

    def shape(self) -> tuple[int, ...]:
        """(rows, the first file's other dimensions), from the headers."""
        parts = self._parts()
        return (sum(shape[0] for _, shape, _ in parts), *(parts[0][1][1:] if parts else (0,)))

    def _parts(self) -> list:
        """(first row, shape, file) of each shard (or of the one file), from the headers (`core.shards`: local, or
        on object storage)."""
        if self._opened is None:
            first, opened = 0, []
            try:
                for file in shards.parts(self.path, ".npy"):
                    shape = tuple(shards.npy_shape(file))
                    opened.append((first, shape, file))
                    first += shape[0]
            except (OSError, ValueError) as exc:  # the run's readers' one-line error (`rundir.formats.npy`)
                from erroranalysis.core.errors import RunError

                raise RunError(f"{self.path}: unreadable array ({type(exc).__name__}); run the stage that writes it "
                               "again.") from None
            self._opened = opened
        return self._opened

    def embed(self, frame, progress=None) -> np.ndarray:
        rows = np.asarray(self.rows_for(frame), dtype=np.int64)
        out = None
        for first, shape, file in self._parts():
            inside = np.flatnonzero((rows >= first) & (rows < first + shape[0]))
            if out is None:
                out = np.zeros((len(rows), shape[1]), dtype=np.float32)
            if len(inside):  # only the shards that hold wanted rows are read
                wanted = np.sort(rows[inside]) - first
                array = shards.npy_rows(file, int(wanted[0]), int(wanted[-1]) + 1)
                out[inside] = array[wanted - wanted[0]][np.argsort(np.argsort(rows[inside]))]
        out = out if out is not None else np.zeros((len(rows), 0), np.float32)
        if not np.isfinite(out).all():
            raise DataError(f"{self.source}: contains NaN or infinite values; fix the vectors that produced them.")
        return out


@functools.lru_cache(maxsize=2)
def _sidecar_once(sidecar: str, stamp: int, path: str, n: int) -> dict:
    """`sidecar_rows`, read once per process (a Ray worker places many blocks with the same file)."""
    return sidecar_rows(Path(sidecar), Path(path), n)

def hidden_rows(path, n_rows: int, source: str = "hidden_states.npy") -> RowVectors:
    """`HiddenStatesEmbedder` of a run's hidden states (a file or shards) as `RowVectors`, checked from the headers
    as `rundir.readers.read_hidden` and `check_matrix` check the array (a NaN: where its row is read)."""
    from erroranalysis.core.errors import RunError

    rows = RowVectors(path, hidden_meta(source), source)
    shape = rows.shape()
    if len(shape) != 2 or shape[0] != n_rows:
        raise RunError(f"{path}: shape {shape} does not have one row per prediction; run the stage that writes it "
                       "again.")
    for _, _, file in rows._parts():
        check_matrix(shards.npy_rows(file, 0, 0), Path(source))
    return rows


def file_rows(path, n_predictions: int) -> RowVectors:
    """`PrecomputedEmbedder` as `RowVectors`: the file's header and row count checked here (the same one-line
    errors), its sidecar read where rows are (`RowVectors.rows_for`)."""
    path = Path(path).expanduser()
    vectors = open_npy(path)
    check_matrix(vectors[:0], path)
    sidecar = path.with_suffix(".json")
    if not sidecar.is_file():
        check_row_count(path, vectors.shape[0], n_predictions)
    return RowVectors(path, file_meta(path, sidecar if sidecar.is_file() else None), str(path),
                      str(sidecar) if sidecar.is_file() else None)


def hidden_meta(source: str) -> dict:
    return {"name": "hidden", "key": HiddenStatesEmbedder.key, "source": source, "pooling": "mean",
            "normalized": False}


def file_meta(path: Path, sidecar) -> dict:
    return {"name": "file", "key": f"file:{path.resolve()}", "source": str(path),
            "ids_from": str(sidecar) if sidecar else "row order"}


def check_matrix(vectors: np.ndarray, path: Path) -> None:
    if vectors.ndim != 2 or vectors.shape[1] < 2:
        raise DataError(f"{path}: shape {tuple(vectors.shape)} is not [n, d] with d >= 2; save a 2-D float array.")
    if not np.issubdtype(vectors.dtype, np.floating) and not np.issubdtype(vectors.dtype, np.integer):
        raise DataError(f"{path}: dtype {vectors.dtype} is not numeric; save float32 vectors.")
    if vectors.shape[0] and not np.isfinite(np.asarray(vectors[: min(len(vectors), 200_000)], dtype=np.float64)).all():
        raise DataError(f"{path}: contains NaN or infinite values; fix the vectors that produced them.")
