"""What the `cluster` stage's two engines (`cluster.py` in process, `cluster_blocks.py` on blocks) and `name_run`
(`cluster_names.py`) share: the stage's parameters, the embedding, the fit and the 2-D layout of the rows the
driver holds, and the description of clusters with what the slices and checks stages know about them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from erroranalysis import rundir
from erroranalysis.cluster import REDUCERS, ClusteringParams, NamingParams
from erroranalysis.cluster.llm_naming import NamerParams
from erroranalysis.core.errors import DataError
from erroranalysis.core.params import Choice, Flag, Int, Object, param
from erroranalysis.embed.choice import EmbedderName
from erroranalysis.rundir import readers

Progress = Callable[[str, int, int], None]  # (phase, done, total)
SLICE_OVERLAP = 0.5  # a cluster "overlaps" a slice when at least this share of its failures is in the slice
MISLABELED = 0.5  # ...and is "probably mislabeled" when this share of its failures are suspected label issues
EMBEDDERS = ("auto", "static", "minilm", "hidden")  # by name; or a folder or .npy file (embedder_choice)


@dataclass(frozen=True)
class ClusterParams(NamerParams, NamingParams, ClusteringParams):
    """The cluster stage (`erroranalysis cluster --help`): the clustering's and the naming's parameters
    (`cluster.ClusteringParams`, `cluster.NamingParams`) and what only the stage needs: the embedder, the 2-D
    layout, slice groups, the embedding cache."""

    embedder: Any = param("auto", EmbedderName(EMBEDDERS, npy=True) | Object(("embed",), "an object with "
                                                                            "embed(frame) and key"),
                          "auto (the static model, as measured in docs/benchmarks.md), static (model2vec distilled "
                          "from the packaged MiniLM, cached), minilm (the packaged sentence model), hidden (the "
                          "checkpoint's own hidden states), a local sentence-transformers or model2vec folder, or "
                          "FILE.npy (one row per prediction, or rows named by FILE.json {\"example_ids\": [...]}).",
                          short="-e")
    layout: str = param("umap", Choice(*REDUCERS), "2-D map of all examples: umap, pca or none.")
    slice_groups: bool = param(True, Flag(), "When the slices stage ran: a strong error slice whose failures the "
                               "embedding scattered over other clusters becomes a cluster of its own, named by the "
                               "slice.")
    cache: bool = param(True, Flag(), "Read and write the embedding cache.")
    embed_batch_size: int = param(32, Int(1), "Texts per embedding batch.", advanced=True)

    def model(self, clusterer=None, features: Sequence = ()):
        """The FailureClustering these parameters describe (unfitted)."""
        from erroranalysis import cluster

        return cluster.FailureClustering(self, clusterer=clusterer, features=features)


@dataclass
class Inputs:
    """What the stage reads, checked before it starts."""

    run: Any
    predictions: Any
    embedder: Any
    plan: Any  # embedder_choice.Plan of `auto`, else None
    fail_rows: np.ndarray
    context_rows: np.ndarray  # correct examples embedded beside the failures (local error rate, layout)
    correct_rows: np.ndarray


def timed(timings: dict, name: str, function, *args):
    t = time.perf_counter()
    out = function(*args)
    timings[name] = time.perf_counter() - t
    return out


def embed(inputs: Inputs, progress: Progress | None, column: str = "text") -> tuple[np.ndarray, np.ndarray]:
    """Vectors of the failures, then of the context rows, of their `column` (a generation run's failure modes:
    the output alone); and those rows."""
    embed_rows = np.concatenate([inputs.fail_rows, inputs.context_rows])
    if not len(embed_rows):
        return np.zeros((0, 0), dtype=np.float32), embed_rows
    name = getattr(inputs.embedder, "key", "custom")
    if progress:
        progress("embed", 0, len(embed_rows))
    phase = (lambda done, total: progress("embed", done, total)) if progress else None
    frame = inputs.predictions.iloc[embed_rows]
    if column != "text":
        frame = frame.assign(text=frame[column].fillna("").astype(str))
    vectors = np.asarray(inputs.embedder.embed(frame, progress=phase), dtype=np.float32)
    if progress:
        progress("embed", len(embed_rows), len(embed_rows))
    if vectors.ndim != 2 or len(vectors) != len(embed_rows):
        raise DataError(f"embedder {name!r}: returned shape {vectors.shape} for {len(embed_rows)} texts; it must "
                        "return one row per text.")
    if not np.isfinite(vectors).all():
        raise DataError(f"embedder {name!r}: returned NaN or infinite values.")
    return vectors, embed_rows


def fit(model, vectors: np.ndarray, n_fail: int, failures, groups, progress: Progress | None):
    if progress:
        progress("cluster", 0, 1)
    is_fail = np.zeros(len(vectors), dtype=bool)
    is_fail[:n_fail] = True
    if n_fail:
        model.fit(vectors, is_fail, failures, groups=groups)
    else:
        model.fit(np.zeros((0, 2), np.float32), np.zeros(0, bool), failures)
    if progress:
        progress("cluster", 1, 1)
    return model.result_


def fit_modes(inputs: Inputs, vectors: np.ndarray, failures, params: ClusterParams, progress: Progress | None):
    """A generation run's failures by failure mode (`cluster.cluster_by_mode`): their reasons, their outputs'
    vectors, and their prompts' vectors as the weak signal that vetoes a split by topic."""
    from erroranalysis import cluster

    if progress:
        progress("cluster", 0, 1)
    prompts = failures.assign(text=failures["prompt"].fillna("").astype(str))
    prompt_vectors = np.asarray(inputs.embedder.embed(prompts), dtype=np.float32) if hasattr(
        inputs.embedder, "embed_texts") else None  # a file of vectors holds the outputs' only
    result = cluster.cluster_by_mode(failures["failure_reason"].astype(str).tolist(), vectors[:len(failures)],
                                     prompt_vectors, params.project(cluster.ClusteringParams))
    if progress:
        progress("cluster", 1, 1)
    return result


