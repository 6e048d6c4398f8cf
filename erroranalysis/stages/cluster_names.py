"""`name_run` (stage `cluster_names`): rewrite clusters.parquet (names, keywords, exemplars) from the stored
clustering, without re-clustering."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from erroranalysis import rundir
from erroranalysis.cluster import NamingParams
from erroranalysis.cluster.llm_naming import NamerParams
from erroranalysis.core.errors import RunError
from erroranalysis.rundir import readers
from erroranalysis.stages.cluster_parts import other_stages, sampled_rows, topic_texts, with_other_stages, with_slice
from erroranalysis.stages.llm_names import named_by_llm


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
            correct_texts=topic_texts(predictions)[sampled_rows(
                predictions, np.flatnonzero(predictions["correct"].to_numpy()), cluster.MAX_CORRECT_DOCS,
                params.seed)].tolist(),
            kinds=_stored_kinds(part, labels),
            local_error_rate=part["local_error_rate"].to_numpy(dtype=np.float32),
            reassigned=part["reassigned"].to_numpy(dtype=bool), naming=params, titles={c: slice_names[g] for c, g in cluster_group.items()}, parents=parents)
        clusters = with_slice(clusters, cluster_group, slice_names)
        clusters = with_other_stages(other_stages(run, failures["example_id"].to_numpy()), clusters,
                                     failures["example_id"].to_numpy(), labels)
        clusters = named_by_llm(run, staging, clusters, failures, labels, namer)
        staging.write_parquet(rundir.CLUSTERS, clusters)
    return {"run": str(run.path), "n_clusters": int(len(clusters)),
            "clusters": [{"cluster_id": int(r.cluster_id), "size": int(r.size), "name": str(r.name), "kind": str(r.kind)}
                         for r in clusters.itertuples()]}


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
