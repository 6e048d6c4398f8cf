"""Stage orchestration: read inputs, call the pure stages, write the run directory.

Everything the user can get wrong is checked before the run directory is created, so a bad call leaves nothing
behind; a stage that fails later is recorded as failed in the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from erroranalysis import runs
from erroranalysis.data import EvalSet, load_eval_set, map_labels
from erroranalysis.errors import DataError, where
from erroranalysis.runs import Run

PROB_PREFIX = "prob_"


@dataclass
class DataOptions:
    """How to read the eval set (the CLI's --text-column, --label-column, ... options)."""

    text_column: str = "text"
    label_column: str = "label"
    id_column: str | None = None
    encoding: str = "utf-8"
    split: str | None = None


@dataclass
class InferOptions:
    batch_size: int = 32
    max_length: int = 256
    precision: str = "fp32"
    device: str = "auto"
    trust_remote_code: bool = False


@dataclass
class AfterOptions:
    """Which stages follow metrics, and their parameters."""

    cluster: bool = True
    cluster_params: dict = field(default_factory=dict)
    slices: bool = True
    checks: bool = True
    checks_params: dict = field(default_factory=dict)
    seed: int = 0


def run_checkpoint(model: str | Path, data: str | Path, out: str | Path, *, data_opts: DataOptions = DataOptions(),
                   infer_opts: InferOptions = InferOptions(), after: AfterOptions = AfterOptions(),
                   overwrite: bool = False, progress: Callable[[int, int], None] | None = None) -> Run:
    """`erroranalysis run`: infer with a checkpoint over an eval set, then measure and cluster."""
    from erroranalysis.inference import load_classifier

    eval_set = _load(data, data_opts)
    clf = load_classifier(model, device=infer_opts.device, trust_remote_code=infer_opts.trust_remote_code)
    gold = map_labels(eval_set.frame["label"].to_numpy(), clf.labels, source=str(eval_set.path),
                      lines=eval_set.frame["_line"].to_numpy(), column=data_opts.label_column)
    run = Run.create(out, overwrite=overwrite, task="classification", labels=clf.labels,
                     model={"path": str(Path(model).resolve()), "weights_sha256": clf.weights_sha256,
                            "max_length": infer_opts.max_length, "precision": infer_opts.precision,
                            "batch_size": infer_opts.batch_size},
                     data=_data_entry(eval_set), device=clf.device, seed=after.seed)
    with run.stage("infer", {"batch_size": infer_opts.batch_size, "max_length": infer_opts.max_length,
                             "precision": infer_opts.precision, "device": clf.device}) as facts:
        facts["examples_per_second"] = _write_inference(run, clf, eval_set, gold, infer_opts, progress)
    after_predictions(run, after)
    return run


def _write_inference(run: Run, clf, eval_set: EvalSet, gold: np.ndarray, opts: InferOptions,
                     progress) -> float:
    """Stream chunks of results to predictions.parquet, probs.npy and hidden_states.npy; all appear at once."""
    import time

    import pyarrow as pa
    import pyarrow.parquet as pq

    from erroranalysis.inference import infer

    frame = eval_set.frame
    label_index = {label: i for i, label in enumerate(clf.labels)}
    label_ids = np.fromiter((label_index[g] for g in gold), dtype=np.int64, count=len(gold))
    metadata = pa.Table.from_pandas(frame[eval_set.metadata_columns], preserve_index=False)
    n, start, row = len(frame), time.perf_counter(), 0
    advance = (lambda k: progress(k, n)) if progress else None
    names = np.asarray(clf.labels, dtype=object)
    paths = [run.file(runs.PREDICTIONS), run.file(runs.PROBS), run.file(runs.HIDDEN)]
    with runs.atomic_files(*paths) as (pred_tmp, probs_tmp, hidden_tmp):
        writer = probs = hidden = None
        try:
            for chunk in infer(clf, frame["text"].tolist(), label_ids, batch_size=opts.batch_size,
                               max_length=opts.max_length, precision=opts.precision, progress=advance):
                m = len(chunk["probs"])
                if probs is None:
                    probs = np.lib.format.open_memmap(probs_tmp, mode="w+", dtype=np.float32, shape=(n, len(names)))
                    hidden = np.lib.format.open_memmap(hidden_tmp, mode="w+", dtype=np.float32,
                                                       shape=(n, chunk["hidden"].shape[1]))
                probs[row:row + m] = chunk["probs"]
                hidden[row:row + m] = chunk["hidden"]
                table = _prediction_table(frame.iloc[row:row + m], gold[row:row + m], names, chunk,
                                          metadata.slice(row, m))
                if writer is None:
                    writer = pq.ParquetWriter(pred_tmp, table.schema)
                writer.write_table(table)
                row += m
        finally:
            if writer is not None:
                writer.close()
        probs.flush()
        hidden.flush()
        del probs, hidden
    return round(n / max(time.perf_counter() - start, 1e-9), 1)


def _prediction_table(rows, gold, names, chunk, metadata):
    import pyarrow as pa

    pred_idx = chunk["probs"].argmax(1)
    pred = names[pred_idx]
    columns = {
        "example_id": pa.array(rows["example_id"].tolist(), pa.string()),
        "text": pa.array(rows["text"].tolist(), pa.string()),
        "label": pa.array(list(gold), pa.string()),
        "pred": pa.array(list(pred), pa.string()),
        "correct": pa.array(gold == pred),
        "confidence": pa.array(chunk["probs"][np.arange(len(pred_idx)), pred_idx].astype(np.float32)),
        "loss": pa.array(chunk["loss"].astype(np.float32)),
        "n_tokens": pa.array(chunk["n_tokens"].astype(np.int32)),
        "truncated": pa.array(chunk["truncated"]),
    }
    for name in metadata.column_names:
        columns[name] = metadata.column(name)
    return pa.table(columns)


def analyze_predictions(file: str | Path, out: str | Path, *, data_opts: DataOptions = DataOptions(),
                        pred_column: str = "pred", after: AfterOptions = AfterOptions(),
                        overwrite: bool = False) -> Run:
    """`erroranalysis analyze`: predictions made elsewhere (text, label, pred, optional prob_<label> columns)."""
    eval_set = _load(file, data_opts, required=(pred_column,))
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
    run = Run.create(out, overwrite=overwrite, task="classification", labels=labels,
                     data={**_data_entry(eval_set), "metadata_columns": metadata, "pred_column": pred_column},
                     seed=after.seed)
    with run.stage("load_predictions", {"pred_column": pred_column, "probabilities": bool(prob_columns)}):
        runs.write_parquet(run.file(runs.PREDICTIONS), table)
        if probs is not None:
            runs.write_npy(run.file(runs.PROBS), probs)
    after_predictions(run, after)
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


def _probabilities(frame, columns: list[str], eval_set: EvalSet) -> np.ndarray:
    import pandas as pd

    values = frame[columns].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | (values < 0) | (values > 1)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise DataError(f"{where(eval_set.path, int(frame['_line'].iat[r]), columns[c])}: probability "
                        f"{frame[columns[c]].iat[r]!r} is not a number in [0, 1].")
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
    table["truncated"] = False
    for column in metadata:
        table[column] = frame[column].to_numpy()
    return table


def _load(data, opts: DataOptions, required: tuple[str, ...] = ()) -> EvalSet:
    return load_eval_set(data, text_column=opts.text_column, label_column=opts.label_column,
                         id_column=opts.id_column, encoding=opts.encoding, split=opts.split, required=required)


def _data_entry(eval_set: EvalSet) -> dict:
    entry = eval_set.describe()
    entry["path"] = str(Path(entry["path"]).resolve())
    return entry


def after_predictions(run: Run, after: AfterOptions) -> None:
    """The stages every task shares once predictions.parquet exists, in the order each one's inputs need:
    metrics, data checks (label issues, duplicates), slices, then clusters (which read checks and slices)."""
    from erroranalysis.checks_stage import checks_run
    from erroranalysis.cluster_stage import cluster_run
    from erroranalysis.slice_stage import slices_run

    compute_run_metrics(run, seed=after.seed)
    if after.checks:
        checks_run(run.path, seed=after.seed, **after.checks_params)
    if after.slices:
        slices_run(run.path)
    if after.cluster:
        cluster_run(run.path, seed=after.seed, **after.cluster_params)


def compute_run_metrics(run: Run, *, seed: int = 0, n_resamples: int = 1000) -> dict:
    """The metrics stage: metrics.json from predictions (and probabilities when the run has them)."""
    from erroranalysis.metrics import compute_metrics

    preds = run.predictions()
    probs = run.probs()
    metadata_columns = run.manifest.get("data", {}).get("metadata_columns")
    if metadata_columns is None:
        metadata_columns = [c for c in preds.columns if c not in runs.CORE_COLUMNS]
    params = {"seed": seed, "n_resamples": n_resamples}
    with run.stage("metrics", params):
        result = compute_metrics(preds["label"].to_numpy(), preds["pred"].to_numpy(), run.labels,
                                 probs=None if probs is None else np.asarray(probs),
                                 metadata=preds[metadata_columns] if metadata_columns else None,
                                 texts=preds["text"].to_numpy(), seed=seed, n_resamples=n_resamples)
        if run.task == "generation":
            from erroranalysis.generation_pipeline import adjust_metrics

            result = adjust_metrics(result, preds, run.labels)
        runs.write_json(run.file(runs.METRICS), result)
    return result
