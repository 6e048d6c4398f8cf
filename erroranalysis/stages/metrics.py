"""The metrics stage: metrics.json from predictions (and probabilities when the run has them)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from erroranalysis import rundir
from erroranalysis.core import shards
from erroranalysis.core.errors import DataError
from erroranalysis.core.params import SEED, Int, Params, param, spec_field
from erroranalysis.metrics.generation import adjust_metrics, check_counts, merge_checks
from erroranalysis.metrics.partials import MAX_DISTINCT
from erroranalysis.rundir import Run, readers
from erroranalysis.stages import inputs
from erroranalysis.stages.common import metadata_of


@dataclass(frozen=True)
class MetricsParams(Params):
    """The metrics stage: the bootstrap behind every 95% interval."""

    seed: int = spec_field(SEED)
    n_resamples: int = param(1000, Int(0, 100_000), "Bootstrap resamples for the 95% intervals (0: none).",
                             flag="--bootstrap")


def compute_run_metrics(run: Run, params: MetricsParams = MetricsParams(), engine=None, **overrides) -> dict:
    """The metrics stage: metrics.json from predictions (and probabilities when the run has them), counted block by
    block (`engines.blocks.map_blocks`, in this process or as Ray tasks under `engine`) and the partial counts
    merged here: the driver holds counts, never rows, and the result is the one the task's `compute_*_metrics`
    gives over all rows at once."""
    params = params.replace(**overrides) if overrides else params
    if run.task == "token-classification":
        return token_block_metrics(run, params, engine)
    if run.task in ("multilabel", "regression"):
        return task_block_metrics(run, params, engine)
    return block_metrics(run, params, engine)


def block_metrics(run: Run, params: MetricsParams, engine=None) -> dict:
    """metrics.json of a classification or generation run from per-block counts (`metrics.partials`)."""
    from erroranalysis.engines import blocks
    from erroranalysis.metrics import partials

    path = _predictions(run, engine)
    schema = _schema(path)
    listed = metadata_of(run, schema.names)
    kinds = {c: kind for c in listed if (kind := metadata_kind(schema.field(c).type)) is not None}
    probs = readers.shared_path(run, rundir.PROBS, required=False)
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
        _say_set_aside(staging, [c for c in listed if c not in kinds] + set_aside, set_aside)
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
    return shards.open_parquet(shards.parts(path, ".parquet")[0]).schema_arrow


def _check_probs_shape(path, n: int, k: int) -> None:
    """probs.npy has one row per prediction and one column per label (from the headers: nothing is loaded)."""
    from erroranalysis.core.errors import RunError

    shapes = [shards.npy_shape(p) for p in shards.parts(path, ".npy")]
    shape = (sum(s[0] for s in shapes), *(shapes[0][1:] if shapes else (k,)))
    if shape != (n, k):
        raise RunError(f"{path}: shape {shape}, expected {(n, k)} (predictions x labels); run the stage that "
                       "writes it again.")


def gold_matrix(frame, column: str, labels: list[str], offset: int = 0) -> np.ndarray:
    """A multi-label run's list column (gold_labels, pred_labels) as multi-hot [n, k] in `labels` order (rows
    `offset`.. of the run: a name outside the labels is a one-line error naming its row)."""
    from erroranalysis.core.errors import preview

    index = {name: j for j, name in enumerate(labels)}
    out = np.zeros((len(frame), len(labels)), dtype=np.int64)
    for row, names in enumerate(frame[column].to_numpy()):
        for name in names if names is not None else ():
            if str(name) not in index:
                raise DataError(f"{column} row {offset + row} holds {str(name)!r}, not one of the run's labels "
                                f"({preview(labels)}); fix the predictions or the run's labels.")
            out[row, index[str(name)]] = 1
    return out


MAX_METADATA_VALUES = 20  # the buckets of a metadata column, as compute_*_metrics' default


def task_block_metrics(run: Run, params: MetricsParams, engine=None) -> dict:
    """metrics.json of a multi-label or regression run in two passes over the blocks (`metrics.task_partials`):
    counts and each metadata column's values, then the rows' sums per bucket. What needs every row's value in
    order (Spearman, residual quantiles and bootstrap of a regression run, ROC-AUC and average precision of a
    multi-label one) is computed from those numeric columns alone, on one worker under Ray."""
    from erroranalysis.engines import blocks
    from erroranalysis.metrics import multilabel as ml
    from erroranalysis.metrics import task_partials as tp

    path = _predictions(run, engine)
    schema = _schema(path)
    listed = metadata_of(run, schema.names)
    kinds = {c: kind for c in listed if (kind := metadata_kind(schema.field(c).type)) is not None}
    probs = readers.shared_path(run, rundir.PROBS, required=False) if run.task == "multilabel" else None
    if probs is not None:
        _check_probs_shape(probs, readers.n_predictions(run), len(run.labels))
    task_params = run.manifest.get("task_params") or {}
    edges = task_params.get("edges")
    own = (["gold_labels", "pred_labels"] if run.task == "multilabel"
           else ["target", "prediction", "correct", *(["label", "pred"] if edges else [])])
    kwargs = {"task": run.task, "labels": list(run.labels), "kinds": kinds,
              "probs": None if probs is None else str(probs), "edges": edges}
    columns = list(dict.fromkeys([*own, "text", *kinds]))
    with run.stage("metrics", params.record()) as staging:
        first, rules, set_aside, sums = _two_passes(path, engine, columns, kwargs)
        by_metadata = tp.finish_by_metadata(rules, sums, tp.multilabel_describe(len(run.labels))
                                            if run.task == "multilabel" else tp.regression_describe)
        if run.task == "multilabel":
            ranking = None if probs is None else blocks.call_on_worker(
                multilabel_ranking, engine, path=str(path), probs=str(probs), labels=list(run.labels))
            result = ml.finish_multilabel(first, list(run.labels), by_metadata, ranking=ranking,
                                          thresholds=task_params.get("thresholds"), n_resamples=params.n_resamples,
                                          seed=params.seed)
        else:
            from erroranalysis.infer.predictions import bin_labels
            from erroranalysis.metrics.regression import regression_result

            order = blocks.call_on_worker(regression_order_stats, engine, path=str(path),
                                          n_resamples=params.n_resamples, seed=params.seed)
            views = tp.finish_regression_bins(first["bins"], bin_labels(edges)) if first["bins"] else None
            result = regression_result(first["n"], first["failures"], order, views, by_metadata,
                                       tolerance=_tolerance(run, task_params), n_resamples=params.n_resamples,
                                       seed=params.seed)
        _say_set_aside(staging, [c for c in listed if c not in kinds] + set_aside, set_aside)
        staging.write_json(rundir.METRICS, result)
    return result


def _two_passes(path, engine, columns: list[str], kwargs: dict):
    """(pass 1's merged counts, the metadata buckets, the columns set aside, pass 2's merged sums per bucket)."""
    from erroranalysis.engines import blocks
    from erroranalysis.metrics import task_partials as tp

    first = None
    for _, part in blocks.map_blocks(task_first, path, engine, columns=columns, kwargs=kwargs):
        first = tp.merge(first, part)  # counts and exact sums: any order gives the same
    if first is None:
        raise DataError(f"{path}: no predictions; metrics need at least one example.")
    rules, set_aside = tp.bucket_rules(first.pop("values"), MAX_METADATA_VALUES)
    sums = None
    if rules:
        for _, part in blocks.map_blocks(task_second, path, engine, columns=columns, kwargs={**kwargs, "rules": rules}):
            sums = tp.merge(sums, part)
    return first, rules, set_aside, sums


def _predictions(run: Run, engine):
    """predictions.parquet's path for `engine`'s workers (`inputs.for_workers`), its missing ids and `correct` values
    refused first with `readers.read_predictions`' one-line error, counted from the footers (the blocks would read a
    missing `correct` as False)."""
    from erroranalysis.engines import blocks

    path = inputs.for_workers(run, rundir.PREDICTIONS, engine)
    readers.check_missing(path, blocks.null_counts(path, ["example_id", "correct"]))
    return path


def _say_set_aside(staging, aside: list[str], too_many: list[str]) -> None:
    """Name the metadata columns left out of by_metadata in the stage's record, and why."""
    if aside:
        staging.facts["metadata_set_aside"] = aside
    if too_many:
        staging.facts["metadata_set_aside_why"] = (f"more than {MAX_DISTINCT:,} distinct values: "
                                                   f"{', '.join(too_many)}")


