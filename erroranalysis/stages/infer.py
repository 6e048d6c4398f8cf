"""`erroranalysis run`: infer with a checkpoint over an eval set, then measure and cluster.

Everything the user can get wrong is checked before the run directory is created, so a bad call leaves nothing
behind; the `infer` stage streams predictions, probabilities and hidden states into its staging area, and they
are committed together with the stage.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from erroranalysis import rundir
from erroranalysis.data import DataOptions, EvalSet, map_labels, read_eval_set
from erroranalysis.rundir import Run, create_run
from erroranalysis.stages.after import AfterParams, after_predictions
from erroranalysis.stages.common import data_entry
from erroranalysis.validation import Params, check_choice, check_int, check_param

PRECISIONS = ("fp32", "bf16")
HIDDEN = ("float32", "float16", "none")  # how hidden_states.npy is kept: per-step runs of a training run keep less


@dataclass(frozen=True)
class InferParams(Params):
    """How the checkpoint runs: `--batch-size`, `--max-length`, `--precision`, `--device`, `--trust-remote-code`;
    `hidden`: hidden_states.npy kept as float32, float16 (half the disk) or not at all ("none")."""

    batch_size: int = 32
    max_length: int = 256
    precision: str = "fp32"
    device: str = "auto"
    trust_remote_code: bool = False
    hidden: str = "float32"

    def validate(self) -> None:
        check_int("batch_size", self.batch_size, 1)
        check_int("max_length", self.max_length, 2)
        check_choice("precision", self.precision, PRECISIONS)
        check_choice("hidden", self.hidden, HIDDEN)
        check_param("device", self.device, isinstance(self.device, str) and (
            self.device in ("auto", "cpu", "cuda", "mps") or self.device.startswith("cuda:")),
            "one of auto, cpu, cuda, cuda:N, mps")


InferOptions = InferParams  # the name before 0.2


def run_checkpoint(model: str | Path, data: str | Path, out: str | Path, *, data_opts: DataOptions = DataOptions(),
                   infer_opts: InferParams = InferParams(), after: AfterParams = AfterParams(),
                   overwrite: bool = False, progress: Callable[[int, int], None] | None = None,
                   embedder=None) -> Run:
    """`erroranalysis run`: infer with a checkpoint over an eval set, then the stages `after` names (`embedder`, an
    object with `key` and `embed(frame)`, replaces the cluster stage's)."""
    job = prepare(model, data, data_opts, infer_opts)
    with create_run(out, overwrite=overwrite, **job.manifest(seed=after.seed)) as run:
        infer_stage(run, job, progress)
        after_predictions(run, after, embedder=embedder)
    return run


@dataclass
class InferJob:
    """A checkpoint and an eval set, loaded and checked: everything the infer stage needs. `training_state` (a
    Trainer's state as a dict, for a model still in training) is written as the run's trainer_state.json instead of
    the checkpoint folder's."""

    model: Path
    clf: object
    eval_set: EvalSet
    gold: np.ndarray
    params: InferParams
    training_state: dict | None = None

    def manifest(self, **extra) -> dict:
        p = self.params
        return {"task": "classification", "labels": self.clf.labels,
                "model": {"path": str(self.model.resolve()), "weights_sha256": self.clf.weights_sha256,
                          "max_length": p.max_length, "precision": p.precision, "batch_size": p.batch_size},
                "data": data_entry(self.eval_set), "device": self.clf.device, **extra}


def prepare(model: str | Path, data: str | Path, data_opts: DataOptions, params: InferParams) -> InferJob:
    """Load and check the eval set and the checkpoint (nothing is written)."""
    from erroranalysis.infer.classifier import load_classifier

    eval_set = read_eval_set(data, data_opts)
    clf = load_classifier(model, device=params.device, trust_remote_code=params.trust_remote_code)
    gold = map_labels(eval_set.frame["label"].to_numpy(), clf.labels, source=str(eval_set.path),
                      lines=eval_set.frame["_line"].to_numpy(), column=data_opts.label_column)
    return InferJob(Path(model), clf, eval_set, gold, params)


def infer_stage(run: Run, job: InferJob, progress: Callable[[int, int], None] | None = None) -> None:
    """The infer stage: predictions, probabilities and hidden states, committed together."""
    with run.stage("infer", {**job.params.record(), "device": job.clf.device}) as staging:
        staging.facts["examples_per_second"] = _write_inference(staging, job.clf, job.eval_set, job.gold,
                                                                job.params, progress)
        if job.training_state is not None:
            staging.write_json(rundir.TRAINER_STATE, job.training_state)
        else:
            copy_training_log(job.model, staging)


def copy_training_log(checkpoint: Path, staging) -> None:
    """Keep the checkpoint's trainer_state.json in the run, so the app reads it without leaving the runs folder."""
    log = checkpoint / rundir.TRAINER_STATE
    if log.is_file() and log.stat().st_size <= 64 << 20:
        shutil.copyfile(log, staging.file(rundir.TRAINER_STATE))


def _write_inference(staging, clf, eval_set: EvalSet, gold: np.ndarray, opts: InferParams, progress) -> float:
    """Stream chunks of results to predictions.parquet, probs.npy and hidden_states.npy in the staging area."""
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
    writer = probs = hidden = None
    keep_hidden = opts.hidden != "none"
    try:
        for chunk in infer(clf, frame["text"].tolist(), label_ids, batch_size=opts.batch_size,
                           max_length=opts.max_length, precision=opts.precision, progress=advance):
            m = len(chunk["probs"])
            if probs is None:
                probs = np.lib.format.open_memmap(staging.file(rundir.PROBS), mode="w+", dtype=np.float32,
                                                  shape=(n, len(names)))
                if keep_hidden:
                    hidden = np.lib.format.open_memmap(staging.file(rundir.HIDDEN), mode="w+", dtype=opts.hidden,
                                                       shape=(n, chunk["hidden"].shape[1]))
            probs[row:row + m] = chunk["probs"]
            if hidden is not None:
                hidden[row:row + m] = chunk["hidden"]
            table = prediction_table(frame.iloc[row:row + m], gold[row:row + m], names, chunk, metadata.slice(row, m))
            if writer is None:
                writer = pq.ParquetWriter(staging.file(rundir.PREDICTIONS), table.schema)
            writer.write_table(table)
            row += m
    finally:
        if writer is not None:
            writer.close()
    if probs is not None:
        probs.flush()
    if hidden is not None:
        hidden.flush()
    return round(n / max(time.perf_counter() - start, 1e-9), 1)


def prediction_table(rows, gold, names, chunk, metadata):
    """One chunk of predictions.parquet from a chunk of inference outputs."""
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
