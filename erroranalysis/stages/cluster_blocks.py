"""The `cluster` stage on blocks (`--engine ray`; docs/scale.md): the driver holds the seeded fit sample only,
the workers place the other failures and write the assignments per block (`cluster.blockwise`)."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np

from erroranalysis import rundir
from erroranalysis.core import shards
from erroranalysis.embed.vector_files import RowVectors
from erroranalysis.rundir import readers
from erroranalysis.stages import cluster_modes
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
    slice_groups,
    timed,
    topic_texts,
)
from erroranalysis.stages.inputs import for_workers
from erroranalysis.stages.llm_names import named_by_llm


def cluster_on_blocks(run_dir, params: ClusterParams, model, embedder, engine, progress: Progress | None):
    """The stage with the driver holding a bounded sample of rows (`cluster.blockwise`; docs/scale.md): count the
    strata, take the seeded sample, embed, fit and lay it out as in process (above `max_fit` failures in one task on
    a worker, `_fit_sample`, so that the driver holds no model and no vectors), place the other failures and write
    assignments per block on the workers, renumber clusters by their summed sizes, describe them (`_described`, on
    that worker too). A generation run's failures are stratified and fitted by failure mode, and vectors from the
    hidden states or a file are read by row where they are embedded (`cluster_modes.py`)."""
    from erroranalysis.cluster import blockwise
    from erroranalysis.engines import blocks
    from erroranalysis.stages.embedders import cluster_plan

    run = rundir.Run.open(run_dir)
    path = for_workers(run, readers.units_artifact(run), engine)  # and embeddings.npy beside it
    columns = set(_parquet_columns(path))
    modes = cluster_modes.by_mode(params, columns)
    if embedder is None:
        embedder = cluster_modes.row_vectors(run, params.embedder, blocks.n_rows(blocks.plan(path)))
    per_block = blocks.ROWS_PER_BLOCK
    failures, context, naming, n_fail, n_rows = _sample_on_blocks(path, engine, params, columns, per_block, modes)
    sampled = n_fail > params.max_fit
    plan = cluster_plan(n_fail + len(context)) if embedder is None and params.embedder == "auto" else None
    record = {**params.record(), "embedder": str(params.embedder) if embedder is None or isinstance(
        embedder, RowVectors) else getattr(embedder, "key", "custom"), "features": [getattr(b, "name", type(b).__name__)
                                                                for b in model.features]}
    # above max_fit the fit runs on a worker; below it the driver fits every failure as the in-process stage does
    # (a worker's math may differ in the last bit, and below max_fit every artifact is the in-process one)
    where = engine if sampled else None
    with run.stage("cluster", record) as staging:
        # the fit sample's vectors, which the placing workers read: for a run on object storage, one shard there
        vectors_file = str(staging.whole(rundir.EMBEDDINGS, ".npy", engine))
        if progress:
            progress("cluster", 0, 1)
        got = blocks.call_on_worker(
            _fit_sample, where, run_dir=None if sampled else str(run.path), failures=failures, context=context,
            params=params, model=model,
            embedder=embedder if embedder is not None else plan.source if plan else params.embedder,
            n_fail=n_fail, vectors_file=vectors_file, by_mode=modes)
        if progress:
            progress("cluster", 1, 1)
        timings, fitted, xy, emb = got["timings"], got["fitted"], got["xy"], got["embedder"]
        failures = failures.drop(columns="_row")
        placement = blockwise.Placement(
            ids=failures["example_id"].to_numpy(dtype=object), vectors=None, vectors_file=vectors_file,
            fitted=fitted, rate=got["rate"], xy=xy[:len(failures)], d90=got["d90"],
            context_xy=dict(zip(got["context_ids"], map(tuple, xy[len(failures):]))), embedder=emb,
            folder=str(staging.shards(rundir.ASSIGNMENTS, engine)), column="output" if modes else "text",
            modes=got.get("modes"))
        t = time.perf_counter()
        totals = blockwise.merge_counts(r for _, r in blocks.map_blocks(
            blockwise.place_block, path, engine, rows_per_block=per_block, kwargs={"placement": placement},
            progress=_rows_done(progress, "place", n_rows)))
        timings["place"] = time.perf_counter() - t
        resolved = got["resolved"]
        if sampled:
            result, sizes_of = _numbered(engine, placement, totals, fitted, got["rate"], resolved, got["note"],
                                         params, per_block, "failure_modes" if modes else "hdbscan")
        else:
            result, sizes_of = got["result"], None
        t = time.perf_counter()
        known = other_stages(run, failures["example_id"].to_numpy(), True)  # the fit sample's rows alone
        clusters = blocks.call_on_worker(_described, where, known=known, failures=failures, result=result,
                                         vectors_file=vectors_file, slice_names=got["slice_names"], params=params,
                                         correct_texts=topic_texts(naming).tolist(), sizes=sizes_of, n_fail=n_fail)
        timings["name"] = time.perf_counter() - t
        clusters = named_by_llm(run, staging, clusters, failures, result.labels, params)
        meta = got["meta"]
        if sampled:
            meta["sample_of"] = n_fail  # the fit sample's vectors, not every failure's
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
            "embedder_key": got["embedder_key"], "n_embedded": int(got["n_embedded"] + totals["placed"]),
            "embedder_plan": plan.record() if plan else None,
            "engine": {"blocks": True, "fit_sample": int(len(failures)), "context_sample": len(got["context_ids"]),
                       "fit_sample_strata": "failure mode" if modes else "label, pred",
                       "placed_on_workers": int(totals["placed"]),
                       "described_from": "the fit sample" if sampled else "all failures",
                       "fitted_on": "a worker" if sampled else "the driver"},
            "timings": {k: round(v, 3) for k, v in timings.items()}})
    return summary


def _fit_sample(run_dir: str | None, failures, context, params: ClusterParams, model, embedder, n_fail: int,
                vectors_file: str, by_mode: bool = False) -> dict:
    """On a worker: embed the fit sample's failures and context, fit them as the in-process stage does (the
    sample's own rule above `max_fit`, else the full fit with slice groups), lay them out in 2-D, write the
    failures' vectors to `vectors_file` (the stage's embeddings.npy, which the placing workers read); send back
    what the driver needs: the fit per sample row, 2-D positions, the embedder (unloaded) and its description.
    On a worker (a sample), `run_dir` is None: nothing here reads the run (vectors by row come as `RowVectors`),
    so the worker need not see the driver's disk."""
    import pandas as pd

    from erroranalysis import cluster
    from erroranalysis.core import files
    from erroranalysis.stages.embedders import resolve_embedder

    run = rundir.Run.open(run_dir) if run_dir else None
    sampled = n_fail > params.max_fit
    emb = embedder if hasattr(embedder, "embed") else resolve_embedder(
        embedder, run, pd.concat([failures, context]), cache=params.cache, batch_size=params.embed_batch_size,
        n_rows=len(failures) + len(context))
    context = cluster_modes.known_context(emb, failures, context)
    local = pd.concat([failures, context], ignore_index=True)
    local.index = local.pop("_row").to_numpy()  # row positions, as in process: hidden states are read by them
    failures = failures.drop(columns="_row")
    fail_rows, context_rows = np.arange(len(failures)), np.arange(len(failures), len(local))
    inputs = Inputs(run, local, emb, None, fail_rows, context_rows, np.zeros(0, np.int64))
    timings: dict[str, float] = {}
    vectors, embed_rows = timed(timings, "embed", embed, inputs, None, "output" if by_mode else "text")
    fail_vectors = vectors[:len(failures)]
    out: dict = {"slice_names": {}, "result": None, "context_ids": context["example_id"].tolist()}
    if sampled and by_mode:
        fitted, rate, resolved, note, out["modes"] = timed(timings, "cluster", cluster_modes.fit_mode_sample, inputs,
                                                           vectors, failures, params, n_fail)
    elif by_mode:
        result = out["result"] = timed(timings, "cluster", fit_modes, inputs, vectors, failures, params, None)
        fitted = cluster.Assigned(result.labels, result.membership, result.tier, result.reassigned,
                                  cluster_tier=result.cluster_tier)
        rate, resolved, note = result.local_error_rate, result.params, result.note
    elif sampled:
        fitted, rate, resolved = timed(timings, "cluster", model.fit_sample, vectors,
                                       np.arange(len(vectors)) < len(failures), failures, n_fail)
        note = cluster.sample_note(len(failures), n_fail, resolved)
    else:
        groups, out["slice_names"] = slice_groups(run, failures, True) if params.slice_groups else (None, {})
        result = out["result"] = timed(timings, "cluster", fit, model, vectors, len(failures), failures, groups, None)
        fitted = cluster.Assigned(result.labels, result.membership, result.tier, result.reassigned,
                                  cluster_tier=result.cluster_tier)
        rate, resolved, note = result.local_error_rate, result.params, result.note
    xy = timed(timings, "layout", layout, inputs, vectors, embed_rows, params, None)
    shards.write_file(vectors_file, files.npy_writer(fail_vectors, np.float32), digest=True)  # a shard on S3
    return {**out, "fitted": fitted, "rate": rate, "resolved": resolved, "note": note, "xy": xy,
            "d90": cluster.reference_distance(fail_vectors) if sampled and len(failures) else 0.0,
            "embedder": emb, "embedder_key": getattr(emb, "key", None), "n_embedded": len(embed_rows),
            "meta": embeddings_meta(emb, vectors, fail_vectors, failures), "timings": timings}


