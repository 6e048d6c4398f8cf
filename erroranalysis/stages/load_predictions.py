"""`erroranalysis analyze`: predictions made elsewhere (text, label, pred, optional prob_<label> columns).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from erroranalysis import rundir
from erroranalysis.core.errors import DataError, preview, where
from erroranalysis.rundir import Run, create_run
from erroranalysis.sources.table import DataOptions, EvalSet, map_labels, read_eval_set
from erroranalysis.stages.after import AfterParams, after_predictions
from erroranalysis.stages.common import data_entry

PROB_PREFIX = "prob_"


def analyze_predictions(file: str | Path, out: str | Path, *, data_opts: DataOptions = DataOptions(),
                        pred_column: str = "pred", after: AfterParams = AfterParams(),
                        overwrite: bool = False, embedder=None, progress=None, engine=None) -> Run:
    """`erroranalysis analyze`: predictions made elsewhere (text, label, pred, optional prob_<label> columns).
    `progress`: an `erroranalysis.core.progress.Reporter`; `engine`: where the checks' MiniLM embedding runs."""
    eval_set = read_eval_set(file, data_opts, required=(pred_column,))
    frame = eval_set.frame
    prob_columns = [c for c in eval_set.metadata_columns if c.startswith(PROB_PREFIX)]
    preds = _labels_column(frame, pred_column, eval_set)
    if prob_columns:
        labels = [c[len(PROB_PREFIX):] for c in prob_columns]
        probs = _probabilities(frame, prob_columns, eval_set)
        gold = map_labels(frame["label"].to_numpy(), labels, source=str(eval_set.path),
                          lines=frame["_line"].to_numpy(), column=data_opts.label_column)
        preds = map_labels(preds, labels, source=str(eval_set.path), lines=frame["_line"].to_numpy(),
                           column=pred_column)
    else:
        gold = frame["label"].to_numpy()
        labels = sorted(set(gold) | set(preds))
        probs = None
    metadata = [c for c in eval_set.metadata_columns if c not in prob_columns]
    table = _analyze_table(frame, gold, preds, labels, probs, metadata)
    if engine is not None and engine.distributed:
        from erroranalysis.engines import ray_data

        ray_data.connect(engine)  # fail before the run directory exists when Ray is missing or unreachable
    manifest = {"task": "classification", "labels": labels, "seed": after.seed,
                "data": {**data_entry(eval_set), "metadata_columns": metadata, "pred_column": pred_column}}
    with create_run(out, overwrite=overwrite, **manifest) as run:
        with run.stage("load_predictions", {"pred_column": pred_column, "probabilities": bool(prob_columns)}) as st:
            st.write_parquet(rundir.PREDICTIONS, table)
            if probs is not None:
                st.write_npy(rundir.PROBS, probs)
        after_predictions(run, after, embedder=embedder, progress=progress, engine=engine)
    return run


def _labels_column(frame, column: str, eval_set: EvalSet) -> np.ndarray:
    values = frame[column]
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
