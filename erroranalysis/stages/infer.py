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
from erroranalysis.core.params import Choice, Params, param, spec_field
from erroranalysis.core.progress import as_reporter
from erroranalysis.engines import LOCAL, Engine
from erroranalysis.infer import runtime
from erroranalysis.infer.classifier import cpu_bf16_note
from erroranalysis.infer.predictions import CLASSIFICATION, Reading
from erroranalysis.rundir import Run, create_run
from erroranalysis.sources.table import DataOptions, EvalSet, InMemory, map_labels, read_eval_set
from erroranalysis.stages.after import AfterParams, after_predictions
from erroranalysis.stages.common import data_entry, say_notes
from erroranalysis.tasks import TaskParams

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
                   log: Callable[[str], None] | None = None, task: str | None = None,
                   task_opts: TaskParams = TaskParams()) -> Run:
    """`erroranalysis run`: infer with a checkpoint over an eval set, then the stages `after` names (`embedder`, an
    object with `key` and `embed(frame)`, replaces the cluster stage's). `task` (None or auto: from the
    checkpoint's config.json; classification, multilabel or regression) and `task_opts` say how its head reads.
    `engine` says where inference runs; `progress` is a `erroranalysis.core.progress.Reporter` or a function (rows done,
    total) for inference alone; `log` gets notes for the user (bf16 emulated on this CPU)."""
    with _worker_rows(model, data, data_opts, engine, out, task) as copy:
        job = prepare(model, data, data_opts, infer_opts, engine, task=task, task_opts=task_opts, rows_path=copy)
        if engine.distributed:
            check_engine(job, engine)
            from erroranalysis.engines import ray_data

            ray_data.connect(engine)  # fail before the run directory exists when Ray is missing or unreachable
        note = cpu_bf16_note(job.precision, job.clf.device)
        if note and log:
            log(note)
        reporter = as_reporter(progress)
        say_notes(job.eval_set, reporter)
        with create_run(out, overwrite=overwrite, **job.manifest(seed=after.seed, engine=engine.record())) as run:
            infer_stage(run, job, reporter, engine)
            after_predictions(run, after, embedder=embedder, progress=reporter, engine=engine)
    return run


def _worker_rows(model, data, data_opts: DataOptions, engine: Engine, out, task):
    """On Ray, a classifier's JSONL or CSV eval set as a Parquet copy the workers read in blocks (`stages.inputs`);
    else nothing to make."""
    import contextlib

    from erroranalysis.core.errors import UserError
    from erroranalysis.infer.classifier import sequence_task
    from erroranalysis.sources import blocks
    from erroranalysis.stages import inputs

    if not engine.distributed or not inputs.workers_read(data) or blocks.readable(data):
        return contextlib.nullcontext()
    try:
        classifier = sequence_task(model, task) == "classification"
    except UserError:  # said by `prepare`, in its order
        classifier = False
    return inputs.worker_rows(data, data_opts, engine, out) if classifier else contextlib.nullcontext()


def resolve_task(model: str | Path, task: str | None = "auto") -> str:
    """The task a checkpoint runs as: `task` as given, or with auto (or None) the one its config.json names (a .gguf
    file is generation); a head erroranalysis does not analyze, or a --task the config contradicts, is refused here
    in one line, before anything is loaded (`erroranalysis.tasks.detect`)."""
    from erroranalysis import tasks
    from erroranalysis.core.errors import ModelError
    from erroranalysis.infer.classifier import read_config

    model = Path(model)
    if task not in (None, *tasks.CHOICES):
        raise ModelError(f"--task {task!r} is not a task erroranalysis knows; supported: {tasks.supported()}.")
    if model.suffix.lower() == ".gguf":
        if task not in (None, "auto", "generation"):
            raise ModelError(f"{model}: a .gguf file is a causal LM; --task {task} cannot run it (use --task "
                             "generation or auto).")
        return "generation"
    return tasks.detect(read_config(model), task, source=str(model / "config.json"))


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
    reading: Reading = CLASSIFICATION
    task_params: TaskParams = TaskParams()
    data_opts: DataOptions = DataOptions()

    @property
    def task(self) -> str:
        return self.clf.task

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
        return {"task": self.task, "labels": self.clf.labels,
                "model": {"path": str(self.model.resolve()), "weights_sha256": self.clf.weights_sha256,
                          "max_length": p.max_length, "precision": self.precision, "precision_asked": p.precision,
                          **dict(zip(("batch_size", "max_tokens"), self.batching))},
                "data": data_entry(self.eval_set), "device": self.clf.device,
                **({"task_params": self.task_record()} if self.task != "classification" else {}), **extra}

    def task_record(self) -> dict:
        """The manifest's `task_params`: what this task's head was read with (thresholds, tolerance, bins)."""
        own = {"multilabel": ("threshold", "label_sep", "label_per_column"),
               "regression": ("tolerance", "relative_tolerance")}[self.task]
        given = {k: v for k, v in self.task_params.record().items() if k in own}
        return {**given, **{k: v for k, v in self.reading.record().items() if v is not None and k not in given}}