def layout(inputs: Inputs, vectors, embed_rows, params: ClusterParams, progress: Progress | None) -> np.ndarray:
    from erroranalysis import cluster

    if progress:
        progress("layout", 0, 1)
    xy = np.full((len(inputs.predictions), 2), np.nan, dtype=np.float32)
    if len(embed_rows) and params.layout != "none":
        xy[embed_rows] = cluster.layout_2d(vectors, method=params.layout, seed=params.seed,
                                           max_fit=min(params.max_fit, 5_000), n_neighbors=params.n_neighbors)
    if progress:
        progress("layout", 1, 1)
    return xy


def embeddings_meta(emb, vectors, fail_vectors, failures) -> dict:
    from erroranalysis.embed import models as embedding

    dim = int(fail_vectors.shape[1]) if len(failures) else int(vectors.shape[1]) if vectors.ndim == 2 else 0
    return {"embedder": embedding.describe(emb), "dim": dim, "rows": int(len(failures)),
            "example_ids": failures["example_id"].tolist(), "created": rundir.now_iso()}


def slice_groups(run: rundir.Run, failures, filtered: bool = False):
    """Each failure's strong slice for the clustering (-1 none) and {slice_id: description}; (None, {}) when the
    slices stage has not run. `filtered`: read only these failures' slice memberships (`_slices_of`)."""
    found = _slices_of(run, failures["example_id"], filtered)
    if found is None:
        return None, {}
    slices, members = found
    missing = [c for c in ("lift", "p_value", "score") if c not in slices.columns]
    if missing:
        raise DataError(f"{run.file(rundir.SLICES)}: missing column(s) {missing}; re-run 'erroranalysis slices "
                        f"{run.path}', or cluster with --no-slice-groups.")
    from erroranalysis.slices import group_titles, slice_groups

    ids = failures["example_id"].tolist()
    best = slice_groups(slices, members, example_ids=ids)
    groups = np.array([best.get(i, -1) for i in ids], dtype=np.int64)
    return groups, group_titles(slices)


def with_slice(clusters, cluster_group: dict, slice_names: dict):
    """`slice_id` and `slice` (its definition) for clusters taken out as a slice group; null elsewhere."""
    import pandas as pd

    clusters = clusters.copy()
    sid = [cluster_group.get(int(c)) for c in clusters["cluster_id"]]
    clusters["slice_id"] = pd.array(sid, dtype="Int64")
    clusters["slice"] = pd.array([slice_names.get(s) if s is not None else None for s in sid], dtype="string")
    return clusters


def other_stages(run: rundir.Run, failure_ids: np.ndarray, filtered: bool = False) -> tuple:
    """What the slices and checks stages committed about the failures `failure_ids` ((slices, members) or None,
    checks or None), for `with_other_stages`: read here, so that a worker that describes the clusters needs no run.
    `filtered`: read only their rows from those stages' per-example tables (`--engine ray`)."""
    checks = _rows_for(run, rundir.CHECKS, failure_ids, ("example_id", "label_issue")) if filtered else \
        readers.read_checks(run, optional=True)
    return _slices_of(run, failure_ids, filtered), checks


