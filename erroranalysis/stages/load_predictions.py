"""`erroranalysis analyze`: predictions made elsewhere (text, label, pred, and the model's output as prob_<label>
columns or one probs/scores/logits column: see `erroranalysis.sources.cells`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from erroranalysis import rundir
from erroranalysis.core.errors import DataError, preview, where
from erroranalysis.rundir import Run, create_run
from erroranalysis.sources import cells
from erroranalysis.sources.table import DataOptions, EvalSet, as_source, load_eval_set, map_labels, read_table
from erroranalysis.stages.after import AfterParams, after_predictions
from erroranalysis.stages.analyze import OutputParams, Reading
from erroranalysis.stages.common import data_entry, say_notes
from erroranalysis.tasks import Task

PROB_PREFIX = "prob_"


def read_outputs(file, data_opts: DataOptions, outputs: OutputParams, required: tuple[str, ...]):
    """(eval set, the scores column or None, prob_<label> columns): the file read once, the model's output column
    kept out of the metadata."""
    source = as_source(file)
    table = read_table(source, encoding=data_opts.encoding, split=data_opts.split)
    columns = [c for c in table[0].columns if c != "_line"]
    scores, prob_columns = output_columns(columns, table[0], outputs, source)
    eval_set = load_eval_set(source, text_column=data_opts.text_column, label_column=data_opts.label_column,
                             id_column=data_opts.id_column, encoding=data_opts.encoding, split=data_opts.split,
                             required=required + ((scores,) if scores else ()), max_chars=data_opts.max_chars,
                             table=table)
    eval_set.metadata_columns = [c for c in eval_set.metadata_columns if c not in prob_columns]
    return eval_set, scores, prob_columns


def output_columns(columns: list[str], frame, outputs: OutputParams, source) -> tuple[str | None, list[str]]:
    """(the scores column or None, the prob_<label> columns): one way of giving the model's output, not two."""
    scores = cells.scores_column(columns, frame, outputs.probs_column, source)
    prob_columns = [c for c in columns if c.startswith(PROB_PREFIX)]
    if scores and prob_columns:
        raise DataError(f"{source}: both prob_<label> columns and the scores column {scores!r}; drop one of them.")
    if prob_columns and outputs.labels:
        raise DataError(f"{source}: --labels orders the lists of a scores column, but the prob_<label> columns name "
                        "their labels; drop --labels.")
    return scores, prob_columns


def analyze_predictions(file: str | Path, out: str | Path, reading: Reading, *, task: Task,
                        after: AfterParams = AfterParams(), overwrite: bool = False, embedder=None, progress=None,
                        engine=None) -> Run:
    """`erroranalysis analyze`: predictions made elsewhere (text, label, pred, and optional prob_<label> columns or
    a probs/scores/logits column, `reading.output`). `progress`: an `erroranalysis.core.progress.Reporter`;
    `engine`: where the checks' MiniLM embedding runs."""
    data_opts, pred_column, outputs = reading.data, reading.pred_column_of(task), reading.output
    eval_set, scores, prob_columns = read_outputs(file, data_opts, outputs, (pred_column,))
    frame, source, lines = eval_set.frame, str(eval_set.path), eval_set.frame["_line"].to_numpy()
    preds = _labels_column(frame, pred_column, eval_set)
    gold = frame["label"].to_numpy()
    probs = None
    if prob_columns:
        labels = [c[len(PROB_PREFIX):] for c in prob_columns]
        probs = _probabilities(frame, prob_columns, eval_set)
    elif scores:
        values = frame[scores].to_numpy(dtype=object)
        labels = list(outputs.labels) or cells.scores_labels(values, source=source, lines=lines, column=scores) or \
            cells.sort_labels(set(gold) | set(preds))
        probs = cells.read_scores(values, labels, multilabel=False, source=source, lines=lines,
                                  column=scores).astype(np.float32)
    else:
        labels = list(outputs.labels) or sorted(set(gold) | set(preds))
    if prob_columns or scores or outputs.labels:
        gold = map_labels(gold, labels, source=source, lines=lines, column=data_opts.label_column)
        preds = map_labels(preds, labels, source=source, lines=lines, column=pred_column)
    table = _analyze_table(frame, gold, preds, labels, probs, eval_set.metadata_columns)
    if engine is not None and engine.distributed:
        from erroranalysis.engines import ray_data

        ray_data.connect(engine)  # fail before the run directory exists when Ray is missing or unreachable
    say_notes(eval_set, progress)
    manifest = {"task": "classification", "labels": labels, "seed": after.seed,
                "data": {**data_entry(eval_set), "pred_column": pred_column,
                         **({"probs_column": scores} if scores else {})}}
    record = {"pred_column": pred_column, "probabilities": probs is not None, "probs_column": scores}
    with create_run(out, overwrite=overwrite, **manifest) as run:
        with run.stage("load_predictions", record) as st:
            st.write_parquet(rundir.PREDICTIONS, table)
            if probs is not None:
                st.write_npy(rundir.PROBS, probs)
        after_predictions(run, after, embedder=embedder, progress=progress, engine=engine)
    return run


