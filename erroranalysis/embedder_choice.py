"""One embedder choice for the data checks and clustering (`--check-embedder`, `--embedder`), and the rule that
turns it into vectors for each use.

Names: `auto` (the default), `static` (a model2vec model distilled from the packaged MiniLM,
`erroranalysis.embed.static`), `minilm` (the packaged sentence model), `hidden` (the checkpoint's own hidden
states), `none` (no text vectors), or a local folder: a sentence-transformers / transformers model (mean-pooled,
as MiniLM) or a saved model2vec model. Clustering also takes a `.npy` file of vectors.

`auto` resolves by what was measured (docs/benchmarks.md, "Static embedder"): the checkpoint's hidden states when
the run has them (the checks only: inference computed them anyway), else the static model for every use where it
costs at most 2 points against MiniLM. A use where it costs more (`STATIC_WEAK`) takes MiniLM while MiniLM is cheap
(at most `MINILM_MAX_ROWS` rows to embed) and above that the signals that need no text vectors (clustering, which
has none, the static model), and the plan's note says so; `minilm` forces MiniLM at any size.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from erroranalysis.core.errors import DataError, ModelError, ParameterError
from erroranalysis.core.params import Rule

NAMES = ("auto", "static", "minilm", "hidden", "none")
#: what the checks use vectors for, and clustering
USES = ("label_issues", "duplicates", "leakage", "shift", "clustering")
#: uses where the best static model costs more than 2 points against MiniLM (measured: docs/benchmarks.md)
STATIC_WEAK = frozenset({"label_issues", "shift", "clustering"})
#: uses with no signal that needs no text vectors: above the MiniLM limit they take the static model
NEEDS_VECTORS = frozenset({"clustering"})
#: MiniLM embeds ~200 to 650 short texts/s on 2 cores: up to this many rows it costs under ~2 minutes
MINILM_MAX_ROWS = 20_000
WHAT_OFF = {"label_issues": "label issues from the model's confidence alone (no neighbour vote)",
            "shift": "shift without the domain classifier (class balance, lengths, vocabulary, words stay)"}


@dataclass(frozen=True)
class EmbedderName(Rule):
    """One of `names`, or a local model folder (a path: it has a separator or starts with '.' or '~'); with
    `npy`, also a `.npy` file of vectors. Whether the folder holds a model is checked when it is loaded."""

    names: tuple = NAMES
    npy: bool = False

    def ok(self, value) -> bool:
        if not isinstance(value, (str, Path)) or not str(value).strip():
            return False
        text = str(value)
        return text in self.names or is_path(text) or (self.npy and text.endswith(".npy"))

    def coerce(self, value):
        return str(value) if isinstance(value, Path) else value

    def describe(self) -> str:
        return ", ".join(self.names) + " or a local model folder" + (" or FILE.npy" if self.npy else "")

    def metavar(self) -> str:
        return "|".join(self.names) + "|FOLDER" + ("|FILE.npy" if self.npy else "")


def is_path(text: str) -> bool:
    return os.sep in text or "/" in text or text.startswith((".", "~"))


@dataclass(frozen=True)
class Plan:
    """What each use takes: `source` (hidden, static, minilm, none or a folder) for every use not in `off`."""

    source: str
    off: tuple = ()
    note: str | None = None

    def uses(self, use: str) -> bool:
        return self.source != "none" and use not in self.off

    def record(self) -> dict:
        return {"source": self.source, "without_vectors": list(self.off), "note": self.note}


def plan(choice: str, *, has_hidden: bool, n_rows: int, uses=USES, label: str = "--check-embedder") -> Plan:
    """The vectors of each of `uses` for a choice (see the module's docstring); `n_rows` is how many texts would
    be embedded. Raises a ParameterError for an unknown name, a DataError for `hidden` without hidden states."""
    if not EmbedderName().ok(choice):
        raise ParameterError("embedder", choice, EmbedderName().describe())
    if choice == "hidden" and not has_hidden:
        raise DataError(f"{label} hidden: this run has no hidden states (predictions brought with 'analyze' have "
                        f"none); use {label} static, minilm or auto.")
    if choice != "auto":
        return Plan(choice)
    if has_hidden and "clustering" not in uses:
        return Plan("hidden")
    weak = [u for u in uses if u in STATIC_WEAK]
    if not weak:
        return Plan("static")
    if n_rows <= MINILM_MAX_ROWS:
        return Plan("minilm", note=f"minilm for {', '.join(weak)}: the static model is weaker there and "
                                   f"{n_rows} rows are cheap to embed (at most {MINILM_MAX_ROWS})")
    off = tuple(u for u in weak if u not in NEEDS_VECTORS)
    kept = [u for u in weak if u in NEEDS_VECTORS]
    what = "; ".join([*(WHAT_OFF.get(u, f"{u} without vectors") for u in off),
                      *(f"{u} with the static model (it needs vectors)" for u in kept)])
    return Plan("static", off=off, note=f"{n_rows} rows: above {MINILM_MAX_ROWS}, MiniLM would take minutes and the "
                                        f"static model is weaker for {', '.join(weak)}, so {what}; "
                                        f"{label} minilm forces MiniLM")


def text_embedder(source: str, *, cache: bool = True, cache_dir=None, batch_size: int = 32, device: str = "auto",
                  log=None):
    """The embedder of texts a source names: static, minilm or a local model folder."""
    from erroranalysis.embed import models as embedding
    from erroranalysis.embed import static as static_embedding

    if source == "static":
        embedding.minilm_path()
        static_embedding.check_model2vec()
        return static_embedding.StaticEmbedder(log=log)
    if source == "minilm":
        embedding.minilm_path()
        return embedding.MiniLMEmbedder(cache=cache, cache_dir=cache_dir, batch_size=batch_size, device=device)
    return folder_embedder(Path(source).expanduser(), cache=cache, cache_dir=cache_dir, batch_size=batch_size,
                           device=device)


def folder_embedder(folder: Path, **options):
    """A model2vec folder, or a sentence-transformers / transformers folder whose pooling is the mean (what
    MiniLMEmbedder computes); anything else is refused, naming what was found."""
    from erroranalysis.embed import models as embedding
    from erroranalysis.embed import static as static_embedding

    if not folder.is_dir():
        raise ModelError(f"{folder}: no such model folder; pass static, minilm, hidden, none or a local "
                         "sentence-transformers or model2vec folder.")
    if static_embedding.is_model2vec_folder(folder):
        static_embedding.check_model2vec()
        return static_embedding.StaticEmbedder(model_path=folder)
    if not (folder / "config.json").is_file():
        raise ModelError(f"{folder}: no config.json; expected a sentence-transformers, transformers or model2vec "
                         "model folder.")
    pooling = pooling_mode(folder)
    if pooling not in (None, "mean"):
        raise ModelError(f"{folder}: its sentence-transformers pooling is {pooling!r}; only mean pooling is "
                         "supported (as all-MiniLM-L6-v2's); embed the texts yourself and pass FILE.npy.")
    return embedding.MiniLMEmbedder(model_path=folder, **options)


def pooling_mode(folder: Path) -> str | None:
    """The pooling a sentence-transformers folder declares (1_Pooling/config.json), None without one."""
    config = folder / "1_Pooling" / "config.json"
    if not config.is_file():
        return None
    try:
        found = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ModelError(f"{config}: unreadable JSON; fix or remove the folder's pooling config.") from None
    modes = [k.removeprefix("pooling_mode_").removesuffix("_tokens") for k, v in found.items()
             if k.startswith("pooling_mode_") and v is True]
    return modes[0] if len(modes) == 1 else "+".join(modes) or "none"
