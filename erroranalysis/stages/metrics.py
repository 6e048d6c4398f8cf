"""The metrics stage: metrics.json from predictions (and probabilities when the run has them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from erroranalysis import rundir
from erroranalysis.core.params import SEED, Int, Params, param, spec_field
from erroranalysis.metrics.generation import adjust_metrics, check_counts, merge_checks
from erroranalysis.rundir import Run, readers
from erroranalysis.sources import cells
from erroranalysis.stages.common import metadata_of


@dataclass(frozen=True)
class MetricsParams(Params):
    """The metrics stage: the bootstrap behind every 95% interval."""

    seed: int = spec_field(SEED)
    n_resamples: int = param(1000, Int(0, 100_000), "Bootstrap resamples for the 95% intervals (0: none).",
                             flag="--bootstrap")


def compute_run_metrics(run: Run, params: MetricsParams = MetricsParams(), engine=None, **overrides) -> dict:
    """The metrics stage: metrics.json from predictions (and probabilities when the run has them). A classification
    or generation run is counted block by block (`engines.blocks.map_blocks`, in this process or as Ray tasks under
    `engine`) and the partial counts merged here: the driver holds counts, never rows, and the result is the one
    `compute_metrics` gives over all rows at once."""
    params = params.replace(**overrides) if overrides else params
    if run.task not in ("token-classification", "multilabel", "regression"):  # these keep reading every row
        return block_metrics(run, params, engine)
    preds = readers.read_predictions(run)
    probs = readers.read_probs(run)
    listed = metadata_of(run, preds.columns)
    metadata_columns = [c for c in listed if cells.groupable(preds[c])]  # a run written before the cells rule
    with run.stage("metrics", params.record()) as staging:
        if run.task == "token-classification":
            result = token_metrics(run, preds)
        else:
            result = task_metrics(run, preds, probs, metadata_columns, params)
        staging.write_json(rundir.METRICS, result)
    return result


def block_metrics(run: Run, params: MetricsParams, engine=None) -> dict:
    """metrics.json of a classification or generation run from per-block counts (`metrics.partials`)."""
    from erroranalysis.engines import blocks
    from erroranalysis.metrics import partials

    path = readers.artifact_path(run, rundir.PREDICTIONS)
    schema = _schema(path)
    listed = metadata_of(run, schema.names)
    kinds = {c: kind for c in listed if (kind := metadata_kind(schema.field(c).type)) is not None}
    probs = readers.artifact_path(run, rundir.PROBS, required=False)
    if probs is not None:
        _check_probs_shape(probs, readers.n_predictions(run), len(run.labels))
    generation = run.task == "generation"
    columns = ["label", "pred", "text", *kinds, *(generation_columns(schema.names) if generation else ())]
    with run.stage("metrics", params.record()) as staging:
        merged, checks = None, None
        for _, (part, counted) in blocks.map_blocks(
                block_counts, path, engine, columns=list(dict.fromkeys(columns)),
                kwargs={"labels": list(run.labels), "kinds": kinds, "probs": None if probs is None else str(probs),
                        "generation": generation}):
            merged = part if merged is None else partials.merge(merged, part)  # counts: any order gives the same
            checks = counted if checks is None else merge_checks(checks, counted)
        result, set_aside = partials.finish(merged or partials.Partial(len(run.labels)), run.labels,
                                            n_resamples=params.n_resamples, seed=params.seed)
        aside = [c for c in listed if c not in kinds] + set_aside
        if aside:
            staging.facts["metadata_set_aside"] = aside
        if set_aside:
            staging.facts["metadata_set_aside_why"] = (f"more than {partials.MAX_DISTINCT:,} distinct values: "
                                                       f"{', '.join(set_aside)}")
        if generation:
            limit = (run.manifest.get("generation") or {}).get("max_new_tokens")  # None for outputs made elsewhere
            result = adjust_metrics(result, None, run.labels, max_new_tokens=limit, checks=checks)
        staging.write_json(rundir.METRICS, result)
    return result


def block_counts(table, block, *, labels: list[str], kinds: dict[str, str], probs: str | None, generation: bool):
    """One block's partial counts (run on a worker under Ray), and a generation run's `check_counts`: its rows read
    as `readers.read_predictions` reads them, its rows of probs.npy."""
    from erroranalysis.engines import blocks
    from erroranalysis.infer.output_checks import UNPARSEABLE
    from erroranalysis.metrics import partials

    frame = table.to_pandas()
    frame["text"], frame["label"] = frame["text"].fillna("").astype(str), frame["label"].astype(str)
    frame["pred"] = frame["pred"].fillna("").astype(str)
    part = partials.block_partial(frame["label"].to_numpy(), frame["pred"].to_numpy(), labels,
                                  probs=None if probs is None else blocks.read_npy_rows(probs, block),
                                  metadata=frame[list(kinds)] if kinds else None, texts=frame["text"].to_numpy(),
                                  kinds=kinds, offset=block.start)
    if not generation:
        return part, None
    frame["example_id"], frame["correct"] = frame["example_id"].astype(str), frame["correct"].astype(bool)
    return part, check_counts(frame, [label for label in labels if label != UNPARSEABLE], offset=block.start)


def metadata_kind(kind) -> str | None:
    """How a metadata column of this Arrow type is grouped (the `cells` rule, from the schema): LIST for a list of
    scalars, SCALAR for a scalar, None (set aside) for a struct, a map or a list of them."""
    import pyarrow as pa

    from erroranalysis.metrics.partials import LIST, SCALAR

    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return LIST if not pa.types.is_nested(kind.value_type) else None
    return None if pa.types.is_nested(kind) else SCALAR


def generation_columns(columns) -> list[str]:
    """What the output_checks section of a generation run reads: its checks, stop reasons, lengths, losses,
    reasons and exemplars."""
    from erroranalysis.metrics.generation import GROUP_COLUMNS

    wanted = {"example_id", "correct", "label", "pred", "output", "text", "stop_reason", "n_output_tokens", "failure_reason",
              "reference_loss", "output_loss", "low_loss_failure", *GROUP_COLUMNS}
    return [c for c in columns if c in wanted or c.startswith("check_")]


def _schema(path):
    import pyarrow.parquet as pq

    from erroranalysis.engines.blocks import files_of

    return pq.read_schema(files_of(path)[0])


def _check_probs_shape(path, n: int, k: int) -> None:
    """probs.npy has one row per prediction and one column per label (from the headers: nothing is loaded)."""
    from erroranalysis.core.errors import RunError

    parts = sorted(path.glob("part-*.npy")) if path.is_dir() else [path]
    shapes = [np.load(p, mmap_mode="r", allow_pickle=False).shape for p in parts]
    shape = (sum(s[0] for s in shapes), *(shapes[0][1:] if shapes else (k,)))
    if shape != (n, k):
        raise RunError(f"{path}: shape {shape}, expected {(n, k)} (predictions x labels); run the stage that "
                       "writes it again.")


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

