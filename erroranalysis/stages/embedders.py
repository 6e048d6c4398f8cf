"""Which embedder a stage uses for a run: a CLI spec (`auto`, `static`, `minilm`, `hidden`, a local model folder,
`FILE.npy`; `erroranalysis.embed.choice`) or the one the run's clustering used, checked before anything is
computed."""

from __future__ import annotations

from pathlib import Path

from erroranalysis import rundir
from erroranalysis.core.errors import ParameterError, RunError
from erroranalysis.core.validation import check_param
from erroranalysis.embed import choice as embedder_choice
from erroranalysis.embed import models as embedding
from erroranalysis.embed import vector_files
from erroranalysis.rundir import readers

SPEC = "'auto', 'static', 'minilm', 'hidden', a local model folder or a path to a .npy file"


def resolve_embedder(spec, run: rundir.Run, predictions, *, cache: bool = True, cache_dir: str | Path | None = None,
                     batch_size: int = 32, device: str = "auto", n_rows: int | None = None) -> embedding.Embedder:
    """`auto` | `static` | `minilm` | `hidden` | a model folder | a .npy file | an object with `embed(frame)` and
    `key`. `auto` for clustering is the rule `embedder_choice.plan` over `n_rows` texts (default: all rows)."""
    if hasattr(spec, "embed"):
        return spec
    check_param("embedder", spec, isinstance(spec, (str, Path)) and str(spec) != "", SPEC)
    text = str(spec)
    if text == "auto":
        text = cluster_plan(len(predictions) if n_rows is None else n_rows).source
    if text in ("static", "minilm"):
        return embedder_choice.text_embedder(text, cache=cache, cache_dir=cache_dir, batch_size=batch_size,
                                             device=device)
    if text == "hidden":
        return hidden_states_embedder(run)
    if text.endswith(".npy") or Path(text).suffix == ".npy":
        return file_embedder(text, predictions["example_id"].astype(str).tolist())
    if embedder_choice.is_path(text):
        if Path(text).expanduser().is_file():
            return file_embedder(text, predictions["example_id"].astype(str).tolist())
        return embedder_choice.text_embedder(text, cache=cache, cache_dir=cache_dir, batch_size=batch_size,
                                             device=device)
    if Path(text).suffix:
        return file_embedder(text, predictions["example_id"].astype(str).tolist())
    raise ParameterError("embedder", text, SPEC)


def cluster_plan(n_rows: int) -> embedder_choice.Plan:
    """The clustering's part of the one rule: hidden states are not its default (measured for the checks only)."""
    return embedder_choice.plan("auto", has_hidden=False, n_rows=n_rows, uses=("clustering",), label="--embedder")


def file_embedder(path, example_ids) -> vector_files.PrecomputedEmbedder:
    """Vectors from a .npy file (and its .json sidecar), read only where readers may read (readers.confined): the
    path comes from a run's embeddings.json, which must not lead the app outside its folders."""
    readers.check_allowed(path)
    readers.check_allowed(Path(str(path)).with_suffix(".json"))
    return vector_files.PrecomputedEmbedder(path, example_ids)


def hidden_states_embedder(run: rundir.Run) -> vector_files.HiddenStatesEmbedder:
    states = readers.read_hidden(run)
    if states is None:
        raise no_hidden(run)
    return vector_files.HiddenStatesEmbedder(states, rundir.HIDDEN)


def no_hidden(run: rundir.Run) -> RunError:
    return RunError(f"{run.path}: no {rundir.HIDDEN} (runs made by 'analyze' have none); use --embedder minilm or "
                    "--embedder FILE.npy.")


def run_embedder(run: rundir.Run, predictions, spec=None):
    """(embedder, note): `spec` when given (minilm, hidden, FILE.npy or an object), else the embedder the run's
    clustering used (re-created from embeddings.json), else minilm. The note says what was chosen and why."""
    stored = readers.read_embeddings(run, optional=True)
    recorded = stored[1].get("embedder") if stored else {}
    if spec is not None:
        emb = resolve_embedder(spec, run, predictions)
        key = getattr(emb, "key", None)
        if recorded and recorded.get("key") != key:
            return emb, (f"matching with {embedding.describe(emb)['name']} as asked; the run's clustering used "
                         f"{recorded.get('name')!r}, so its stored vectors are not used")
        return emb, f"matching with {embedding.describe(emb)['name']}"
    if not recorded:
        default = cluster_plan(len(predictions)).source
        return resolve_embedder(default, run, predictions), \
            f"the run is not clustered; matching with {default} (the default embedder)"
    name = recorded.get("name")
    if name == "minilm":
        embedding.minilm_path()
        emb = embedding.MiniLMEmbedder(max_length=int(recorded.get("max_length") or 256))
    elif name == "static":
        emb = _recorded_static(recorded)
    elif name == "hidden":
        emb = hidden_states_embedder(run)
    elif name == "file":
        emb = file_embedder(recorded.get("source", ""), predictions["example_id"].tolist())
    else:
        raise RunError(f"{run.file(rundir.EMBEDDINGS_META)}: the run was clustered with a custom embedder "
                       f"{recorded.get('key', name)!r} that cannot be re-created here; pass --embedder minilm, hidden "
                       "or FILE.npy.")
    note = f"matching with the run's own embedder ({name})"
    if recorded.get("key") != getattr(emb, "key", None):
        note += (f"; its key changed since clustering ({recorded.get('key')!r} -> {emb.key!r}), so the failures are "
                 "embedded again")
    return emb, note


def _recorded_static(recorded: dict):
    """The static model a clustering used: the packaged one (rebuilt from its settings) or a model2vec folder."""
    from erroranalysis.embed import static as static_embedding

    if recorded.get("method") == "model2vec.distill":
        static_embedding.check_model2vec()
        return static_embedding.StaticEmbedder(pca_dims=int(recorded.get("pca_dims") or static_embedding.PCA_DIMS))
    folder = recorded.get("folder", "")
    readers.check_allowed(folder)
    return embedder_choice.folder_embedder(Path(folder))