def _tolerance(run: Run, task_params: dict) -> dict:
    """How a regression run's failures were decided, as metrics.json records it."""
    given = task_params.get("tolerance")
    decided = (run.manifest.get("stages", {}).get("infer") or {}).get("tolerance")  # the worst decile's bound
    return {"tolerance": given if given is not None else decided,
            "relative": bool(task_params.get("relative_tolerance")),
            "rule": "--tolerance" if given is not None else "worst decile of |error|"}


def _task_frame(table, block, task: str, labels: list[str], probs: str | None):
    """A block's rows as `readers.read_predictions` reads them, with its task's arrays."""
    from erroranalysis.engines import blocks

    frame = table.to_pandas()
    frame["text"] = frame["text"].fillna("").astype(str)
    if task == "multilabel":
        p = None if probs is None else np.asarray(blocks.read_npy_rows(probs, block), dtype=np.float64)
        return frame, (gold_matrix(frame, "gold_labels", labels, block.start),
                       gold_matrix(frame, "pred_labels", labels, block.start), p)
    t, p = frame["target"].to_numpy(dtype=np.float64), frame["prediction"].to_numpy(dtype=np.float64)
    return frame, (t, p, frame["correct"].to_numpy(dtype=bool))


def task_first(table, block, *, task: str, labels: list[str], kinds: dict, probs: str | None, edges):
    """Pass 1 of a multi-label or regression block (run on a worker under Ray): `task_partials`' counts."""
    from erroranalysis.infer.predictions import bin_labels
    from erroranalysis.metrics import multilabel as ml
    from erroranalysis.metrics import task_partials as tp

    frame, arrays = _task_frame(table, block, task, labels, probs)
    values = tp.metadata_values(frame[list(kinds)] if kinds else None, frame["text"].to_numpy(), kinds, block.start)
    if task == "multilabel":
        return ml.multilabel_first(*arrays, 15, values, offset=block.start)
    bins = bin_labels(edges) if edges else []
    return tp.regression_first(*arrays, frame["label"].to_numpy() if edges else None,
                               frame["pred"].to_numpy() if edges else None, bins, values, offset=block.start)