def _described(known: tuple, failures, result, vectors_file: str, slice_names: dict, params: ClusterParams,
               correct_texts: list, sizes: dict | None, n_fail: int):
    """On a worker: clusters.parquet's rows from the fit sample and its vectors (`describe_sample`; `known`: what
    the other stages committed about these failures, read by the driver)."""
    vectors = np.asarray(shards.load_npy(vectors_file)) if len(failures) else np.zeros((0, 0), np.float32)
    return describe_sample(known, failures, result, vectors, slice_names, params, correct_texts, sizes, n_fail)


def _numbered(engine, placement, totals: dict, fitted, rate, resolved: dict, note: str, params: ClusterParams,
              per_block: int, method: str):
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
    parents = {} if params.parent_similarity is None or method == "failure_modes" else cluster.parents_of(
        {mapping[c]: s for c, s in totals["sums"].items()}, sizes, min_similarity=params.parent_similarity)
    result = cluster.ClusteringResult(
        labels=labels, membership=fitted.strength, reassigned=fitted.reassigned, tier=fitted.tier,
        local_error_rate=rate, coordinates=None, method=method, note=note, params=resolved,
        cluster_tier={mapping[c]: t for c, t in fitted.cluster_tier.items() if c in mapping},
        cluster_parent=parents)
    return result, sizes


