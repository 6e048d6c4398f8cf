"""The metrics stage: metrics.json from predictions (and probabilities when the run has them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from erroranalysis import rundir
from erroranalysis.params import SEED, Int, Params, param, spec_field
from erroranalysis.rundir import Run, readers
from erroranalysis.stages.common import metadata_of


@dataclass(frozen=True)
class MetricsParams(Params):
    """The metrics stage: the bootstrap behind every 95% interval."""

    seed: int = spec_field(SEED)
    n_resamples: int = param(1000, Int(0, 100_000), "Bootstrap resamples for the 95% intervals (0: none).",
                             flag="--bootstrap")


def compute_run_metrics(run: Run, params: MetricsParams = MetricsParams(), **overrides) -> dict:
    """The metrics stage: metrics.json from predictions (and probabilities when the run has them)."""
    from erroranalysis.metrics import compute_metrics

    params = params.replace(**overrides) if overrides else params
    preds = readers.read_predictions(run)
    probs = readers.read_probs(run)
    metadata_columns = metadata_of(run, preds.columns)
    with run.stage("metrics", params.record()) as staging:
        result = compute_metrics(preds["label"].to_numpy(), preds["pred"].to_numpy(), run.labels,
                                 probs=None if probs is None else np.asarray(probs),
                                 metadata=preds[metadata_columns] if metadata_columns else None,
                                 texts=preds["text"].to_numpy(), seed=params.seed, n_resamples=params.n_resamples)
        if run.task == "generation":
            from erroranalysis.metrics.generation import adjust_metrics

            result = adjust_metrics(result, preds, run.labels)
        staging.write_json(rundir.METRICS, result)
    return result