def prepare(model: str | Path, data: str | Path, data_opts: DataOptions, params: InferParams,
            engine: Engine = LOCAL, *, task: str | None = None, task_opts: TaskParams = TaskParams(),
            rows_path=None) -> InferJob:
    """Load and check the eval set and the checkpoint (nothing is written): the task is read from the checkpoint's
    config.json and checked against `task` before anything heavy loads, the gold is read as that task takes it. On
    Ray, a classifier's Parquet eval set (or `rows_path`, a JSONL or CSV file's Parquet copy) is only scanned (its
    footer, a digest and its first rows, validated): the workers read and validate its blocks."""
    from erroranalysis.infer.classifier import check_checkpoint, load_classifier, read_config, sequence_task
    from erroranalysis.sources import blocks

    check_checkpoint(Path(model), params.trust_remote_code)
    task = sequence_task(model, task)
    config = read_config(Path(model))
    labels = config_labels(config)
    reading = CLASSIFICATION
    if task == "classification" and engine.distributed and not isinstance(data, InMemory) and (
            blocks.readable(data) or rows_path is not None):
        eval_set = blocks.scan(data, data_opts, labels, rows_path=rows_path)
        gold = map_labels(eval_set.frame["label"].to_numpy(), labels, source=str(eval_set.path),
                          lines=eval_set.frame["_line"].to_numpy(), column=data_opts.label_column)
    elif task == "classification":
        eval_set, gold = _single_label(data, data_opts, labels, config, model)
    else:
        eval_set, gold, reading = task_gold(task, data, data_opts, task_opts, labels)
    clf = load_classifier(model, device=params.device, trust_remote_code=params.trust_remote_code,
                          precision=params.precision, task=task)
    return InferJob(Path(model), clf, eval_set, gold, params, reading=reading, task_params=task_opts,
                    data_opts=data_opts)


def config_labels(config: dict) -> list[str]:
    """The head's label names in id order, as transformers reads them (id2label, else LABEL_<i>)."""
    from erroranalysis.tasks import num_labels

    id2label = config.get("id2label")
    if isinstance(id2label, dict) and id2label:
        return [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(len(id2label))]
    return [f"LABEL_{i}" for i in range(num_labels(config) or 0)]


def _single_label(data, data_opts: DataOptions, labels: list[str], config: dict, model):
    from erroranalysis.core.errors import ModelError
    from erroranalysis.sources.gold import ListLabels

    try:
        eval_set = read_eval_set(data, data_opts)
    except ListLabels as exc:  # a single-label head given multi-label gold: refused naming what the config says
        head = (f"a single-label classifier (problem_type {config.get('problem_type')!r}, "
                f"{len(labels)} labels in {Path(model) / 'config.json'})")
        raise ModelError(str(exc).split("where one label", 1)[0] + f"but the checkpoint is {head}; pass --task "
                         "multilabel if it was trained multi-label, else give one label per example.") from None
    gold = map_labels(eval_set.frame["label"].to_numpy(), labels, source=str(eval_set.path),
                      lines=eval_set.frame["_line"].to_numpy(), column=data_opts.label_column)
    return eval_set, gold


def task_gold(task: str, data, data_opts: DataOptions, opts: TaskParams, labels: list[str]):
    """(eval set, gold, reading) of a multi-label or regression run: the label column (or the 0/1 columns) read as
    they are, then parsed by `erroranalysis.sources.gold`."""
    from erroranalysis.infer.predictions import quantile_edges
    from erroranalysis.sources import gold as golds
    from erroranalysis.sources.table import load_eval_set

    columns = tuple(labels) if task == "multilabel" and opts.label_per_column else (data_opts.label_column,)
    eval_set = load_eval_set(data, text_column=data_opts.text_column, label_column=None,
                             id_column=data_opts.id_column, encoding=data_opts.encoding, split=data_opts.split,
                             required=columns, max_chars=data_opts.max_chars)
    frame, source, lines = eval_set.frame, str(eval_set.path), eval_set.frame["_line"].to_numpy()
    eval_set.columns["label"] = ",".join(columns) if len(columns) > 1 else columns[0]
    if task == "multilabel":
        if opts.label_per_column:
            gold = golds.multilabel_columns(frame, labels, source=source, lines=lines)
        else:
            gold = golds.multilabel_gold(frame[columns[0]].to_numpy(dtype=object), labels, sep=opts.label_sep,
                                         source=source, lines=lines, column=columns[0])
        return eval_set, gold, Reading("multilabel", thresholds=tuple(golds.read_thresholds(opts.threshold, labels)))
    gold = golds.regression_gold(frame[columns[0]].to_numpy(dtype=object), source=source, lines=lines,
                                 column=columns[0])
    return eval_set, gold, Reading("regression", edges=quantile_edges(gold), tolerance=opts.tolerance,
                                   relative=opts.relative_tolerance)