def with_other_stages(known: tuple, clusters, failure_ids: np.ndarray, labels: np.ndarray):
    """Add what the slices and checks stages know about each cluster (`known`: `other_stages`), when those stages
    are done: `slices` (descriptions of the slices holding most of its failures, with that share) and
    `label_issue_share` (share of its failures whose gold label is probably wrong) with `probably_mislabeled`."""
    import pandas as pd

    from erroranalysis.stages.data_checks import label_issue_share

    clusters = clusters.copy()
    members = {int(c): set(failure_ids[labels == c]) for c in clusters["cluster_id"]}
    found, checks = known
    if found is not None:
        slices, in_slice = found
        by_slice = {sid: set(ids) for sid, ids in in_slice.groupby("slice_id")["example_id"]}
        names = dict(zip(slices["slice_id"], slices["description"]))
        clusters["slices"] = [
            [f"{names[sid]} ({share:.0%})" for share, sid in sorted(
                ((len(ids & by_slice.get(sid, set())) / max(len(ids), 1), sid) for sid in names), reverse=True)
             if share >= SLICE_OVERLAP]
            for ids in (members[int(c)] for c in clusters["cluster_id"])]
    if checks is not None:
        shares = [label_issue_share(checks, sorted(members[int(c)])) for c in clusters["cluster_id"]]
        clusters["label_issue_share"] = pd.array(shares, dtype="Float64")
        clusters["probably_mislabeled"] = clusters["label_issue_share"].fillna(0) >= MISLABELED
    return clusters


def _slices_of(run: rundir.Run, example_ids, filtered: bool):
    """(slices, members) as `readers.read_slices` gives them, with only the members among `example_ids` when
    `filtered`; None when the slices stage has not run."""
    if not filtered:
        return readers.read_slices(run, optional=True)
    members = _rows_for(run, rundir.SLICE_MEMBERS, example_ids, ("example_id", "slice_id"))
    if members is None:
        return None
    return readers.parquet(readers.artifact_path(run, rundir.SLICES)), members


def _rows_for(run: rundir.Run, name: str, example_ids, columns):
    """The rows of a per-example table (checks.parquet, slice_members.parquet) of `example_ids` (the driver never
    holds the whole table); None when its stage never committed it."""
    return readers.read_rows_by_id(run, name, example_ids, columns, optional=True)


def describe_sample(known: tuple, failures, result, fail_vectors, slice_names: dict, params: ClusterParams,
                     correct_texts: list, sizes: dict | None, n_fail: int):
    """clusters.parquet from the failures on the driver (all of them, or the fit sample with `sizes` summed over
    every block: size and share then count all failures, the other columns describe the sample)."""
    from erroranalysis import cluster

    clusters = cluster.describe_clusters(
        failures, result.labels, membership=result.membership, vectors=fail_vectors, correct_texts=correct_texts,
        kinds=result.cluster_tier, local_error_rate=result.local_error_rate, reassigned=result.reassigned,
        naming=params.project(cluster.NamingParams),
        titles={c: slice_names[g] for c, g in result.cluster_group.items()}, parents=result.cluster_parent)
    clusters = with_slice(clusters, result.cluster_group, slice_names)
    if sizes is not None:
        clusters["size"] = clusters["cluster_id"].map(sizes).astype(clusters["size"].dtype)
        clusters["share_of_failures"] = (clusters["size"] / max(n_fail, 1)).round(5)
        clusters = clusters.sort_values(["size", "cluster_id"], ascending=[False, True]).reset_index(drop=True)
    return with_other_stages(known, clusters, failures["example_id"].to_numpy(), result.labels)


def topic_texts(predictions) -> np.ndarray:
    """What the keywords contrast: a generation run's prompts (its topics), else the texts."""
    column = "prompt" if {"failure_reason", "prompt"} <= set(predictions.columns) else "text"
    return predictions[column].fillna("").astype(str).to_numpy()


def sampled_rows(predictions, rows: np.ndarray, k: int, seed: int) -> np.ndarray:
    """`rows` (positions in `predictions`), or above `k` the `k` of them with the smallest seeded hash of their
    example id, in row order: the rule that picks the context rows and the contrast texts under both engines."""
    if len(rows) <= k:
        return rows
    from erroranalysis.cluster import sample_keys, smallest

    ids = predictions["example_id"].to_numpy()[rows]
    return np.sort(rows[smallest(sample_keys(ids, seed), ids, k)])
