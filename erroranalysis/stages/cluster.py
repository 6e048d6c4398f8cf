"""The `cluster` stage over a run directory: embed failures, cluster them, name the clusters, lay out all examples.

`cluster_run(run_dir, ...)` checks every parameter and input before computing, computes everything before
writing, then writes embeddings.npy, embeddings.json, clusters.parquet and assignments.parquet (each atomically)
and records the `cluster` stage in the manifest. Bad input raises a one-line UserError and leaves the previous
clustering and the manifest untouched. `name_run` recomputes only clusters.parquet (names, keywords, exemplars)
from the stored assignments, without re-cluster.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from erroranalysis import rundir
from erroranalysis.errors import DataError, RunError, preview
from erroranalysis.validation import check_param

Progress = Callable[[str, int, int], None]  # (phase, done, total)
REQUIRED_COLUMNS = ("example_id", "text", "label", "pred", "correct")
INPUT_STAGES = ("infer", "load_predictions")


def _require_predictions(run: rundir.Run):
    statuses = {name: run.stage_status(name) for name in INPUT_STAGES}
    if "done" not in statuses.values():
        state = next((f"is {s}" for s in statuses.values() if s), "was not run")
        raise RunError(f"{run.path}: stage 'infer' {state}; create the run with 'erroranalysis run' or 'analyze' first.")
    predictions = run.predictions()
    file = run.file(rundir.PREDICTIONS)
    missing = [c for c in REQUIRED_COLUMNS if c not in predictions.columns]
    if missing:
        raise DataError(f"{file}: missing column(s) {preview(missing)}; re-run the stage that writes it.")
    ids = predictions["example_id"].astype(str)
    if ids.duplicated().any():
        raise DataError(f"{file}, column 'example_id': duplicate ids {preview(ids[ids.duplicated()].unique())}; "
                        "give every example its own id.")
    correct = predictions["correct"]
    if correct.isna().any():
        raise DataError(f"{file}, column 'correct': {int(correct.isna().sum())} missing values; re-run inference.")
    predictions = predictions.reset_index(drop=True)
    predictions["example_id"] = ids.to_numpy()
    predictions["correct"] = correct.astype(bool).to_numpy()
    predictions["text"] = predictions["text"].fillna("").astype(str)
    return predictions


def cluster_run(run_dir: str | Path, *, embedder="minilm", min_cluster_size: int | None = None, seed: int = 0,
                reducer="umap", n_components: int | None = None, n_neighbors: int = 15,
                min_samples: int | None = None, error_aware: bool = True, pair_weight: float = 0.0,
                assign_noise: float | None = 0.5, layout: str = "umap", max_fit: int = 20_000,
                min_failures: int = 20, slice_groups: bool = True, group_purity: float = 0.5,
                n_keywords: int = 8, n_exemplars: int = 5, cache: bool = True, batch_size: int = 32,
                clusterer=None, features: Sequence = (), progress: Progress | None = None) -> dict:
    """Cluster a run's failures; write embeddings.npy/.json, clusters.parquet, assignments.parquet.

    embedder: "minilm" (packaged sentence model, cached by text hash), "hidden" (the checkpoint's hidden
    states), a path to a .npy file, or an object with `key` and `embed(frame)`. reducer: "umap", "pca",
    "none" or a Reducer. layout: how the 2-D display coordinates of all examples are made ("umap", "pca",
    "none"). slice_groups: when the slices stage ran, a strong slice whose failures the embedding scattered over
    other clusters becomes a cluster of its own (kind "slice", named by the slice's definition). Other
    parameters: see `cluster.FailureClustering` and `cluster.describe_clusters`.
    Returns a summary dict (counts, noise share, method, note, cluster names).
    """
    from erroranalysis import cluster, embedding

    start = time.perf_counter()
    # -- parameters -------------------------------------------------------------------------------------------
    check_param("pair_weight", pair_weight, isinstance(pair_weight, (int, float)) and not isinstance(pair_weight, bool)
                and 0 <= pair_weight <= 10, "a number in [0, 10]")
    check_param("layout", layout, layout in cluster.REDUCERS, "one of " + ", ".join(cluster.REDUCERS))
    check_param("batch_size", batch_size, isinstance(batch_size, int) and batch_size >= 1, "an integer >= 1")
    check_param("n_keywords", n_keywords, isinstance(n_keywords, int) and 1 <= n_keywords <= 50, "an integer in [1, 50]")
    check_param("n_exemplars", n_exemplars, isinstance(n_exemplars, int) and 1 <= n_exemplars <= 50,
                "an integer in [1, 50]")
    blocks = list(features)
    if pair_weight > 0:
        blocks.append(cluster.ConfusionPairFeature(pair_weight))
    model = cluster.FailureClustering(
        reducer=reducer, n_components=n_components, n_neighbors=n_neighbors, min_cluster_size=min_cluster_size,
        min_samples=min_samples, clusterer=clusterer, features=blocks, error_aware=error_aware,
        assign_noise=assign_noise, group_purity=group_purity, min_failures=min_failures, max_fit=max_fit,
        seed=seed)
    model.validate()
    check_param("slice_groups", slice_groups, isinstance(slice_groups, bool), "true or false")

    # -- inputs -----------------------------------------------------------------------------------------------
    run = rundir.Run.open(run_dir)
    predictions = _require_predictions(run)
    emb = embedding.resolve_embedder(embedder, run, predictions, cache=cache, batch_size=batch_size)
    failed = ~predictions["correct"].to_numpy()
    fail_rows = np.flatnonzero(failed)
    rng = np.random.default_rng(seed)
    correct_rows = np.flatnonzero(~failed)
    want_context = len(fail_rows) > 0 and (error_aware or layout != "none")
    context_rows = correct_rows if want_context else correct_rows[:0]
    if len(context_rows) > max_fit:
        context_rows = np.sort(rng.choice(context_rows, max_fit, replace=False))
    if isinstance(emb, embedding.PrecomputedEmbedder):  # a file that names its rows may cover only the failures
        emb.rows_for(predictions.iloc[fail_rows])
        if emb.row_of is not None:
            context_rows = np.array([r for r in context_rows if predictions.at[r, "example_id"] in emb.row_of],
                                    dtype=np.int64)
    reducer_name = reducer if isinstance(reducer, str) else type(reducer).__name__
    params = {"embedder": str(embedder) if isinstance(embedder, (str, Path)) else getattr(emb, "key", "custom"),
              "min_cluster_size": min_cluster_size, "seed": seed, "reducer": reducer_name,
              "n_components": n_components, "n_neighbors": n_neighbors, "min_samples": min_samples,
              "error_aware": error_aware, "pair_weight": pair_weight, "assign_noise": assign_noise,
              "layout": layout, "max_fit": max_fit, "min_failures": min_failures, "slice_groups": slice_groups,
              "group_purity": group_purity, "n_keywords": n_keywords,
              "n_exemplars": n_exemplars, "features": [getattr(b, "name", type(b).__name__) for b in blocks]}

    # -- compute, then write ----------------------------------------------------------------------------------
    with run.stage("cluster", params) as extra:
        t = time.perf_counter()
        embed_rows = np.concatenate([fail_rows, context_rows])
        if len(embed_rows):
            frame = predictions.iloc[embed_rows]
            if progress:
                progress("embed", 0, len(embed_rows))
            vectors = np.asarray(emb.embed(frame, progress=_phase(progress, "embed")), dtype=np.float32)
            if progress:
                progress("embed", len(embed_rows), len(embed_rows))
            if vectors.ndim != 2 or len(vectors) != len(embed_rows):
                raise DataError(f"embedder {params['embedder']!r}: returned shape {vectors.shape} for "
                                f"{len(embed_rows)} texts; it must return one row per text.")
            if not np.isfinite(vectors).all():
                raise DataError(f"embedder {params['embedder']!r}: returned NaN or infinite values.")
        else:
            vectors = np.zeros((0, 0), dtype=np.float32)
        embed_seconds = time.perf_counter() - t
        n_fail = len(fail_rows)
        fail_vectors = vectors[:n_fail]
        failures = predictions.iloc[fail_rows].reset_index(drop=True)
        groups, slice_names = _slice_groups(run, failures) if slice_groups else (None, {})

        t = time.perf_counter()
        if progress:
            progress("cluster", 0, 1)
        is_fail = np.zeros(len(embed_rows), dtype=bool)
        is_fail[:n_fail] = True
        if n_fail:
            model.fit(vectors, is_fail, failures, groups=groups)
        else:
            model.fit(np.zeros((0, 2), np.float32), np.zeros(0, bool), failures)
        result = model.result_
        cluster_seconds = time.perf_counter() - t
        if progress:
            progress("cluster", 1, 1)

        t = time.perf_counter()
        titles = {c: slice_names[g] for c, g in result.cluster_group.items()}
        clusters = cluster.describe_clusters(
            failures, result.labels, membership=result.membership, vectors=fail_vectors,
            correct_texts=predictions["text"].to_numpy()[correct_rows].tolist(), kinds=result.cluster_tier,
            local_error_rate=result.local_error_rate, reassigned=result.reassigned, n_keywords=n_keywords,
            n_exemplars=n_exemplars, seed=seed, titles=titles)
        clusters = _with_slice(clusters, result.cluster_group, slice_names)
        name_seconds = time.perf_counter() - t

        t = time.perf_counter()
        if progress:
            progress("layout", 0, 1)
        xy = np.full((len(predictions), 2), np.nan, dtype=np.float32)
        if len(embed_rows) and layout != "none":
            xy[embed_rows] = cluster.layout_2d(vectors, method=layout, seed=seed, max_fit=min(max_fit, 5_000),
                                                  n_neighbors=n_neighbors)
        layout_seconds = time.perf_counter() - t
        if progress:
            progress("layout", 1, 1)

        clusters = with_other_stages(run, clusters, failures["example_id"].astype(str).to_numpy(), result.labels)
        assignments = _assignments(predictions, fail_rows, result, xy)
        meta = {
            "embedder": embedding.describe(emb),
            "dim": int(fail_vectors.shape[1]) if n_fail else int(vectors.shape[1]) if vectors.ndim == 2 else 0,
            "rows": n_fail,
            "example_ids": failures["example_id"].tolist(),
            "created": rundir.now_iso(),
        }
        rundir.write_npy(run.file(rundir.EMBEDDINGS), np.ascontiguousarray(fail_vectors, dtype=np.float32))
        rundir.write_json(run.file(rundir.EMBEDDINGS_META), meta)
        rundir.write_parquet(run.file(rundir.CLUSTERS), clusters)
        rundir.write_parquet(run.file(rundir.ASSIGNMENTS), assignments)

        summary = {
            "run": str(run.path),
            "n_examples": int(len(predictions)),
            "n_failures": int(n_fail),
            "n_clusters": int(result.n_clusters),
            "noise_share": round(result.noise_share, 4),
            "method": result.method,
            "note": result.note,
            "embedder": meta["embedder"]["name"],
            "min_cluster_size": int(result.params.get("min_cluster_size", 0)),
            "clusters": [{"cluster_id": int(r.cluster_id), "size": int(r.size), "name": str(r.name), "kind": str(r.kind)}
                         for r in clusters.itertuples()],
        }
        extra.update({
            "n_failures": summary["n_failures"], "n_clusters": summary["n_clusters"],
            "noise_share": summary["noise_share"], "method": result.method, "note": result.note,
            "resolved": {k: v for k, v in result.params.items() if k != "n_failures"},
            "embedder_key": getattr(emb, "key", None), "n_embedded": int(len(embed_rows)),
            "timings": {"embed": round(embed_seconds, 3), "cluster": round(cluster_seconds, 3),
                        "name": round(name_seconds, 3), "layout": round(layout_seconds, 3)},
        })
    summary["seconds"] = round(time.perf_counter() - start, 3)
    return summary


def _read_slices(run: rundir.Run, columns=("slice_id", "description")):
    """(slices, members with string example ids) when the slices stage is done, else (None, None); slices.parquet
    must have `columns`."""
    if run.stage_status("slices") != "done" or not (run.has(rundir.SLICES) and run.has(rundir.SLICE_MEMBERS)):
        return None, None
    slices = run.read_parquet(rundir.SLICES, "slices")
    members = run.read_parquet(rundir.SLICE_MEMBERS, "slices")
    for name, frame, needed in ((rundir.SLICES, slices, columns),
                                (rundir.SLICE_MEMBERS, members, ("example_id", "slice_id"))):
        missing = [c for c in needed if c not in frame.columns]
        if missing:
            raise DataError(f"{run.file(name)}: missing column(s) {preview(missing)}; re-run 'erroranalysis slices "
                            f"{run.path}', or cluster with --no-slice-groups.")
    return slices, members.astype({"example_id": str})


def _slice_groups(run: rundir.Run, failures):
    """Each failure's strong slice for the clustering (-1 none) and {slice_id: description}; (None, {}) when the
    slices stage has not run."""
    slices, members = _read_slices(run, ("slice_id", "description", "lift", "p_value", "score"))
    if slices is None:
        return None, {}
    from erroranalysis.slices import slice_groups

    ids = failures["example_id"].astype(str).tolist()
    best = slice_groups(slices, members, example_ids=ids)
    groups = np.array([best.get(i, -1) for i in ids], dtype=np.int64)
    return groups, dict(zip(slices["slice_id"].astype(int), slices["description"].astype(str)))


def _with_slice(clusters, cluster_group: dict, slice_names: dict):
    """`slice_id` and `slice` (its definition) for clusters taken out as a slice group; null elsewhere."""
    import pandas as pd

    clusters = clusters.copy()
    sid = [cluster_group.get(int(c)) for c in clusters["cluster_id"]]
    clusters["slice_id"] = pd.array(sid, dtype="Int64")
    clusters["slice"] = pd.array([slice_names.get(s) if s is not None else None for s in sid], dtype="string")
    return clusters


SLICE_OVERLAP = 0.5  # a cluster "overlaps" a slice when at least this share of its failures is in the slice
MISLABELED = 0.5  # ...and is "probably mislabeled" when this share of its failures are suspected label issues


def with_other_stages(run: rundir.Run, clusters, failure_ids: np.ndarray, labels: np.ndarray):
    """Add what the slices and checks stages know about each cluster, when those stages ran:
    `slices` (descriptions of the slices holding most of its failures, with that share) and
    `label_issue_share` (share of its failures whose gold label is probably wrong) with `probably_mislabeled`."""
    import pandas as pd

    clusters = clusters.copy()
    members = {int(c): set(failure_ids[labels == c]) for c in clusters["cluster_id"]}
    slices, in_slice = _read_slices(run)
    if slices is not None:
        by_slice = {sid: set(ids) for sid, ids in in_slice.groupby("slice_id")["example_id"]}
        names = dict(zip(slices["slice_id"], slices["description"]))
        clusters["slices"] = [
            [f"{names[sid]} ({share:.0%})" for share, sid in sorted(
                ((len(ids & by_slice.get(sid, set())) / max(len(ids), 1), sid) for sid in names), reverse=True)
             if share >= SLICE_OVERLAP]
            for ids in (members[int(c)] for c in clusters["cluster_id"])]
    if run.stage_status("checks") == "done":
        from erroranalysis.stages.checks import CHECKS, label_issue_share, read_checks

        if run.has(CHECKS):
            checks = read_checks(run)
            shares = [label_issue_share(checks, sorted(members[int(c)])) for c in clusters["cluster_id"]]
            clusters["label_issue_share"] = pd.array(shares, dtype="Float64")
            clusters["probably_mislabeled"] = clusters["label_issue_share"].fillna(0) >= MISLABELED
    return clusters


def _phase(progress: Progress | None, name: str):
    if progress is None:
        return None
    return lambda done, total: progress(name, done, total)


def _assignments(predictions, fail_rows: np.ndarray, result, xy: np.ndarray):
    import pandas as pd

    n = len(predictions)
    cluster_id = np.full(n, -1, dtype=np.int32)
    membership = np.zeros(n, dtype=np.float32)
    reassigned = np.zeros(n, dtype=bool)
    tier = np.full(n, "", dtype=object)
    rate = np.full(n, np.nan, dtype=np.float32)
    cluster_id[fail_rows] = result.labels
    membership[fail_rows] = result.membership
    reassigned[fail_rows] = result.reassigned
    tier[fail_rows] = result.tier.astype(str)
    rate[fail_rows] = result.local_error_rate
    failure = np.zeros(n, dtype=bool)
    failure[fail_rows] = True
    return pd.DataFrame({
        "example_id": predictions["example_id"].astype(str).to_numpy(),
        "cluster_id": cluster_id,
        "failure": failure,
        "membership": membership,
        "reassigned": reassigned,
        "tier": pd.array(tier, dtype="string") if n else pd.array([], dtype="string"),
        "local_error_rate": rate,
        "x": xy[:, 0].astype(np.float32),
        "y": xy[:, 1].astype(np.float32),
    })


def name_run(run_dir: str | Path, *, n_keywords: int = 8, n_exemplars: int = 5, seed: int = 0) -> dict:
    """Rewrite clusters.parquet (names, keywords, exemplars, diagnostics) from the stored cluster."""
    import json

    from erroranalysis import cluster

    check_param("n_keywords", n_keywords, isinstance(n_keywords, int) and 1 <= n_keywords <= 50, "an integer in [1, 50]")
    check_param("n_exemplars", n_exemplars, isinstance(n_exemplars, int) and 1 <= n_exemplars <= 50,
                "an integer in [1, 50]")
    run = rundir.Run.open(run_dir)
    run.require("cluster", f"run 'erroranalysis cluster {run.path}' first")
    predictions = _require_predictions(run)
    assignments = run.read_parquet(rundir.ASSIGNMENTS, "cluster")
    file = run.file(rundir.ASSIGNMENTS)
    if len(assignments) != len(predictions) or not (
            assignments["example_id"].astype(str).to_numpy() == predictions["example_id"].to_numpy()).all():
        raise RunError(f"{file}: does not match {rundir.PREDICTIONS} row for row; re-run 'erroranalysis cluster'.")
    fail = assignments["failure"].to_numpy(dtype=bool)
    failures = predictions[fail].reset_index(drop=True)
    vectors = None
    if run.has(rundir.EMBEDDINGS) and run.has(rundir.EMBEDDINGS_META):
        try:
            meta = json.loads(run.file(rundir.EMBEDDINGS_META).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RunError(f"{run.file(rundir.EMBEDDINGS_META)}: unreadable ({exc}); re-run 'erroranalysis cluster'.") from None
        stored = np.load(run.file(rundir.EMBEDDINGS))
        if meta.get("example_ids") == failures["example_id"].tolist() and len(stored) == len(failures):
            vectors = stored
    part = assignments[fail]
    tiers = part["tier"].astype(str).to_numpy()
    labels = part["cluster_id"].to_numpy(dtype=np.int64)
    kinds = {}
    for c in np.unique(labels[labels >= 0]):
        values, counts = np.unique(tiers[labels == c], return_counts=True)
        kinds[int(c)] = str(values[counts.argmax()])
    cluster_group, slice_names = _stored_slices(run)
    with run.stage("cluster_names", {"n_keywords": n_keywords, "n_exemplars": n_exemplars}):
        clusters = cluster.describe_clusters(
            failures, labels, membership=part["membership"].to_numpy(), vectors=vectors,
            correct_texts=predictions.loc[predictions["correct"], "text"].tolist(), kinds=kinds,
            local_error_rate=part["local_error_rate"].to_numpy(dtype=np.float32),
            reassigned=part["reassigned"].to_numpy(dtype=bool), n_keywords=n_keywords, n_exemplars=n_exemplars,
            seed=seed, titles={c: slice_names[g] for c, g in cluster_group.items()})
        clusters = _with_slice(clusters, cluster_group, slice_names)
        clusters = with_other_stages(run, clusters, failures["example_id"].astype(str).to_numpy(), labels)
        rundir.write_parquet(run.file(rundir.CLUSTERS), clusters)
    return {"run": str(run.path), "n_clusters": int(len(clusters)),
            "clusters": [{"cluster_id": int(r.cluster_id), "size": int(r.size), "name": str(r.name), "kind": str(r.kind)}
                         for r in clusters.itertuples()]}


def _stored_slices(run: rundir.Run) -> tuple[dict, dict]:
    """The slice clusters of the stored clustering: ({cluster_id: slice_id}, {slice_id: definition}); empty for
    a clustering made before slice clusters existed, or a clusters.parquet that cannot be read (it is rewritten)."""
    if not run.has(rundir.CLUSTERS):
        return {}, {}
    try:
        old = run.read_parquet(rundir.CLUSTERS, "cluster")
    except RunError:
        return {}, {}
    if not {"slice_id", "slice"} <= set(old.columns):
        return {}, {}
    old = old[old["slice_id"].notna()]
    return (dict(zip(old["cluster_id"].astype(int), old["slice_id"].astype(int))),
            dict(zip(old["slice_id"].astype(int), old["slice"].astype(str))))
