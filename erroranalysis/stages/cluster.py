"""The `cluster` stage: embed failures, cluster them, name the clusters, lay out all examples.

`cluster_run(run_dir, ClusterParams(...))` checks every parameter and input before computing, computes
everything, then commits embeddings.npy, embeddings.json, clusters.parquet and assignments.parquet together with
the stage. Bad input raises a one-line UserError and leaves the previous clustering untouched. `name_run`
recomputes only clusters.parquet (names, keywords, exemplars) from the stored clustering (stage
`cluster_names`), without re-clustering.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from erroranalysis import rundir
from erroranalysis.cluster import REDUCERS, ClusteringParams, NamingParams
from erroranalysis.cluster.llm_naming import NamerParams
from erroranalysis.core.errors import DataError, RunError
from erroranalysis.core.params import Choice, Flag, Int, Object, param
from erroranalysis.embed.choice import EmbedderName
from erroranalysis.rundir import readers
from erroranalysis.stages.llm_names import named_by_llm

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
class _Inputs:
    """What the stage reads, checked before it starts."""

    run: Any
    predictions: Any
    embedder: Any
    plan: Any  # embedder_choice.Plan of `auto`, else None
    fail_rows: np.ndarray
    context_rows: np.ndarray  # correct examples embedded beside the failures (local error rate, layout)
    correct_rows: np.ndarray


def cluster_run(run_dir: str | Path, params: ClusterParams = ClusterParams(), *, embedder=None, clusterer=None,
                features: Sequence = (), progress: Progress | None = None, engine=None, **overrides) -> dict:
    """Cluster a run's failures and commit the clustering; return a summary (counts, noise share, method, note,
    cluster names). `embedder` (an object with `key` and `embed(frame)`) replaces the one `params` names;
    `clusterer` and `features` are passed to `cluster.FailureClustering`. Under a distributed `engine`
    (`--engine ray`) the driver holds the fit sample only (`_cluster_on_blocks`)."""
    if embedder is not None and not hasattr(embedder, "embed"):
        overrides["embedder"], embedder = embedder, None
    params = params.replace(**overrides) if overrides else params
    start = time.perf_counter()
    model = params.model(clusterer, features)
    if engine is not None and getattr(engine, "distributed", False):
        summary = _cluster_on_blocks(run_dir, params, model, embedder, engine, progress)
        if summary is not None:
            summary["seconds"] = round(time.perf_counter() - start, 3)
            return summary
    inputs = _read_inputs(run_dir, params, embedder)
    run = inputs.run
    record = {**params.record(), "embedder": str(params.embedder) if embedder is None else
              getattr(inputs.embedder, "key", "custom"), "features": [getattr(b, "name", type(b).__name__)
                                                                       for b in model.features]}
    with run.stage("cluster", record) as staging:
        timings: dict[str, float] = {}
        by_mode = params.failure_modes and {"failure_reason", "output", "prompt"} <= set(inputs.predictions.columns)
        vectors, embed_rows = _timed(timings, "embed", _embed, inputs, progress, "output" if by_mode else "text")
        failures = inputs.predictions.iloc[inputs.fail_rows].reset_index(drop=True)
        groups, slice_names = _slice_groups(run, failures) if params.slice_groups and not by_mode else (None, {})
        if by_mode and len(failures):
            result = _timed(timings, "cluster", _fit_modes, inputs, vectors, failures, params, progress)
        else:
            result = _timed(timings, "cluster", _fit, model, vectors, len(inputs.fail_rows), failures, groups,
                            progress)
        fail_vectors = vectors[:len(inputs.fail_rows)]
        clusters = _timed(timings, "name", _describe, run, inputs, failures, result, fail_vectors, slice_names,
                          params)
        clusters = named_by_llm(run, staging, clusters, failures, result.labels, params)
        xy = _timed(timings, "layout", _layout, inputs, vectors, embed_rows, params, progress)
        meta = _embeddings_meta(inputs.embedder, vectors, fail_vectors, failures)
        staging.write_npy(rundir.EMBEDDINGS, np.ascontiguousarray(fail_vectors, dtype=np.float32))
        staging.write_json(rundir.EMBEDDINGS_META, meta)
        staging.write_parquet(rundir.CLUSTERS, clusters)
        staging.write_parquet(rundir.ASSIGNMENTS, _assignments(inputs.predictions, inputs.fail_rows, result, xy))
        summary = _summary(run, inputs, result, meta, clusters)
        staging.facts.update({
            "n_failures": summary["n_failures"], "n_clusters": summary["n_clusters"],
            "noise_share": summary["noise_share"], "method": result.method, "note": result.note,
            "resolved": {k: v for k, v in result.params.items() if k != "n_failures"},
            "embedder_key": getattr(inputs.embedder, "key", None), "n_embedded": int(len(embed_rows)),
            "embedder_plan": inputs.plan.record() if inputs.plan else None,
            "timings": {k: round(v, 3) for k, v in timings.items()}})
    summary["seconds"] = round(time.perf_counter() - start, 3)
    return summary


def _cluster_on_blocks(run_dir, params: ClusterParams, model, embedder, engine, progress: Progress | None):
    """The stage with the driver holding a bounded sample (`cluster.blockwise`; docs/scale.md): count the strata,
    take the seeded sample, embed and fit it here as in process, place the other failures and write assignments
    per block on the workers, renumber clusters by their summed sizes. None when the run needs the in-process
    stage (a generation run's failure modes, vectors from a file or the hidden states)."""
    import pandas as pd

    from erroranalysis import cluster
    from erroranalysis.cluster import blockwise
    from erroranalysis.engines import blocks
    from erroranalysis.stages.embedders import cluster_plan, resolve_embedder

    run = rundir.Run.open(run_dir)
    path = readers.artifact_path(run, readers.units_artifact(run))
    columns = set(_parquet_columns(path))
    if params.failure_modes and {"failure_reason", "output", "prompt"} <= columns:
        return None
    if embedder is None and not hasattr(params.embedder, "embed") and str(params.embedder) not in (
            "auto", "static", "minilm") and not Path(str(params.embedder)).expanduser().is_dir():
        return None  # hidden states and vectors from a file are read whole: the in-process stage
    per_block = blocks.ROWS_PER_BLOCK
    failures, context, naming, n_fail, n_rows = _sample_on_blocks(path, engine, params, columns, per_block)
    sampled, n_context = n_fail > params.max_fit, len(context)
    local = pd.concat([failures, context], ignore_index=True)
    fail_rows, context_rows = np.arange(len(failures)), np.arange(len(failures), len(local))
    plan = cluster_plan(n_fail + n_context) if embedder is None and params.embedder == "auto" else None
    emb = embedder if embedder is not None else resolve_embedder(
        plan.source if plan else params.embedder, run, local, cache=params.cache,
        batch_size=params.embed_batch_size, n_rows=n_fail + n_context)
    inputs = _Inputs(run, local, emb, plan, fail_rows, context_rows, np.zeros(0, np.int64))
    record = {**params.record(), "embedder": str(params.embedder) if embedder is None else
              getattr(emb, "key", "custom"), "features": [getattr(b, "name", type(b).__name__)
                                                           for b in model.features]}
    with run.stage("cluster", record) as staging:
        timings: dict[str, float] = {}
        vectors, embed_rows = _timed(timings, "embed", _embed, inputs, progress)
        fail_vectors = vectors[:len(failures)]
        slice_names: dict = {}
        if sampled:
            fitted, rate, resolved = _timed(timings, "cluster", model.fit_sample, vectors,
                                            np.arange(len(vectors)) < len(failures), failures, n_fail)
            note = cluster.sample_note(len(failures), n_fail, resolved)
        else:
            groups, slice_names = _slice_groups(run, failures, True) if params.slice_groups else (None, {})
            result = _timed(timings, "cluster", _fit, model, vectors, len(failures), failures, groups, progress)
            fitted = cluster.Assigned(result.labels, result.membership, result.tier, result.reassigned,
                                      cluster_tier=result.cluster_tier)
            rate, resolved, note = result.local_error_rate, result.params, result.note
        xy = _timed(timings, "layout", _layout, inputs, vectors, embed_rows, params, progress)
        placement = blockwise.Placement(
            ids=failures["example_id"].to_numpy(dtype=object), vectors=fail_vectors, fitted=fitted, rate=rate,
            xy=xy[:len(failures)], d90=cluster.reference_distance(fail_vectors) if sampled and len(failures) else 0.0,
            context_xy=dict(zip(context["example_id"], map(tuple, xy[len(failures):]))), embedder=emb,
            folder=str(staging.file(rundir.ASSIGNMENTS)))
        t = time.perf_counter()
        totals = blockwise.merge_counts(r for _, r in blocks.map_blocks(
            blockwise.place_block, path, engine, rows_per_block=per_block, kwargs={"placement": placement},
            progress=_rows_done(progress, "place", n_rows)))
        timings["place"] = time.perf_counter() - t
        if sampled:
            result, sizes_of = _numbered(engine, placement, totals, fitted, rate, resolved, note, params, per_block)
        else:
            sizes_of = None
        clusters = _timed(timings, "name", _describe_sample, run, failures, result, fail_vectors, slice_names,
                          params, _topic_texts(naming).tolist(), sizes_of, n_fail, True)
        clusters = named_by_llm(run, staging, clusters, failures, result.labels, params)
        meta = _embeddings_meta(emb, vectors, fail_vectors, failures)
        if sampled:
            meta["sample_of"] = n_fail  # the fit sample's vectors, not every failure's
        staging.write_npy(rundir.EMBEDDINGS, np.ascontiguousarray(fail_vectors, dtype=np.float32))
        staging.write_json(rundir.EMBEDDINGS_META, meta)
        staging.write_parquet(rundir.CLUSTERS, clusters)
        clustered = int(sum(totals["sizes"].values())) if sampled else int((result.labels >= 0).sum())
        summary = {
            "run": str(run.path), "n_examples": n_rows, "n_failures": n_fail, "n_clusters": int(len(clusters)),
            "noise_share": round(1 - clustered / n_fail if sampled else result.noise_share, 4),
            "method": result.method,
            "note": result.note, "embedder": meta["embedder"]["name"], "embedder_note": plan.note if plan else None,
            "min_cluster_size": int(resolved.get("min_cluster_size", 0)),
            "clusters": [{"cluster_id": int(r.cluster_id), "size": int(r.size), "name": str(r.name),
                          "kind": str(r.kind)} for r in clusters.itertuples()]}
        staging.facts.update({
            "n_failures": n_fail, "n_clusters": summary["n_clusters"], "noise_share": summary["noise_share"],
            "method": result.method, "note": result.note,
            "resolved": {k: v for k, v in resolved.items() if k != "n_failures"},
            "embedder_key": getattr(emb, "key", None), "n_embedded": int(len(embed_rows) + totals["placed"]),
            "embedder_plan": plan.record() if plan else None,
            "engine": {"blocks": True, "fit_sample": int(len(failures)), "context_sample": int(len(context)),
                       "placed_on_workers": int(totals["placed"]),
                       "described_from": "the fit sample" if sampled else "all failures"},
            "timings": {k: round(v, 3) for k, v in timings.items()}})
    return summary


def _numbered(engine, placement, totals: dict, fitted, rate, resolved: dict, note: str, params: ClusterParams,
              per_block: int):
    """Pass 4: clusters numbered by their sizes summed over the blocks (the rule of `relabel_by_size`), the shards
    rewritten with those ids, parents from the summed directions; (the fit sample's ClusteringResult, {cluster id:
    size over every failure})."""
    from erroranalysis import cluster
    from erroranalysis.cluster import blockwise
    from erroranalysis.engines import blocks

    mapping = cluster.size_order(dict(totals["sizes"]), totals["first"])
    blocks.map_blocks(blockwise.renumber_block, placement.folder, engine, rows_per_block=per_block,
                      kwargs={"mapping": mapping, "folder": placement.folder}, ordered=True)
    labels = np.array([mapping.get(int(c), -1) for c in fitted.labels], dtype=np.int64)
    sizes = {mapping[c]: n for c, n in totals["sizes"].items()}
    parents = {} if params.parent_similarity is None else cluster.parents_of(
        {mapping[c]: s for c, s in totals["sums"].items()}, sizes, min_similarity=params.parent_similarity)
    result = cluster.ClusteringResult(
        labels=labels, membership=fitted.strength, reassigned=fitted.reassigned, tier=fitted.tier,
        local_error_rate=rate, coordinates=None, method="hdbscan", note=note, params=resolved,
        cluster_tier={mapping[c]: t for c, t in fitted.cluster_tier.items() if c in mapping},
        cluster_parent=parents)
    return result, sizes


def _sample_on_blocks(path, engine, params: ClusterParams, columns: set, per_block: int):
    """Passes 1 and 2: (the fit sample's failures, the context's correct examples, the keywords' contrast
    examples, failures, rows), each frame in row order; the driver holds at most twice the sample at once."""
    import pandas as pd

    from erroranalysis import cluster
    from erroranalysis.cluster import blockwise
    from erroranalysis.engines import blocks

    base = [c for c in ("example_id", "correct", "label", "pred") if c in columns]
    counted = [r for _, r in blocks.map_blocks(blockwise.block_strata, path, engine, columns=base,
                                               rows_per_block=per_block)]
    pairs = sum((r["pairs"] for r in counted), Counter())
    n_correct, n_rows = sum(r["correct"] for r in counted), sum(r["rows"] for r in counted)
    n_fail = int(sum(pairs.values()))
    keys = sorted(pairs)
    sizes = np.array([pairs[k] for k in keys], dtype=np.int64)
    mcs = params.min_cluster_size or cluster.default_min_cluster_size(n_fail)
    take = cluster.quotas(sizes, params.max_fit, 2 * mcs) if n_fail > params.max_fit else sizes
    want_context = n_fail > 0 and (params.error_aware or params.layout != "none")
    n_context = min(n_correct, params.max_fit) if want_context else 0
    quotas = {**{k: int(t) for k, t in zip(keys, take)},
              blockwise.CORRECT: min(n_correct, max(n_context, cluster.MAX_CORRECT_DOCS))}
    sample = None
    for _, part in blocks.map_blocks(blockwise.block_sample, path, engine, rows_per_block=per_block,
                                     kwargs={"quotas": quotas, "seed": params.seed}):
        sample = blockwise.merge_sample([p for p in (sample, part) if p is not None], quotas)
    sample = sample if sample is not None else pd.DataFrame(columns=[*base, "text", "_row", "_key"])
    is_fail = ~sample["correct"].to_numpy(dtype=bool)
    failures = sample[is_fail].drop(columns=["_row", "_key", "_stratum"], errors="ignore").reset_index(drop=True)
    correct = sample[~is_fail].drop(columns=["_row", "_stratum"], errors="ignore").reset_index(drop=True)
    context = correct.iloc[_smallest_rows(correct, n_context)].drop(columns=["_key"])
    naming = correct.iloc[_smallest_rows(correct, cluster.MAX_CORRECT_DOCS)]
    return failures, context, naming, n_fail, n_rows


def _rows_done(progress: Progress | None, phase: str, total: int):
    """map_blocks' progress (rows of each block done) as the stage's (phase, rows done, total)."""
    if progress is None:
        return None
    done = [0]

    def report(rows: int) -> None:
        done[0] += rows
        progress(phase, done[0], total)
    return report


def _smallest_rows(frame, k: int) -> np.ndarray:
    """Positions of the `k` rows of a sample frame with the smallest keys, in row order."""
    from erroranalysis.cluster import smallest

    if not len(frame):
        return np.zeros(0, np.int64)
    return np.sort(smallest(frame["_key"].to_numpy(), frame["example_id"].to_numpy(), k))


def _parquet_columns(path) -> list[str]:
    import pyarrow.parquet as pq

    from erroranalysis.engines.blocks import files_of

    found = files_of(path)
    return list(pq.read_schema(found[0]).names) if found else []


def _describe_sample(run, failures, result, fail_vectors, slice_names: dict, params: ClusterParams,
                     correct_texts: list, sizes: dict | None, n_fail: int, filtered: bool = False):
    """clusters.parquet from the failures on the driver (all of them, or the fit sample with `sizes` summed over
    every block: size and share then count all failures, the other columns describe the sample)."""
    from erroranalysis import cluster

    clusters = cluster.describe_clusters(
        failures, result.labels, membership=result.membership, vectors=fail_vectors, correct_texts=correct_texts,
        kinds=result.cluster_tier, local_error_rate=result.local_error_rate, reassigned=result.reassigned,
        naming=params.project(cluster.NamingParams),
        titles={c: slice_names[g] for c, g in result.cluster_group.items()}, parents=result.cluster_parent)
    clusters = _with_slice(clusters, result.cluster_group, slice_names)
    if sizes is not None:
        clusters["size"] = clusters["cluster_id"].map(sizes).astype(clusters["size"].dtype)
        clusters["share_of_failures"] = (clusters["size"] / max(n_fail, 1)).round(5)
        clusters = clusters.sort_values(["size", "cluster_id"], ascending=[False, True]).reset_index(drop=True)
    return with_other_stages(run, clusters, failures["example_id"].to_numpy(), result.labels, filtered)


def _read_inputs(run_dir, params: ClusterParams, embedder) -> _Inputs:
    from erroranalysis.embed import models as embedding
    from erroranalysis.stages.embedders import cluster_plan, resolve_embedder

    run = rundir.Run.open(run_dir)
    predictions = readers.read_units(run)
    failed = ~predictions["correct"].to_numpy()
    fail_rows, correct_rows = np.flatnonzero(failed), np.flatnonzero(~failed)
    want_context = len(fail_rows) > 0 and (params.error_aware or params.layout != "none")
    context_rows = correct_rows if want_context else correct_rows[:0]
    context_rows = sampled_rows(predictions, context_rows, params.max_fit, params.seed)
    n_rows = len(fail_rows) + len(context_rows)
    plan = cluster_plan(n_rows) if embedder is None and params.embedder == "auto" else None
    emb = embedder if embedder is not None else resolve_embedder(
        plan.source if plan else params.embedder, run, predictions, cache=params.cache,
        batch_size=params.embed_batch_size, n_rows=n_rows)
    if isinstance(emb, embedding.PrecomputedEmbedder):  # a file that names its rows may cover only the failures
        emb.rows_for(predictions.iloc[fail_rows])
        if emb.row_of is not None:
            known = predictions["example_id"].to_numpy()[context_rows]
            context_rows = context_rows[np.array([i in emb.row_of for i in known], dtype=bool)]
    return _Inputs(run, predictions, emb, plan, fail_rows, context_rows, correct_rows)


def _timed(timings: dict, name: str, function, *args):
    t = time.perf_counter()
    out = function(*args)
    timings[name] = time.perf_counter() - t
    return out


def _embed(inputs: _Inputs, progress: Progress | None, column: str = "text") -> tuple[np.ndarray, np.ndarray]:
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


def _fit(model, vectors: np.ndarray, n_fail: int, failures, groups, progress: Progress | None):
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


def _fit_modes(inputs: _Inputs, vectors: np.ndarray, failures, params: ClusterParams, progress: Progress | None):
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


def _describe(run, inputs: _Inputs, failures, result, fail_vectors, slice_names: dict, params: ClusterParams):
    from erroranalysis import cluster

    naming_rows = sampled_rows(inputs.predictions, inputs.correct_rows, cluster.MAX_CORRECT_DOCS, params.seed)
    return _describe_sample(run, failures, result, fail_vectors, slice_names, params,
                            _topic_texts(inputs.predictions)[naming_rows].tolist(), None, len(failures))


def _layout(inputs: _Inputs, vectors, embed_rows, params: ClusterParams, progress: Progress | None) -> np.ndarray:
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


def _embeddings_meta(emb, vectors, fail_vectors, failures) -> dict:
    from erroranalysis.embed import models as embedding

    dim = int(fail_vectors.shape[1]) if len(failures) else int(vectors.shape[1]) if vectors.ndim == 2 else 0
    return {"embedder": embedding.describe(emb), "dim": dim, "rows": int(len(failures)),
            "example_ids": failures["example_id"].tolist(), "created": rundir.now_iso()}


def _summary(run, inputs: _Inputs, result, meta: dict, clusters) -> dict:
    return {
        "run": str(run.path), "n_examples": int(len(inputs.predictions)), "n_failures": int(len(inputs.fail_rows)),
        "n_clusters": int(result.n_clusters), "noise_share": round(result.noise_share, 4), "method": result.method,
        "note": result.note, "embedder": meta["embedder"]["name"],
        "embedder_note": inputs.plan.note if inputs.plan else None,
        "min_cluster_size": int(result.params.get("min_cluster_size", 0)),
        "clusters": [{"cluster_id": int(r.cluster_id), "size": int(r.size), "name": str(r.name), "kind": str(r.kind)}
                     for r in clusters.itertuples()],
    }


def _slice_groups(run: rundir.Run, failures, filtered: bool = False):
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


def _with_slice(clusters, cluster_group: dict, slice_names: dict):
    """`slice_id` and `slice` (its definition) for clusters taken out as a slice group; null elsewhere."""
    import pandas as pd

    clusters = clusters.copy()
    sid = [cluster_group.get(int(c)) for c in clusters["cluster_id"]]
    clusters["slice_id"] = pd.array(sid, dtype="Int64")
    clusters["slice"] = pd.array([slice_names.get(s) if s is not None else None for s in sid], dtype="string")
    return clusters


def with_other_stages(run: rundir.Run, clusters, failure_ids: np.ndarray, labels: np.ndarray,
                      filtered: bool = False):
    """Add what the slices and checks stages know about each cluster, when those stages are done:
    `slices` (descriptions of the slices holding most of its failures, with that share) and
    `label_issue_share` (share of its failures whose gold label is probably wrong) with `probably_mislabeled`.
    `filtered`: read only the rows of `failure_ids` from those stages' per-example tables (`--engine ray`)."""
    import pandas as pd

    from erroranalysis.stages.data_checks import label_issue_share

    clusters = clusters.copy()
    members = {int(c): set(failure_ids[labels == c]) for c in clusters["cluster_id"]}
    found = _slices_of(run, failure_ids, filtered)
    if found is not None:
        slices, in_slice = found
        by_slice = {sid: set(ids) for sid, ids in in_slice.groupby("slice_id")["example_id"]}
        names = dict(zip(slices["slice_id"], slices["description"]))
        clusters["slices"] = [
            [f"{names[sid]} ({share:.0%})" for share, sid in sorted(
                ((len(ids & by_slice.get(sid, set())) / max(len(ids), 1), sid) for sid in names), reverse=True)
             if share >= SLICE_OVERLAP]
            for ids in (members[int(c)] for c in clusters["cluster_id"])]
    checks = _rows_for(run, rundir.CHECKS, failure_ids, ("example_id", "label_issue")) if filtered else \
        readers.read_checks(run, optional=True)
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
    """The rows of a per-example table (checks.parquet, slice_members.parquet) whose example id is in
    `example_ids`, filtered as they are read, so the driver never holds the whole table; None when its stage never
    committed it."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    try:
        file = readers.artifact_path(run, name)
    except readers.NotCommitted:
        return None
    dataset = ds.dataset(str(file), format="parquet")
    kind = dataset.schema.field("example_id").type
    ids = [str(i) for i in example_ids]
    wanted = pa.array(ids).cast(kind) if pa.types.is_string(kind) or pa.types.is_large_string(kind) else \
        pa.array([int(i) for i in ids if i.lstrip("-").isdigit()], type=kind)
    present = [c for c in columns if c in dataset.schema.names]
    frame = dataset.to_table(columns=present, filter=ds.field("example_id").isin(wanted)).to_pandas()
    frame["example_id"] = frame["example_id"].astype(str)
    return frame


def _assignments(predictions, fail_rows: np.ndarray, result, xy: np.ndarray):
    from erroranalysis.cluster import blockwise

    n = len(predictions)
    out = {"cluster_id": np.full(n, -1, dtype=np.int64), "membership": np.zeros(n, dtype=np.float32),
           "reassigned": np.zeros(n, dtype=bool), "tier": np.full(n, "", dtype=object),
           "local_error_rate": np.full(n, np.nan, dtype=np.float32), "xy": xy}
    out["cluster_id"][fail_rows], out["membership"][fail_rows] = result.labels, result.membership
    out["reassigned"][fail_rows], out["tier"][fail_rows] = result.reassigned, result.tier.astype(str)
    out["local_error_rate"][fail_rows] = result.local_error_rate
    failure = np.zeros(n, dtype=bool)
    failure[fail_rows] = True
    return blockwise.assignments_frame(predictions["example_id"].to_numpy(), failure, out)


def sampled_rows(predictions, rows: np.ndarray, k: int, seed: int) -> np.ndarray:
    """`rows` (positions in `predictions`), or above `k` the `k` of them with the smallest seeded hash of their
    example id, in row order: the rule that picks the context rows and the contrast texts under both engines."""
    if len(rows) <= k:
        return rows
    from erroranalysis.cluster import sample_keys, smallest

    ids = predictions["example_id"].to_numpy()[rows]
    return np.sort(rows[smallest(sample_keys(ids, seed), ids, k)])


def name_run(run_dir: str | Path, params: NamingParams = NamingParams(), **overrides) -> dict:
    """Rewrite clusters.parquet (names, keywords, exemplars, diagnostics) from the stored clustering."""
    from erroranalysis import cluster

    namer = params.project(NamerParams) if isinstance(params, NamerParams) else NamerParams()
    params = params.project(NamingParams).replace(**overrides) if overrides else params.project(NamingParams)
    run = rundir.Run.open(run_dir)
    predictions = readers.read_units(run)
    assignments = readers.read_assignments(run)
    if len(assignments) != len(predictions) or not (
            assignments["example_id"].to_numpy() == predictions["example_id"].to_numpy()).all():
        raise RunError(f"{run.file(rundir.ASSIGNMENTS)}: does not match {rundir.PREDICTIONS} row for row; re-run "
                       "'erroranalysis cluster'.")
    fail = assignments["failure"].to_numpy(dtype=bool)
    failures = predictions[fail].reset_index(drop=True)
    part = assignments[fail]
    labels = part["cluster_id"].to_numpy(dtype=np.int64)
    cluster_group, slice_names, parents = _stored_slices(run)
    with run.stage("cluster_names", {**params.record(), **namer.record()}) as staging:
        clusters = cluster.describe_clusters(
            failures, labels, membership=part["membership"].to_numpy(), vectors=_stored_vectors(run, failures),
            correct_texts=_topic_texts(predictions)[sampled_rows(
                predictions, np.flatnonzero(predictions["correct"].to_numpy()), cluster.MAX_CORRECT_DOCS,
                params.seed)].tolist(),
            kinds=_stored_kinds(part, labels),
            local_error_rate=part["local_error_rate"].to_numpy(dtype=np.float32),
            reassigned=part["reassigned"].to_numpy(dtype=bool), naming=params, titles={c: slice_names[g] for c, g in cluster_group.items()}, parents=parents)
        clusters = _with_slice(clusters, cluster_group, slice_names)
        clusters = with_other_stages(run, clusters, failures["example_id"].to_numpy(), labels)
        clusters = named_by_llm(run, staging, clusters, failures, labels, namer)
        staging.write_parquet(rundir.CLUSTERS, clusters)
    return {"run": str(run.path), "n_clusters": int(len(clusters)),
            "clusters": [{"cluster_id": int(r.cluster_id), "size": int(r.size), "name": str(r.name), "kind": str(r.kind)}
                         for r in clusters.itertuples()]}


def _topic_texts(predictions) -> np.ndarray:
    """What the keywords contrast: a generation run's prompts (its topics), else the texts."""
    column = "prompt" if {"failure_reason", "prompt"} <= set(predictions.columns) else "text"
    return predictions[column].fillna("").astype(str).to_numpy()


def _stored_vectors(run, failures) -> np.ndarray | None:
    """The clustering's own failure vectors, when they are the failures' (for exemplars nearest the centre)."""
    stored = readers.read_embeddings(run, optional=True)
    if stored is None:
        return None
    vectors, meta = stored
    return vectors if meta.get("example_ids") == failures["example_id"].tolist() else None


def _stored_kinds(part, labels: np.ndarray) -> dict[int, str]:
    tiers = part["tier"].astype(str).to_numpy()
    kinds = {}
    for c in np.unique(labels[labels >= 0]):
        values, counts = np.unique(tiers[labels == c], return_counts=True)
        kinds[int(c)] = str(values[counts.argmax()])
    return kinds


def _stored_slices(run: rundir.Run) -> tuple[dict, dict, dict]:
    """What the stored clustering decided beside the clusters themselves: ({cluster_id: slice_id},
    {slice_id: definition}, {cluster_id: parent_id}); empty for a clustering made before slice clusters or parents
    existed, or a clusters.parquet that cannot be read (it is rewritten)."""
    try:
        old = readers.read_clusters(run, optional=True)
    except RunError:  # damaged: it is rewritten from the assignments
        return {}, {}, {}
    if old is None:
        return {}, {}, {}
    parents = {}
    if "parent_id" in old.columns:
        with_parent = old[old["parent_id"].notna()]
        parents = dict(zip(with_parent["cluster_id"].astype(int), with_parent["parent_id"].astype(int)))
    if not {"slice_id", "slice"} <= set(old.columns):
        return {}, {}, parents
    sliced = old[old["slice_id"].notna()]
    return (dict(zip(sliced["cluster_id"].astype(int), sliced["slice_id"].astype(int))),
            dict(zip(sliced["slice_id"].astype(int), sliced["slice"].astype(str))), parents)
