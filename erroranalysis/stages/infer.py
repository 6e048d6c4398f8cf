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
from erroranalysis.data import DataOptions, EvalSet, InMemory, map_labels, read_eval_set
from erroranalysis.engines import LOCAL, Engine
from erroranalysis.infer import runtime
from erroranalysis.infer.classifier import cpu_bf16_note
from erroranalysis.params import Choice, Params, param, spec_field
from erroranalysis.progress import as_reporter
from erroranalysis.rundir import Run, create_run
from erroranalysis.stages.after import AfterParams, after_predictions
from erroranalysis.stages.common import data_entry

CHUNK_ROWS = 4096  # rows per chunk: the unit of streaming in-process and of a Ray block
HIDDEN = ("float32", "float16", "none")  # how hidden_states.npy is kept: per-step runs of a training run keep less


@dataclass(frozen=True)
class InferParams(Params):
    """How the checkpoint runs (the shared declarations of `erroranalysis.infer.runtime`); `hidden`: how
    hidden_states.npy is kept."""

    batch_size: int | None = spec_field(runtime.BATCH_SIZE)
    max_tokens: int | None = spec_field(runtime.MAX_TOKENS)
    max_length: int = spec_field(runtime.MAX_LENGTH)
    precision: str = spec_field(runtime.PRECISION)
    device: str = spec_field(runtime.DEVICE)
    trust_remote_code: bool = spec_field(runtime.TRUST_REMOTE_CODE)
    hidden: str = param("float32", Choice(*HIDDEN), "hidden_states.npy kept as float32, float16 (half the disk) or "
                        "not at all (none; the checks and --embedder hidden then have no hidden states).")


def run_checkpoint(model: str | Path, data: str | Path, out: str | Path, *, data_opts: DataOptions = DataOptions(),
                   infer_opts: InferParams = InferParams(), after: AfterParams = AfterParams(),
                   overwrite: bool = False, progress=None, embedder=None, engine: Engine = LOCAL,
                   log: Callable[[str], None] | None = None) -> Run:
    """`erroranalysis run`: infer with a checkpoint over an eval set, then the stages `after` names (`embedder`, an
    object with `key` and `embed(frame)`, replaces the cluster stage's). `engine` says where inference runs;
    `progress` is a `erroranalysis.progress.Reporter` or a function (rows done, total) for inference alone; `log`
    gets notes for the user (bf16 emulated on this CPU)."""
    job = prepare(model, data, data_opts, infer_opts, engine)
    if engine.distributed:
        from erroranalysis.engines import ray_data

        ray_data.connect(engine)  # fail before the run directory exists when Ray is missing or unreachable
    note = cpu_bf16_note(job.precision, job.clf.device)
    if note and log:
        log(note)
    reporter = as_reporter(progress)
    with create_run(out, overwrite=overwrite, **job.manifest(seed=after.seed, engine=engine.record())) as run:
        infer_stage(run, job, reporter, engine)
        after_predictions(run, after, embedder=embedder, progress=reporter, engine=engine)
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
    data_opts: DataOptions = DataOptions()

    @property
    def batching(self) -> tuple[int, int]:
        """(rows, tokens) per forward pass on this machine's device (what None resolves to here); on Ray the
        workers resolve it for theirs, recorded in the infer stage's `batching` fact."""
        from erroranalysis.infer.classifier import batching

        return batching(self.clf.device, self.params.batch_size, self.params.max_tokens, self.precision)

    @property
    def precision(self) -> str:
        """The precision that runs (what `auto` resolved to on this device)."""
        from erroranalysis.infer.classifier import resolve_precision

        return resolve_precision(self.params.precision, self.clf.device)

    def manifest(self, **extra) -> dict:
        p = self.params
        return {"task": "classification", "labels": self.clf.labels,
                "model": {"path": str(self.model.resolve()), "weights_sha256": self.clf.weights_sha256,
                          "max_length": p.max_length, "precision": self.precision, "precision_asked": p.precision,
                          **dict(zip(("batch_size", "max_tokens"), self.batching))},
                "data": data_entry(self.eval_set), "device": self.clf.device, **extra}


