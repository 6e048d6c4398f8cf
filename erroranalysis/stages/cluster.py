"""The `cluster` stage: embed failures, cluster them, name the clusters, lay out all examples.

`cluster_run(run_dir, ClusterParams(...))` checks every parameter and input before computing, computes
everything, then commits embeddings.npy, embeddings.json, clusters.parquet and assignments.parquet together with
the stage. Bad input raises a one-line UserError and leaves the previous clustering untouched. Under a distributed
engine the stage runs on blocks (`cluster_blocks.py`); `name_run` (`cluster_names.py`) recomputes only
clusters.parquet from the stored clustering. The parts both share are in `cluster_parts.py`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from erroranalysis import rundir
from erroranalysis.rundir import readers
from erroranalysis.stages.cluster_blocks import cluster_on_blocks
from erroranalysis.stages.cluster_parts import (
    ClusterParams,
    Inputs,
    Progress,
    describe_sample,
    embed,
    embeddings_meta,
    fit,
    fit_modes,
    layout,
    other_stages,
    sampled_rows,
    slice_groups,
    timed,
    topic_texts,
)
from erroranalysis.stages.llm_names import named_by_llm


def cluster_run(run_dir: str | Path, params: ClusterParams = ClusterParams(), *, embedder=None, clusterer=None,
                features: Sequence = (), progress: Progress | None = None, engine=None, **overrides) -> dict:
    """Cluster a run's failures and commit the clustering; return a summary (counts, noise share, method, note,
    cluster names). `embedder` (an object with `key` and `embed(frame)`) replaces the one `params` names;
    `clusterer` and `features` are passed to `cluster.FailureClustering`. Under a distributed `engine`
    (`--engine ray`) the driver holds the fit sample only (`cluster_on_blocks`)."""
    if embedder is not None and not hasattr(embedder, "embed"):
        overrides["embedder"], embedder = embedder, None
    params = params.replace(**overrides) if overrides else params
    start = time.perf_counter()
    model = params.model(clusterer, features)
    if engine is not None and getattr(engine, "distributed", False):
        summary = cluster_on_blocks(run_dir, params, model, embedder, engine, progress)
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
        vectors, embed_rows = timed(timings, "embed", embed, inputs, progress, "output" if by_mode else "text")
        failures = inputs.predictions.iloc[inputs.fail_rows].reset_index(drop=True)
        groups, slice_names = slice_groups(run, failures) if params.slice_groups and not by_mode else (None, {})
        if by_mode and len(failures):
            result = timed(timings, "cluster", fit_modes, inputs, vectors, failures, params, progress)
        else:
            result = timed(timings, "cluster", fit, model, vectors, len(inputs.fail_rows), failures, groups,
                            progress)
        fail_vectors = vectors[:len(inputs.fail_rows)]
        clusters = timed(timings, "name", _describe, run, inputs, failures, result, fail_vectors, slice_names,
                          params)
        clusters = named_by_llm(run, staging, clusters, failures, result.labels, params)
        xy = timed(timings, "layout", layout, inputs, vectors, embed_rows, params, progress)
        meta = embeddings_meta(inputs.embedder, vectors, fail_vectors, failures)
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


def _read_inputs(run_dir, params: ClusterParams, embedder) -> Inputs:
    from erroranalysis.embed import vector_files
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
    if isinstance(emb, vector_files.PrecomputedEmbedder):  # a file that names its rows may cover only the failures
        emb.rows_for(predictions.iloc[fail_rows])
        if emb.row_of is not None:
            known = predictions["example_id"].to_numpy()[context_rows]
            context_rows = context_rows[np.array([i in emb.row_of for i in known], dtype=bool)]
    return Inputs(run, predictions, emb, plan, fail_rows, context_rows, correct_rows)


def _describe(run, inputs: Inputs, failures, result, fail_vectors, slice_names: dict, params: ClusterParams):
    from erroranalysis import cluster

    naming_rows = sampled_rows(inputs.predictions, inputs.correct_rows, cluster.MAX_CORRECT_DOCS, params.seed)
    known = other_stages(run, failures["example_id"].to_numpy())
    return describe_sample(known, failures, result, fail_vectors, slice_names, params,
                            topic_texts(inputs.predictions)[naming_rows].tolist(), None, len(failures))


def _summary(run, inputs: Inputs, result, meta: dict, clusters) -> dict:
    return {
        "run": str(run.path), "n_examples": int(len(inputs.predictions)), "n_failures": int(len(inputs.fail_rows)),
        "n_clusters": int(result.n_clusters), "noise_share": round(result.noise_share, 4), "method": result.method,
        "note": result.note, "embedder": meta["embedder"]["name"],
        "embedder_note": inputs.plan.note if inputs.plan else None,
        "min_cluster_size": int(result.params.get("min_cluster_size", 0)),
        "clusters": [{"cluster_id": int(r.cluster_id), "size": int(r.size), "name": str(r.name), "kind": str(r.kind)}
                     for r in clusters.itertuples()],
    }


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