def check_engine(job: InferJob, engine: Engine) -> None:
    """What the Ray engine cannot do, refused before the run directory exists."""
    from erroranalysis.core.errors import ParameterError

    if job.task == "regression" and job.reading.tolerance is None:
        raise ParameterError("--engine", engine.engine, "local for a regression run without --tolerance (the "
                             "worst-decile failures need every error before a shard is written); or pass "
                             "--tolerance")


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
        if "n_cut" in staging.facts:  # read by the workers: what the data entry could not say before
            staging.manifest = {"data": {**run.manifest["data"], "n_cut": staging.facts["n_cut"]}}


def copy_training_log(checkpoint: Path, staging) -> None:
    """Keep the checkpoint's trainer_state.json in the run, so the app reads it without leaving the runs folder."""
    log = checkpoint / rundir.TRAINER_STATE
    if log.is_file() and log.stat().st_size <= 64 << 20:
        shutil.copyfile(log, staging.file(rundir.TRAINER_STATE))


def _write_inference(staging, job: InferJob, engine: Engine, advance) -> np.ndarray:
    """Run the checkpoint over the eval set with `engine`, streaming predictions.parquet, probs.npy and
    hidden_states.npy into the staging area (single files in-process, folders of shards on Ray)."""
    from erroranalysis.infer.classifier import ChunkPredictor
    from erroranalysis.infer.predictions import input_table

    p = job.params
    hidden = staging.shards(rundir.HIDDEN, engine) if p.hidden != "none" else None
    paths = (staging.shards(rundir.PREDICTIONS, engine), staging.shards(rundir.PROBS, engine), hidden)
    if engine.distributed:
        from erroranalysis.stages.inputs import stage_scratch

        with stage_scratch(staging.run_path, ".ids-", engine) as ids:  # the id check's; checks the shared disk
            return _write_on_ray(staging, job, engine, advance, paths, ids)
    inputs = input_table(job.eval_set.frame, job.gold, job.clf.labels, job.eval_set.metadata_columns, job.reading)
    from erroranalysis.engines import local
    from erroranalysis.engines.sinks import FileSink

    predictor = ChunkPredictor(clf=job.clf, batch_size=p.batch_size, max_tokens=p.max_tokens, max_length=p.max_length,
                               precision=p.precision)
    staging.facts["batching"] = [[predictor.batch_size, predictor.max_tokens]]
    counts = local.predict(inputs, predictor, job.clf.labels,
                           FileSink(*paths, n_rows=inputs.num_rows, hidden_dtype=p.hidden), chunk_size=CHUNK_ROWS,
                           progress=advance, reading=job.reading)
    if job.task == "regression" and job.reading.tolerance is None:
        staging.facts["tolerance"] = mark_worst_decile(paths[0])
    return counts


def _write_on_ray(staging, job: InferJob, engine: Engine, advance, paths, ids) -> np.ndarray:
    """`_write_inference` on Ray: the workers read the rows when they can (with --id-column, each block's ids go
    by hash into `ids`, the stage's scratch), else the driver sends them."""
    from erroranalysis.engines import ray_data
    from erroranalysis.infer.predictions import input_table
    from erroranalysis.sources.blocks import Scanned

    p = job.params
    kwargs = {"model": str(job.model.resolve()), "batch_size": p.batch_size, "max_tokens": p.max_tokens,
              "max_length": p.max_length,
              "precision": p.precision, "device": p.device, "trust_remote_code": p.trust_remote_code,
              "task": job.task}
    if isinstance(job.eval_set, Scanned):  # the workers read the rows: the driver holds none
        counts, ran, n_cut = ray_data.predict_source(job.eval_set, job.data_opts, kwargs, job.clf.labels, paths,
                                                     engine, ids_folder=ids,
                                                     chunk_size=CHUNK_ROWS, progress=advance, hidden_dtype=p.hidden)
        staging.facts["read_by"] = "workers"
        staging.facts["n_cut"] = n_cut  # texts cut at --max-chars, counted by the workers
    else:
        inputs = input_table(job.eval_set.frame, job.gold, job.clf.labels, job.eval_set.metadata_columns,
                             job.reading)
        counts, ran = ray_data.predict(inputs, kwargs, job.clf.labels, paths, engine, chunk_size=CHUNK_ROWS,
                                       progress=advance, hidden_dtype=p.hidden, reading=job.reading)
    staging.facts["batching"] = [list(b) for b in ran]  # each worker resolves it for its own device
    return counts


def mark_worst_decile(predictions: Path) -> float:
    """Regression without --tolerance: rewrite the staged predictions' `correct` once every error is known (the
    worst decile of |error| fails); returns the tolerance that decided it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from erroranalysis.infer.predictions import worst_decile

    table = pq.read_table(predictions)
    correct, tolerance = worst_decile(table.column("abs_error").to_numpy())
    table = table.set_column(table.column_names.index("correct"), "correct", pa.array(correct))
    pq.write_table(table, predictions)
    return tolerance