def _labels_column(frame, column: str, eval_set: EvalSet) -> np.ndarray:
    values = frame[column]
    cells.require(values, "label", source=eval_set.path, lines=frame["_line"].to_numpy(), column=column)
    empty = values.isna().to_numpy() | (values.astype(str).str.strip() == "").to_numpy()
    if empty.any():
        line = int(frame["_line"].iat[int(np.argmax(empty))])
        raise DataError(f"{where(eval_set.path, line, column)}: empty prediction; every row needs one.")
    if values.dtype.kind == "f":
        values = values.astype(np.int64)
    return values.astype(str).to_numpy(dtype=object)


def probability_columns(frame, columns: list[str], source) -> np.ndarray:
    """The prob_<label> columns as floats, or a one-line error at the first that is not a number in [0, 1]."""
    import pandas as pd

    values = frame[columns].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | (values < 0) | (values > 1)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise DataError(f"{where(source, int(frame['_line'].iat[r]), columns[c])}: probability "
                        f"{preview([frame[columns[c]].iat[r]])} is not a number in [0, 1].")
    return values


def _probabilities(frame, columns: list[str], eval_set: EvalSet) -> np.ndarray:
    """Single-label probabilities: each row's also sum to 1."""
    values = probability_columns(frame, columns, eval_set.path)
    sums = values.sum(1)
    off = np.abs(sums - 1) > 1e-3
    if off.any():
        r = int(np.argmax(off))
        raise DataError(f"{where(eval_set.path, int(frame['_line'].iat[r]))}: the {PROB_PREFIX}* columns sum to "
                        f"{sums[r]:.4f}, not 1; give one probability per class, or none.")
    return (values / sums[:, None]).astype(np.float32)


def _analyze_table(frame, gold, preds, labels, probs, metadata):
    import pandas as pd

    table = pd.DataFrame({"example_id": frame["example_id"].astype(str), "text": frame["text"],
                          "label": gold.astype(str), "pred": preds.astype(str)})
    table["correct"] = table["label"] == table["pred"]
    if probs is not None:
        index = {label: i for i, label in enumerate(labels)}
        rows = np.arange(len(table))
        gold_p = probs[rows, [index[g] for g in gold]]
        table["confidence"] = probs.max(1).astype(np.float32)
        table["loss"] = (-np.log(np.clip(gold_p, 1e-12, 1))).astype(np.float32)
    else:
        table["confidence"] = np.float32(np.nan)
        table["loss"] = np.float32(np.nan)
    table["n_tokens"] = table["text"].str.split().str.len().fillna(0).astype(np.int32)
    table["truncated"] = frame["_cut"].to_numpy(dtype=bool)  # cut at --max-chars when read
    for column in metadata:
        table[column] = frame[column].to_numpy()
    return table