def _sample_on_blocks(path, engine, params: ClusterParams, columns: set, per_block: int, by_mode: bool = False):
    """Passes 1 and 2: (the fit sample's failures, the context's correct examples, the keywords' contrast
    examples, failures, rows), each frame in row order (the first two with `_row`, its position); the driver holds
    at most twice the sample at once. Strata: confusion pairs, or `by_mode` failure modes."""
    import pandas as pd

    from erroranalysis import cluster
    from erroranalysis.cluster import blockwise
    from erroranalysis.engines import blocks

    base = [c for c in ("example_id", "correct", "label", "pred", *(["failure_reason"] if by_mode else []))
            if c in columns]
    counted = [r for _, r in blocks.map_blocks(blockwise.block_strata, path, engine, columns=base,
                                               rows_per_block=per_block, kwargs={"by_mode": by_mode})]
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
                                     kwargs={"quotas": quotas, "seed": params.seed, "by_mode": by_mode}):
        sample = blockwise.merge_sample([p for p in (sample, part) if p is not None], quotas)
    sample = sample if sample is not None else pd.DataFrame(columns=[*base, "text", "_row", "_key"])
    is_fail = ~sample["correct"].to_numpy(dtype=bool)
    failures = sample[is_fail].drop(columns=["_key", "_stratum"], errors="ignore").reset_index(drop=True)
    correct = sample[~is_fail].drop(columns=["_stratum"], errors="ignore").reset_index(drop=True)
    context = correct.iloc[_smallest_rows(correct, n_context)].drop(columns=["_key"]).reset_index(drop=True)
    naming = correct.iloc[_smallest_rows(correct, cluster.MAX_CORRECT_DOCS)].drop(columns=["_row"])
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
    return sorted(readers.parquet_columns(path)) if shards.parts(path, ".parquet") else []
