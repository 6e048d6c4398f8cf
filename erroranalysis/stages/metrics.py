"""The metrics stage: metrics.json from predictions (and probabilities when the run has them).
"""

from __future__ import annotations

import numpy as np

from erroranalysis import rundir
from erroranalysis.rundir import Run


def compute_run_metrics(run: Run, *, seed: int = 0, n_resamples: int = 1000) -> dict:
    """The metrics stage: metrics.json from predictions (and probabilities when the run has them)."""
    from erroranalysis.metrics import compute_metrics

    preds = run.predictions()
    probs = run.probs()
    metadata_columns = run.manifest.get("data", {}).get("metadata_columns")
    if metadata_columns is None:
        metadata_columns = [c for c in preds.columns if c not in rundir.CORE_COLUMNS]
    params = {"seed": seed, "n_resamples": n_resamples}
    with run.stage("metrics", params):
        result = compute_metrics(preds["label"].to_numpy(), preds["pred"].to_numpy(), run.labels,
                                 probs=None if probs is None else np.asarray(probs),
                                 metadata=preds[metadata_columns] if metadata_columns else None,
                                 texts=preds["text"].to_numpy(), seed=seed, n_resamples=n_resamples)
        if run.task == "generation":
            from erroranalysis.metrics.generation import adjust_metrics

            result = adjust_metrics(result, preds, run.labels)
        rundir.write_json(run.file(rundir.METRICS), result)
    return result
