"""What the `cluster` stage on blocks (`cluster_blocks.py`, `--engine ray`) adds for a generation run's failure
modes and for vectors read from a file by row (`--embedder hidden`, `--embedder FILE.npy`): the driver opens the
array's header only; the rows are read where they are embedded (`embed.vector_files.RowVectors`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from erroranalysis import rundir
from erroranalysis.rundir import readers
from erroranalysis.stages.cluster_parts import ClusterParams, Inputs, fit_modes

MODE_COLUMNS = {"failure_reason", "output", "prompt"}


def by_mode(params: ClusterParams, columns) -> bool:
    """A generation run clustered by failure mode (the in-process stage's rule)."""
    return bool(params.failure_modes) and MODE_COLUMNS <= set(columns)


def row_vectors(run: rundir.Run, spec, n_rows: int):
    """`--embedder hidden` or a vectors file as `RowVectors` (checked as `resolve_embedder` checks them, from the
    headers: the same one-line errors), else None (a model embeds the texts)."""
    from erroranalysis.embed import choice as embedder_choice
    from erroranalysis.embed import vector_files
    from erroranalysis.stages.embedders import no_hidden

    text = str(spec)
    if hasattr(spec, "embed") or text in ("auto", "static", "minilm"):
        return None
    if text == "hidden":
        file = readers.artifact_path(run, rundir.HIDDEN, required=False)
        if file is None:
            raise no_hidden(run)
        return vector_files.hidden_rows(file, n_rows, rundir.HIDDEN)
    is_file = text.endswith(".npy") or Path(text).suffix == ".npy" or (
        Path(text).expanduser().is_file() if embedder_choice.is_path(text) else bool(Path(text).suffix))
    if not is_file:  # a model folder: the texts are embedded
        return None
    readers.check_allowed(text)  # as `embedders.file_embedder`
    readers.check_allowed(Path(text).with_suffix(".json"))
    return vector_files.file_rows(text, n_rows)


def known_context(emb, failures, context):
    """With a vectors file keyed by example id (a sidecar): every failure must have a vector (the in-process error),
    and the context keeps the correct examples that have one (`cluster._read_inputs`)."""
    if getattr(emb, "sidecar", None) is None:
        return context
    emb.rows_for(failures)
    return context[context["example_id"].isin(emb.row_of)].reset_index(drop=True)


def fit_mode_sample(inputs: Inputs, vectors: np.ndarray, failures, params: ClusterParams, n_fail: int):
    """The fit sample (stratified by failure mode) fitted as the in-process stage fits every failure
    (`fit_modes`), with the minimum cluster size of all `n_fail` failures: (its Assigned, local error rate,
    resolved parameters, note, the `ModeRule` that places the rest)."""
    from erroranalysis import cluster

    mcs = params.min_cluster_size or cluster.default_min_cluster_size(n_fail)
    result = fit_modes(inputs, vectors, failures, params.replace(min_cluster_size=mcs), None)
    fitted = cluster.Assigned(result.labels, result.membership, result.tier, result.reassigned,
                              cluster_tier=result.cluster_tier)
    m = len(failures)
    resolved = {**result.params, "n_failures": n_fail, "fit_sample": m, "fit_sample_seed": params.seed,
                "fit_sample_strata": cluster.MODE_STRATA}
    note = f"{result.note}; {cluster.sample_note(m, n_fail, resolved)}"
    rule = cluster.mode_rule(failures["failure_reason"].astype(str).tolist(), result.labels, vectors[:m],
                             params.mode_attach)
    return fitted, result.local_error_rate, resolved, note, rule