def task_second(table, block, *, task: str, labels: list[str], kinds: dict, probs: str | None, edges, rules: dict):
    """Pass 2 of a multi-label or regression block: per metadata bucket the sums of its rows' statistics."""
    from erroranalysis.metrics import task_partials as tp

    frame, arrays = _task_frame(table, block, task, labels, None)
    if task == "multilabel":
        ints, floats = tp.multilabel_row_stats(*arrays[:2]), np.zeros((len(frame), 0))
    else:
        ints, floats = tp.regression_row_stats(*arrays)
    return tp.metadata_sums(frame[list(kinds)] if kinds else None, frame["text"].to_numpy(), kinds, rules,
                            ints, floats)


def _whole_columns(path: str, columns: list[str]):
    return shards.dataset(path).to_table(columns=columns).to_pandas()


def regression_order_stats(path: str, n_resamples: int, seed: int) -> dict:
    """`regression.order_stats` from the target and prediction columns alone (16 bytes a row; a worker's under
    Ray): what needs every row's value in order."""
    from erroranalysis.metrics.regression import order_stats

    frame = _whole_columns(path, ["target", "prediction"])
    return order_stats(frame["target"].to_numpy(dtype=np.float64), frame["prediction"].to_numpy(dtype=np.float64),
                       n_resamples, seed)


def multilabel_ranking(path: str, probs: str, labels: list[str]) -> list[dict]:
    """Each label's ROC-AUC and average precision (`multilabel.ranking`) from the gold lists and the sigmoids alone
    (a worker's under Ray)."""
    from erroranalysis.engines import blocks
    from erroranalysis.metrics.multilabel import ranking

    t = gold_matrix(_whole_columns(path, ["gold_labels"]), "gold_labels", labels)
    scores = np.concatenate([np.asarray(blocks.read_npy_rows(probs, b), dtype=np.float64)
                             for b in blocks.plan(path)])
    return [ranking(t[:, j], scores[:, j]) for j in range(len(labels))]


def token_block_metrics(run: Run, params: MetricsParams, engine=None) -> dict:
    """metrics.json of a token-classification run from per-block counts of the tags in predictions.parquet and of
    the (type, kind) of each span in spans.parquet (the scheme, types and span mode as the manifest records them)."""
    from erroranalysis.engines import blocks
    from erroranalysis.metrics import tokens

    setup = run.manifest.get("tokens") or {}
    scheme, types = setup.get("scheme", "IOB2"), setup.get("types") or []
    path = _predictions(run, engine)
    with run.stage("metrics", params.record()) as staging:
        counts, kinds = None, Counter()
        for _, part in blocks.map_blocks(token_counts, path, engine,
                                         columns=["gold_tags", "pred_tags", "correct"],
                                         kwargs={"scheme": scheme, "types": types}):
            counts = part if counts is None else tokens.add_counts(counts, part)
        for _, part in blocks.map_blocks(span_kind_counts, readers.shared_path(run, rundir.SPANS), engine,
                                         columns=["kind", "gold_type", "pred_type"]):
            kinds += part
        empty = tokens.sentence_counts([], [], scheme, types, [])
        result = tokens.token_metrics_from_counts(counts or empty, kinds, scheme, types,
                                                  setup.get("span_mode", "default"))
        staging.write_json(rundir.METRICS, result)
    return result


def token_counts(table, block, *, scheme: str, types: list[str]) -> dict:
    """A block's `tokens.sentence_counts` (run on a worker under Ray)."""
    from erroranalysis.metrics.tokens import sentence_counts

    frame = table.to_pandas()
    return sentence_counts([list(t) for t in frame["gold_tags"]], [list(t) for t in frame["pred_tags"]], scheme,
                           types, frame["correct"].to_numpy())


def span_kind_counts(table, block) -> Counter:
    """How many spans of a block of spans.parquet have each (type, kind), the type gold's where it has one."""
    frame = table.to_pandas()
    kind_types = [g if isinstance(g, str) else p for g, p in zip(frame["gold_type"], frame["pred_type"])]
    return Counter(zip(kind_types, frame["kind"].tolist()))
