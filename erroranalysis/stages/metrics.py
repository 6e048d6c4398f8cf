"""The metrics stage: metrics.json from predictions (and probabilities when the run has them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from erroranalysis import rundir
from erroranalysis.core.params import SEED, Int, Params, param, spec_field
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
    if run.task == "token-classification":
        with run.stage("metrics", params.record()) as staging:
            result = token_metrics(run, preds)
            staging.write_json(rundir.METRICS, result)
        return result
    if run.task in ("multilabel", "regression"):
        with run.stage("metrics", params.record()) as staging:
            result = task_metrics(run, preds, probs, metadata_columns, params)
            staging.write_json(rundir.METRICS, result)
        return result
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



def gold_matrix(frame, column: str, labels: list[str]) -> np.ndarray:
    """A multi-label run's list column (gold_labels, pred_labels) as multi-hot [n, k] in `labels` order."""
    index = {name: j for j, name in enumerate(labels)}
    out = np.zeros((len(frame), len(labels)), dtype=np.int64)
    for row, names in enumerate(frame[column].to_numpy()):
        for name in names if names is not None else ():
            out[row, index[str(name)]] = 1
    return out


def task_metrics(run: Run, preds, probs, metadata_columns: list[str], params: MetricsParams) -> dict:
    """metrics.json of a multi-label or regression run, from its task's columns of predictions.parquet."""
    task_params = run.manifest.get("task_params") or {}
    metadata = preds[metadata_columns] if metadata_columns else None
    texts = preds["text"].to_numpy()
    if run.task == "multilabel":
        from erroranalysis.metrics.multilabel import compute_multilabel_metrics

        return compute_multilabel_metrics(gold_matrix(preds, "gold_labels", run.labels),
                                          gold_matrix(preds, "pred_labels", run.labels), run.labels,
                                          probs=None if probs is None else np.asarray(probs), metadata=metadata,
                                          texts=texts, thresholds=task_params.get("thresholds"), seed=params.seed,
                                          n_resamples=params.n_resamples)
    from erroranalysis.infer.predictions import bin_labels
    from erroranalysis.metrics.regression import compute_regression_metrics

    edges = task_params.get("edges")
    given = task_params.get("tolerance")
    decided = (run.manifest.get("stages", {}).get("infer") or {}).get("tolerance")  # the worst decile's bound
    tolerance = {"tolerance": given if given is not None else decided,
                 "relative": bool(task_params.get("relative_tolerance")),
                 "rule": "--tolerance" if given is not None else "worst decile of |error|"}
    return compute_regression_metrics(preds["target"].to_numpy(), preds["prediction"].to_numpy(),
                                      preds["correct"].to_numpy(), preds["label"].to_numpy(),
                                      preds["pred"].to_numpy(), bin_labels(edges) if edges else None,
                                      metadata=metadata, texts=texts, tolerance=tolerance, seed=params.seed,
                                      n_resamples=params.n_resamples)


def token_metrics(run: Run, preds) -> dict:
    """metrics.json of a token-classification run, from the tags in predictions.parquet and the kinds in
    spans.parquet (the scheme, types and span mode as the manifest records them)."""
    from erroranalysis.metrics.tokens import compute_token_metrics

    setup = run.manifest.get("tokens") or {}
    spans = readers.read_spans(run, columns=["kind", "gold_type", "pred_type"])
    kind_types = [g if isinstance(g, str) else p for g, p in zip(spans["gold_type"], spans["pred_type"])]
    return compute_token_metrics([list(t) for t in preds["gold_tags"]], [list(t) for t in preds["pred_tags"]],
                                 setup.get("scheme", "IOB2"), setup.get("types") or [],
                                 setup.get("span_mode", "default"), spans["kind"].tolist(), kind_types,
                                 preds["correct"].to_numpy())

