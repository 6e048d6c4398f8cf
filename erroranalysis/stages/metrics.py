"""The metrics stage: metrics.json from predictions (and probabilities when the run has them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from erroranalysis import rundir
from erroranalysis.rundir import Run, readers
from erroranalysis.stages.common import metadata_of
from erroranalysis.validation import Params, check_int


@dataclass(frozen=True)
class MetricsParams(Params):
    """`--seed` and `--bootstrap` (resamples for the 95% intervals; 0 turns them off)."""

    seed: int = 0
    n_resamples: int = 1000

    def validate(self) -> None:
        check_int("seed", self.seed, 0)
        check_int("n_resamples", self.n_resamples, 0, 100_000)


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

