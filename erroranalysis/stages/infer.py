"""`erroranalysis run`: infer with a checkpoint over an eval set, then measure and cluster.

Everything the user can get wrong is checked before the run directory is created, so a bad call leaves nothing
behind; a stage that fails later is recorded as failed in the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from erroranalysis import rundir
from erroranalysis.data import DataOptions, EvalSet, map_labels
from erroranalysis.rundir import Run
from erroranalysis.stages.after import AfterOptions, after_predictions
from erroranalysis.stages.common import _data_entry, _load


@dataclass
class InferOptions:
    batch_size: int = 32
    max_length: int = 256
    precision: str = "fp32"
    device: str = "auto"
    trust_remote_code: bool = False


def run_checkpoint(model: str | Path, data: str | Path, out: str | Path, *, data_opts: DataOptions = DataOptions(),
                   infer_opts: InferOptions = InferOptions(), after: AfterOptions = AfterOptions(),
                   overwrite: bool = False, progress: Callable[[int, int], None] | None = None) -> Run:
    """`erroranalysis run`: infer with a checkpoint over an eval set, then measure and cluster."""
    from erroranalysis.infer.classifier import load_classifier

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

    from erroranalysis.infer.classifier import infer

    frame = eval_set.frame
    label_index = {label: i for i, label in enumerate(clf.labels)}
    label_ids = np.fromiter((label_index[g] for g in gold), dtype=np.int64, count=len(gold))
    metadata = pa.Table.from_pandas(frame[eval_set.metadata_columns], preserve_index=False)
    n, start, row = len(frame), time.perf_counter(), 0
    advance = (lambda k: progress(k, n)) if progress else None
    names = np.asarray(clf.labels, dtype=object)
    paths = [run.file(rundir.PREDICTIONS), run.file(rundir.PROBS), run.file(rundir.HIDDEN)]
    with rundir.atomic_files(*paths) as (pred_tmp, probs_tmp, hidden_tmp):
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