def prepare(model: str | Path, data: str | Path, data_opts: DataOptions, params: InferParams,
            engine: Engine = LOCAL) -> InferJob:
    """Load and check the eval set and the checkpoint (nothing is written). On Ray, a Parquet eval set is only
    scanned (its footer, a digest and its first rows, validated): the workers read and validate its blocks."""
    from erroranalysis import blocks
    from erroranalysis.infer.classifier import load_classifier

    scan = engine.distributed and not isinstance(data, InMemory) and blocks.readable(data)
    eval_set = None if scan else read_eval_set(data, data_opts)
    clf = load_classifier(model, device=params.device, trust_remote_code=params.trust_remote_code,
                          precision=params.precision)
    if scan:
        eval_set = blocks.scan(data, data_opts, clf.labels)
    gold = map_labels(eval_set.frame["label"].to_numpy(), clf.labels, source=str(eval_set.path),
                      lines=eval_set.frame["_line"].to_numpy(), column=data_opts.label_column)
    return InferJob(Path(model), clf, eval_set, gold, params, data_opts=data_opts)


def infer_stage(run: Run, job: InferJob, progress=None, engine: Engine = LOCAL) -> None:
    """The infer stage: predictions, probabilities and hidden states, committed together."""
    reporter = as_reporter(progress)
    record = {**job.params.record(), "device": job.clf.device, "precision": job.precision, **engine.record()}
    with run.stage("infer", record) as staging:
        with reporter.stage("infer", total=len(job.eval_set)) as advance:
            start = time.perf_counter()
            counts = _write_inference(staging, job, engine, advance)
        staging.facts["examples_per_second"] = round(len(job.eval_set) / max(time.perf_counter() - start, 1e-9), 1)
        staging.facts["confusion_counts"] = counts.tolist()  # summed over chunks; metrics recount them from rows
        if job.training_state is not None:
            staging.write_json(rundir.TRAINER_STATE, job.training_state)
        else:
            copy_training_log(job.model, staging)
    if "n_cut" in (run.state("infer") or {}):  # read by the workers: what the data entry could not say before
        run.update_manifest(data={**run.manifest["data"], "n_cut": run.state("infer")["n_cut"]})


def copy_training_log(checkpoint: Path, staging) -> None:
    """Keep the checkpoint's trainer_state.json in the run, so the app reads it without leaving the runs folder."""
    log = checkpoint / rundir.TRAINER_STATE
    if log.is_file() and log.stat().st_size <= 64 << 20:
        shutil.copyfile(log, staging.file(rundir.TRAINER_STATE))


def _write_inference(staging, job: InferJob, engine: Engine, advance) -> np.ndarray:
    """Run the checkpoint over the eval set with `engine`, streaming predictions.parquet, probs.npy and
    hidden_states.npy into the staging area (single files in-process, folders of shards on Ray)."""
    from erroranalysis.blocks import Scanned
    from erroranalysis.infer.classifier import ChunkPredictor
    from erroranalysis.infer.predictions import input_table

    p = job.params
    hidden = staging.file(rundir.HIDDEN) if p.hidden != "none" else None
    paths = (staging.file(rundir.PREDICTIONS), staging.file(rundir.PROBS), hidden)
    if engine.distributed:
        from erroranalysis.engines import ray_data

        kwargs = {"model": str(job.model.resolve()), "batch_size": p.batch_size, "max_tokens": p.max_tokens,
                  "max_length": p.max_length,
                  "precision": p.precision, "device": p.device, "trust_remote_code": p.trust_remote_code}
        if isinstance(job.eval_set, Scanned):  # the workers read the rows: the driver holds none
            counts, ran, n_cut = ray_data.predict_source(job.eval_set, job.data_opts, kwargs, job.clf.labels, paths,
                                                         engine, chunk_size=CHUNK_ROWS, progress=advance,
                                                         hidden_dtype=p.hidden)
            staging.facts["read_by"] = "workers"
            staging.facts["n_cut"] = n_cut  # texts cut at --max-chars, counted by the workers
        else:
            inputs = input_table(job.eval_set.frame, job.gold, job.clf.labels, job.eval_set.metadata_columns)
            counts, ran = ray_data.predict(inputs, kwargs, job.clf.labels, paths, engine, chunk_size=CHUNK_ROWS,
                                           progress=advance, hidden_dtype=p.hidden)
        staging.facts["batching"] = [list(b) for b in ran]  # each worker resolves it for its own device
        return counts
    inputs = input_table(job.eval_set.frame, job.gold, job.clf.labels, job.eval_set.metadata_columns)
    from erroranalysis.engines import local
    from erroranalysis.engines.sinks import FileSink

    predictor = ChunkPredictor(clf=job.clf, batch_size=p.batch_size, max_tokens=p.max_tokens, max_length=p.max_length,
                               precision=p.precision)
    staging.facts["batching"] = [[predictor.batch_size, predictor.max_tokens]]
    return local.predict(inputs, predictor, job.clf.labels, FileSink(*paths, n_rows=inputs.num_rows, hidden_dtype=p.hidden),
                         chunk_size=CHUNK_ROWS, progress=advance)
