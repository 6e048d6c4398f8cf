"""The cluster stage's optional LLM names (`--namer URL`, `erroranalysis.cluster.llm_naming`): the answers cached in
the run (`cluster_names_llm.json`, by prompt), the names and summaries written over the keyword ones in
clusters.parquet, the keyword name kept in `keyword_name`, and what happened in the stage's facts."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from erroranalysis import rundir
from erroranalysis.cluster.llm_naming import NamerParams, llm_names


def named_by_llm(run, staging, clusters: pd.DataFrame, failures: pd.DataFrame, labels: np.ndarray,
                 params, *, client=None) -> pd.DataFrame:
    """`clusters` with the endpoint's names when `params.namer` is set (else as it is)."""
    namer = params.project(NamerParams) if isinstance(params, NamerParams) else NamerParams()
    if namer.namer is None or clusters.empty:
        return clusters
    named, cache, facts = llm_names(clusters, failures, np.asarray(labels), namer, _cache(run),
                                    seed=getattr(params, "seed", 0), client=client)
    clusters = clusters.copy()
    clusters["keyword_name"] = clusters["name"]
    for i, cluster_id in enumerate(clusters["cluster_id"].astype(int)):
        if cluster_id in named:
            clusters.loc[clusters.index[i], "name"] = named[cluster_id]["name"]
            clusters.loc[clusters.index[i], "summary"] = named[cluster_id]["summary"]
    staging.write_json(rundir.LLM_NAMES, {"model": facts["model"], "endpoint": namer.namer, "answers": cache})
    staging.facts["llm_names"] = {**facts, "named": len(named), "endpoint": namer.namer}
    return clusters


def _cache(run) -> dict:
    """The answers an earlier naming kept, by prompt key ({} when none or unreadable: they are asked again)."""
    try:
        return dict(json.loads(run.file(rundir.LLM_NAMES).read_text(encoding="utf-8")).get("answers") or {})
    except (OSError, ValueError, AttributeError):
        return {}
