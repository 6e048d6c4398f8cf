"""`erroranalysis analyze --task multilabel|regression`: multi-label or regression predictions made elsewhere, read
into the run layout `erroranalysis run` writes for those heads (erroranalysis.infer.predictions), so every later
stage and the app treat them alike.

- multi-label: the gold as `run` takes it (a list per example, `--label-sep`, or `--label-per-column`), the
  predictions in the `--pred-column` the same way (a list or a delimited string), or, without one, the labels whose
  `prob_<label>` column reaches `--threshold`; the labels are the prob_ columns' names, else every name seen;
- regression: the gold value in the label column, the predicted value in `--pred-column`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from erroranalysis import rundir
from erroranalysis.core.errors import DataError, where
from erroranalysis.infer import predictions as rows
from erroranalysis.rundir import Run, create_run
from erroranalysis.sources import cells
from erroranalysis.sources import gold as golds
from erroranalysis.sources.table import DataOptions, as_source, load_eval_set, read_table
from erroranalysis.stages.after import AfterParams, after_predictions
from erroranalysis.stages.analyze import OutputParams, Reading
from erroranalysis.stages.common import data_entry, say_notes
from erroranalysis.stages.load_predictions import output_columns, probability_columns
from erroranalysis.tasks import Task, TaskParams

PROB_PREFIX = "prob_"


def analyze_task_predictions(file: str | Path, out: str | Path, reading: Reading, *, task: Task,
                             after: AfterParams = AfterParams(), overwrite: bool = False, embedder=None,
                             progress=None, engine=None) -> Run:
    """A run of multi-label or regression predictions made elsewhere (see the module's docstring)."""
    data_opts, task_opts, outputs = reading.data, reading.task, reading.output
    pred_column, task = reading.pred_column_of(task), task.name
    eval_set, table, probs, labels, reading = read_task_predictions(file, task, data_opts, task_opts, pred_column,
                                                                    outputs)
    say_notes(eval_set, progress)
    if engine is not None and engine.distributed:
        from erroranalysis.engines import ray_data

        ray_data.connect(engine)
    task_params = {k: v for k, v in task_opts.record().items()
                   if k in (("threshold", "label_sep", "label_per_column") if task == "multilabel"
                            else ("tolerance", "relative_tolerance"))}
    task_params.update({k: v for k, v in reading.record().items() if v is not None and k not in task_params})
    manifest = {"task": task, "labels": labels, "seed": after.seed, "task_params": task_params,
                "data": {**data_entry(eval_set), "pred_column": pred_column}}
    with create_run(out, overwrite=overwrite, **manifest) as run:
        record = {"pred_column": pred_column, "probabilities": probs is not None}
        with run.stage("load_predictions", record) as staging:
            if task == "regression" and reading.tolerance is None:
                correct, staging.facts["tolerance"] = rows.worst_decile(table.column("abs_error").to_numpy())
                import pyarrow as pa

                table = table.set_column(table.column_names.index("correct"), "correct", pa.array(correct))
            staging.write_parquet(rundir.PREDICTIONS, table.to_pandas(), engine)  # where the workers read them
            if probs is not None:
                staging.write_npy(rundir.PROBS, probs.astype(np.float32), engine)
        after_predictions(run, after, embedder=embedder, progress=progress, engine=engine)
    return run


def read_task_predictions(file, task: str, data_opts: DataOptions, opts: TaskParams, pred_column: str,
                          outputs: OutputParams = OutputParams()):
    """(eval set, predictions table, probs or None, labels, reading), everything checked; nothing written."""
    source = as_source(file)
    raw = read_table(source, encoding=data_opts.encoding, split=data_opts.split)
    columns = [c for c in raw[0].columns if c != "_line"]
    has_pred = pred_column in columns
    scores, prob_columns = output_columns(columns, raw[0], outputs, source) if task == "multilabel" else \
        (None, [c for c in columns if c.startswith(PROB_PREFIX)])
    lines = raw[0]["_line"].to_numpy()
    named = list(outputs.labels) or [c[len(PROB_PREFIX):] for c in prob_columns] or \
        (cells.scores_labels(raw[0][scores].to_numpy(dtype=object), source=source, lines=lines, column=scores)
         if scores else None)
    gold_columns = (data_opts.label_column,)
    if task == "multilabel" and opts.label_per_column:
        if not named:
            raise DataError(f"{source}: --label-per-column needs the label names: give prob_<label> columns, "
                            "--labels, or the gold as lists or delimited strings.")
        gold_columns = tuple(named)
    required = gold_columns + ((pred_column,) if has_pred else ()) + ((scores,) if scores else ())
    eval_set = load_eval_set(source, text_column=data_opts.text_column, label_column=None,
                             id_column=data_opts.id_column, encoding=data_opts.encoding, split=data_opts.split,
                             max_chars=data_opts.max_chars, required=required, table=raw)
    eval_set.metadata_columns = [c for c in eval_set.metadata_columns if c not in prob_columns]
    frame, source = eval_set.frame, str(eval_set.path)
    if task == "regression":
        if not has_pred:
            raise DataError(f"{source}: no column {pred_column!r} of predicted values; name it with --pred-column.")
        target = golds.regression_gold(frame[gold_columns[0]].to_numpy(dtype=object), source=source, lines=lines,
                                       column=gold_columns[0])
        value = golds.regression_gold(frame[pred_column].to_numpy(dtype=object), source=source, lines=lines,
                                      column=pred_column)
        reading = rows.Reading("regression", edges=rows.quantile_edges(target), tolerance=opts.tolerance,
                               relative=opts.relative_tolerance)
        out = {"probs": value[:, None], "loss": (value - target) ** 2}
        return eval_set, _table(eval_set, target, ["value"], reading, out), value[:, None], ["value"], reading
    labels = named or _names(frame, gold_columns[0], pred_column, opts, source, has_pred)
    if opts.label_per_column:
        gold = golds.multilabel_columns(frame, labels, source=source, lines=lines)
    else:
        gold = golds.multilabel_gold(frame[gold_columns[0]].to_numpy(dtype=object), labels, sep=opts.label_sep,
                                     source=source, lines=lines, column=gold_columns[0])
    probs = probability_columns(frame, prob_columns, source) if prob_columns else None
    if scores:
        probs = cells.read_scores(frame[scores].to_numpy(dtype=object), labels, multilabel=True, source=source,
                                  lines=lines, column=scores)
    if has_pred:
        pred = golds.multilabel_gold(frame[pred_column].to_numpy(dtype=object), labels, sep=opts.label_sep,
                                     source=source, lines=lines, column=pred_column)
        reading = rows.Reading("multilabel", thresholds=(0.5,) * len(labels))  # the given sets, read as they are
        shown = pred.astype(np.float32)
    elif probs is not None:
        reading = rows.Reading("multilabel", thresholds=tuple(golds.read_thresholds(opts.threshold, labels)))
        shown = probs
    else:
        raise DataError(f"{source}: no column {pred_column!r} and no prob_<label> or probs/logits column; give the "
                        "predicted labels (--pred-column) or their probabilities (--probs-column).")
    p = np.clip(probs if probs is not None else shown, 1e-7, 1 - 1e-7)
    loss = -(gold * np.log(p) + (1 - gold) * np.log(1 - p)).mean(axis=1) if probs is not None else \
        np.full(len(gold), np.nan)
    table = _table(eval_set, gold, labels, reading, {"probs": shown, "loss": loss})
    return eval_set, table, probs, labels, reading


def _table(eval_set, gold, labels, reading, out):
    frame = eval_set.frame
    inputs = rows.input_table(frame, gold, labels, eval_set.metadata_columns, reading)
    n_tokens = np.fromiter((len(str(t).split()) for t in frame["text"]), dtype=np.int32, count=len(frame))
    return rows.output_table(inputs, labels, {**out, "n_tokens": n_tokens,
                                              "truncated": np.zeros(len(frame), dtype=bool)}, reading)


def _names(frame, gold_column, pred_column, opts: TaskParams, source, has_pred) -> list[str]:
    """Every label name in the gold and predicted sets, sorted (no prob_ columns to name them)."""
    found: set[str] = set()
    for column in (gold_column, pred_column) if has_pred else (gold_column,):
        for row, value in enumerate(frame[column].to_numpy(dtype=object)):
            items = golds.multilabel_items(value, opts.label_sep, where(source, int(frame["_line"].iat[row]), column))
            if any(not isinstance(i, str) for i in items):
                raise DataError(f"{where(source, int(frame['_line'].iat[row]), column)}: label ids need the names: "
                                "give prob_<label> columns (their order is the ids'), or write names.")
            found.update(items)
    return sorted(found)
