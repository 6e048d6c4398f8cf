"""The Ray engine: the eval set as a Ray Dataset, `map_batches` over actors that load the model once each.

The driver reads and validates the eval set with `erroranalysis.sources.table` (the same rules and one-line errors as
in-process, before any worker starts), then hands Ray the rows in blocks: the in-process chunk (`chunk_size`), or
smaller so that every actor gets at least `Engine.blocks_per_actor` blocks (`--ray-blocks-per-actor`); each block
is tokenized, length-sorted and batched as an in-process chunk is. Each actor
(`ShardPredictor`) runs `ChunkPredictor` on its chunks and writes one shard per chunk of predictions, probabilities
and hidden states (`sinks.ShardSink`) into the staging area the stage gave, which must be on a filesystem every
worker sees; it sends back only (first row, rows, confusion counts). The driver sums the confusion counts and
checks that the shards cover every row exactly once before the stage may commit: a worker killed mid-run is
retried by Ray (its chunk rewritten whole) or the run fails; it never looks complete with rows missing.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Callable

import numpy as np

from erroranalysis.core import shards, storage
from erroranalysis.engines import INSTALL, Engine, EngineError
from erroranalysis.engines.sinks import ShardSink, shard_starts

ROW = "_row"
# Ray Data restarts a dead actor, and retries its tasks, for ever by default: a worker that keeps dying (out of
# memory, a bad node) would leave the run retrying until killed. Each actor may restart this often, each task be
# retried this often, and actors that die while loading the model fail the job after this many in a row.
MAX_RESTARTS = 3
MAX_TASK_RETRIES = 3
MAX_INIT_DEATHS = 3


def require_ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise EngineError(f"--engine ray needs Ray Data, which is not installed; install it with: {INSTALL}") from None
    return ray


def connect(engine: Engine):
    """Join the Ray cluster at `engine.address`, or start a local one (None); a no-op when already connected."""
    ray = require_ray()
    if ray.is_initialized():
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        return ray
    os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")  # progress is ours (erroranalysis.core.progress)
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # Ray Data's INFO lines would bury ours
    on_term = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(address=engine.address, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, ignore_reinit_error=True)
    except SystemExit as exc:  # SIGTERM while Ray starts: its handler exits 15; the caller's own decides instead
        if exc.code == signal.SIGTERM and callable(on_term):
            on_term(signal.SIGTERM, None)
        raise
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = engine.address or "a local Ray"
        raise EngineError(f"--engine ray: cannot connect to {where} ({str(exc).splitlines()[0]}); start it with "
                          "'ray start --head' or pass --ray-address HOST:PORT.") from None
    finally:
        # ray.init installs a SIGTERM handler that exits with status 15 from wherever the driver is: the CLI's
        # own (a stage marked interrupted, exit 143) comes back
        if on_term is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_term)
    from ray.data import DataContext

    context = DataContext.get_current()
    context.enable_progress_bars = False
    context.max_consecutive_actor_init_deaths = MAX_INIT_DEATHS
    return ray


def bounded_map(ds, fn, **kwargs):
    """`ds.map_batches(fn, ...)` with retries bounded (MAX_RESTARTS): an actor class's restarts and tasks' retries,
    or a function task's retries. Ray 2.60 has no named parameter for the actors' yet: they go as actor options,
    which it warns will move by 2.64."""
    import warnings

    bounds = ({"max_restarts": MAX_RESTARTS, "max_task_retries": MAX_TASK_RETRIES} if isinstance(fn, type)
              else {"max_retries": MAX_TASK_RETRIES})
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
        return ds.map_batches(fn, **bounds, **kwargs)


class ShardPredictor:
    """The callable class `map_batches` runs: loads the checkpoint once per actor, predicts a chunk, writes its
    shards, returns what the driver checks."""

    def __init__(self, predictor_kwargs: dict, labels: list[str], paths: tuple, hidden_dtype: str = "float32",
                 reading=None):
        from erroranalysis.infer.classifier import ChunkPredictor
        from erroranalysis.infer.predictions import CLASSIFICATION

        self.predict = ChunkPredictor(**predictor_kwargs)
        self.labels = labels
        self.reading = reading or CLASSIFICATION
        self.sink = ShardSink(*[p and shards.location(p) for p in paths], hidden_dtype=hidden_dtype)

    def __call__(self, batch):
        from erroranalysis.infer.predictions import confusion, output_table

        rows = batch.column(ROW).to_numpy()
        order = np.argsort(rows, kind="stable")
        batch, rows = batch.take(order), rows[order]
        starts, sizes, counts = [], [], []
        for run in np.split(np.arange(len(rows)), np.flatnonzero(np.diff(rows) != 1) + 1):
            chunk = batch.slice(int(run[0]), len(run))
            out = self.predict(chunk)
            self.sink.write(int(rows[run[0]]), output_table(chunk, self.labels, out, self.reading), out)
            starts.append(int(rows[run[0]]))
            sizes.append(len(run))
            counts.append(confusion(chunk, out, len(self.labels), self.reading).ravel())
        n = len(starts)
        return {"start": np.asarray(starts, np.int64), "rows": np.asarray(sizes, np.int64),
                "confusion": np.stack(counts),  # and the batching this worker resolved for its device:
                "batching": np.tile([self.predict.batch_size, self.predict.max_tokens], (n, 1)).astype(np.int64)}


class SourcePredictor(ShardPredictor):
    """`ShardPredictor` over row ranges (start, rows) of a Parquet eval set that each worker reads itself
    (`erroranalysis.sources.blocks`: the in-process validation, per block): the driver sends two integers per block and
    gets back counts, never rows."""

    def __init__(self, predictor_kwargs: dict, labels: list[str], paths: tuple, hidden_dtype: str = "float32",
                 source=None, options=None, sources: dict | None = None, sha256: str = "", rows_path=None,
                 ids_folder=None):
        super().__init__(predictor_kwargs, labels, paths, hidden_dtype)
        from erroranalysis.sources import blocks

        self.source, self.options, self.sources, self.sha256 = source, options, sources or {}, sha256
        self.ids_folder = ids_folder  # with --id-column, where each block's ids go by hash (`blocks.write_id_parts`)
        self.file = blocks.parquet_file(rows_path if rows_path is not None else source)  # a JSONL/CSV file's copy

    def __call__(self, batch):
        from erroranalysis.core.errors import UserError
        from erroranalysis.infer.predictions import confusion, input_table, output_table
        from erroranalysis.sources import blocks

        k = len(self.labels)
        found = {"start": [], "rows": [], "confusion": [], "n_cut": [], "error": []}
        for start, rows in zip(batch.column("start").to_pylist(), batch.column("rows").to_pylist()):
            try:
                eval_set, gold = blocks.block(self.source, start, rows, self.options, self.labels,
                                              sha256=self.sha256, file=self.file)
            except UserError as exc:  # a bad value in this block: sent back as data (Ray would keep only its text
                # inside a traceback), so the driver raises the in-process one-line error
                found["start"].append(start)
                found["rows"].append(0)
                found["confusion"].append(np.zeros(k * k, np.int64))
                found["n_cut"].append(0)
                found["error"].append(f"{type(exc).__name__}\t{exc}")
                continue
            chunk = blocks.conform(input_table(eval_set.frame, gold, self.labels, eval_set.metadata_columns),
                                   self.file.schema_arrow, self.sources)
            out = self.predict(chunk)
            self.sink.write(start, output_table(chunk, self.labels, out), out)
            found["start"].append(start)
            found["rows"].append(rows)
            found["confusion"].append(confusion(chunk, out, k).ravel())
            found["n_cut"].append(int(eval_set.frame["_cut"].sum()))
            if self.options.id_column:
                blocks.write_id_parts(self.ids_folder, start, eval_set.frame["example_id"], eval_set.frame["_line"])
            found["error"].append("")
        n = len(found["start"])
        return {"start": np.asarray(found["start"], np.int64), "rows": np.asarray(found["rows"], np.int64),
                "confusion": np.stack(found["confusion"]), "n_cut": np.asarray(found["n_cut"], np.int64),
                "error": np.asarray(found["error"], dtype=object),
                "batching": np.tile([self.predict.batch_size, self.predict.max_tokens], (n, 1)).astype(np.int64)}


def _blocks(table, chunk_size: int) -> list:
    import pyarrow as pa

    table = table.append_column(ROW, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    return [table.slice(start, chunk_size) for start in range(0, table.num_rows, chunk_size)]


def plan(table, engine: Engine, actors: int, chunk_size: int) -> tuple[list, int]:
    """(blocks, actors): `table` cut into blocks of `engine.block_rows` rows, and no more actors than blocks."""
    blocks = _blocks(table, engine.block_rows(table.num_rows, actors, chunk_size))
    return blocks, max(1, min(actors, len(blocks)))


def _actors(ray, engine: Engine, device: str) -> tuple[int, float]:
    """(actors, GPUs per actor): one actor per GPU when the cluster has GPUs and the device allows, else one per
    CPU; `engine.concurrency` overrides the count."""
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0)) if device in ("auto", "cuda") or device.startswith("cuda") else 0
    count = gpus if gpus else max(1, int(resources.get("CPU", 1)))
    return engine.concurrency or count, 1.0 if gpus else 0.0


def _start(ray, engine: Engine, predictor_kwargs: dict, paths: tuple) -> tuple[int, float]:
    """The shard folders made, and (actors, GPUs per actor) for the device asked."""
    for folder in paths:
        if folder is not None and not storage.is_url(folder):  # object storage has no folders to make
            Path(folder).mkdir(parents=True, exist_ok=True)
    device = predictor_kwargs.get("device", "auto")
    actors, gpus = _actors(ray, engine, device)
    if device.startswith("cuda") and not gpus:
        raise EngineError(f"--device {device}: the Ray cluster has no GPUs; use --device auto or cpu, or add GPU "
                          "workers.")
    return actors, gpus


def predict(inputs, predictor_kwargs: dict, labels: list[str], paths: tuple, engine: Engine, *,
            chunk_size: int = 4096, progress: Callable[[int], None] | None = None,
            hidden_dtype: str = "float32", reading=None) -> np.ndarray:
    """Inference over `inputs` (an `input_table`) on Ray, shards into `paths` (predictions, probs, hidden or None);
    the summed confusion counts and the (rows, tokens) batching the workers ran, each distinct one once."""
    ray = connect(engine)  # Ray with ray.data imported
    actors, gpus = _start(ray, engine, predictor_kwargs, paths)
    kwargs = {**predictor_kwargs, "device": "cuda" if gpus else "cpu"}
    blocks, actors = plan(inputs, engine, actors, chunk_size)
    chunk_size = blocks[0].num_rows
    ds = ray.data.from_arrow(blocks)
    done = bounded_map(ds, ShardPredictor, fn_constructor_kwargs={"predictor_kwargs": kwargs, "labels": labels,
                                                                  "paths": tuple(p and str(p) for p in paths),
                                                                  "hidden_dtype": hidden_dtype,
                                                                  "reading": reading},
                       batch_size=chunk_size, batch_format="pyarrow", num_cpus=1, num_gpus=gpus or None,
                       compute=ray.data.ActorPoolStrategy(size=actors))
    k = len(labels)
    counts = np.zeros((k, k), dtype=np.int64)
    covered: dict[int, int] = {}
    ran: set[tuple[int, int]] = set()
    try:
        for row in done.iter_rows():
            covered[int(row["start"])] = int(row["rows"])
            counts += np.asarray(row["confusion"], dtype=np.int64).reshape(k, k)
            ran.add(tuple(int(v) for v in row["batching"]))
            if progress:
                progress(int(row["rows"]))
    except ray.exceptions.RayError as exc:
        raise EngineError(f"--engine ray: the inference job failed ({failure_reason(exc)}); nothing was committed, "
                          "run the command again.") from None
    check_coverage(covered, inputs.num_rows, paths)
    return counts, sorted(ran)


def predict_source(scanned, options, predictor_kwargs: dict, labels: list[str], paths: tuple, engine: Engine, *,
                   ids_folder, chunk_size: int = 4096, progress: Callable[[int], None] | None = None,
                   hidden_dtype: str = "float32") -> tuple[np.ndarray, list, int]:
    """`predict` with the workers reading the eval set (`scanned`, an `erroranalysis.sources.blocks.Scanned` Parquet file)
    themselves: the driver holds its row ranges and the summed counts; with an id column the workers write each
    block's ids by hash into `ids_folder` (the stage's scratch: a folder, or a prefix on object storage), where one
    task per part checks them unique (`blocks.write_id_parts`). Returns (confusion counts, batching, texts cut)."""
    from erroranalysis.sources import blocks

    ray = connect(engine)  # Ray with ray.data imported
    actors, gpus = _start(ray, engine, predictor_kwargs, paths)
    n_rows = scanned.n_rows
    size = engine.block_rows(n_rows, actors, chunk_size)
    starts = list(range(0, n_rows, size))
    actors = max(1, min(actors, len(starts)))
    ranges = [{"start": s, "rows": min(size, n_rows - s)} for s in starts]
    ds = ray.data.from_items(ranges, override_num_blocks=len(ranges))
    kwargs = {"predictor_kwargs": {**predictor_kwargs, "device": "cuda" if gpus else "cpu"}, "labels": labels,
              "paths": tuple(p and str(p) for p in paths), "hidden_dtype": hidden_dtype, "source": scanned.path,
              "options": options, "sources": scanned.sources, "sha256": scanned.sha256, "rows_path": scanned.rows_path,
              "ids_folder": str(ids_folder)}
    done = bounded_map(ds, SourcePredictor, fn_constructor_kwargs=kwargs, batch_size=1, batch_format="pyarrow",
                       num_cpus=1, num_gpus=gpus or None, compute=ray.data.ActorPoolStrategy(size=actors))
    k = len(labels)
    counts = np.zeros((k, k), dtype=np.int64)
    covered: dict[int, int] = {}
    ran: set[tuple[int, int]] = set()
    n_cut = 0
    try:
        for row in done.iter_rows():
            if row["error"]:
                raise block_error(row["error"])
            start, rows = int(row["start"]), int(row["rows"])
            covered[start] = rows
            counts += np.asarray(row["confusion"], dtype=np.int64).reshape(k, k)
            ran.add(tuple(int(v) for v in row["batching"]))
            n_cut += int(row["n_cut"])
            if progress:
                progress(rows)
    except ray.exceptions.RayError as exc:
        raise EngineError(f"--engine ray: the inference job failed ({failure_reason(exc)}); nothing was committed, "
                          "run the command again.") from None
    check_coverage(covered, n_rows, paths)
    if options.id_column:
        parts = blocks.id_parts(kwargs["ids_folder"])
        blocks.duplicate_error(run_tasks(blocks.first_duplicate, engine, parts), scanned.path, options)
    return counts, sorted(ran), n_cut


def run_task(fn: Callable, engine: Engine, **kwargs):
    """`fn(**kwargs)` as one Ray task (a worker reads what the driver must not hold), its small result; a UserError
    it raises comes back as the same one-line error."""
    return run_tasks(fn, engine, [kwargs])[0]


def run_tasks(fn: Callable, engine: Engine, calls: list[dict]) -> list:
    """`fn(**kwargs)` for each of `calls` as Ray tasks at once: their small results in order (`run_task`)."""
    ray = connect(engine)
    task = ray.remote(_one_task).options(num_cpus=1, max_retries=MAX_TASK_RETRIES)
    try:
        done = ray.get([task.remote(fn, kwargs) for kwargs in calls])
    except ray.exceptions.RayError as exc:
        raise EngineError(f"--engine ray: a worker task failed ({failure_reason(exc)}); nothing was committed, run "
                          "the command again.") from None
    for _, error in done:
        if error:
            raise block_error(error)
    return [result for result, _ in done]


def _one_task(fn: Callable, kwargs: dict):
    from erroranalysis.core.errors import UserError

    try:
        return fn(**kwargs), ""
    except UserError as exc:  # sent back as data: Ray would keep only its text inside a traceback
        return None, f"{type(exc).__name__}\t{exc}"


def block_error(sent: str):
    """The UserError a worker sent back for its block ("ClassName\tmessage"), as that class of erroranalysis.core.errors
    (DataError when it is another)."""
    from erroranalysis.core import errors

    name, _, message = sent.partition("\t")
    kind = getattr(errors, name, None)
    if not (isinstance(kind, type) and issubclass(kind, errors.UserError)) or kind is errors.ParameterError:
        kind = errors.DataError
    return kind(message)


def check_coverage(covered: dict[int, int], n_rows: int, paths) -> None:
    """Every row in exactly one chunk, and every chunk's three shards on disk; else EngineError."""
    expected, at = sorted(covered), 0
    for start in expected:
        if start != at:
            raise EngineError(f"--engine ray: rows {at} to {start - 1} of {n_rows} came back from no worker; the "
                              "run is incomplete and was not committed.")
        at = start + covered[start]
    if at != n_rows:
        raise EngineError(f"--engine ray: {at} of {n_rows} rows came back; the run is incomplete and was not "
                          "committed.")
    for folder, suffix in zip(paths, (".parquet", ".npy", ".npy")):
        if folder is None:
            continue
        on_disk = shard_starts(folder, suffix)
        if on_disk != expected:
            missing = sorted(set(expected) - set(on_disk))
            raise EngineError(f"--engine ray: {shards.location(folder).name} lacks the shards of rows {missing[:3]} (the "
                              "workers' filesystem is not the driver's?); put the run directory on a filesystem "
                              "every node shares.")


def embed_texts(texts: list[str], embedder, engine: Engine, *, chunk_size: int = 4096) -> np.ndarray:
    """`embedder.__call__` (the `map_batches` form of `MiniLMEmbedder`) over `texts` on Ray; vectors in order."""
    connect(engine)
    import pyarrow as pa
    import ray
    import ray.data

    if not texts:
        return embedder.embed_texts(texts)
    table = pa.table({"text": pa.array(texts, pa.string())})
    actors, gpus = _actors(ray, engine, embedder.device)
    blocks, actors = plan(table, engine, actors, chunk_size)
    chunk_size = blocks[0].num_rows
    ds = ray.data.from_arrow(blocks)
    embedded = bounded_map(ds, type(embedder), fn_constructor_kwargs=embedder.constructor_kwargs(),
                           batch_size=chunk_size, batch_format="numpy", num_cpus=1, num_gpus=gpus or None,
                           compute=ray.data.ActorPoolStrategy(size=actors))
    out, seen = None, np.zeros(len(texts), dtype=bool)
    try:
        for batch in embedded.iter_batches(batch_format="numpy", batch_size=None):
            vectors = np.stack(batch["embedding"]).astype(np.float32)
            if out is None:
                out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
            out[batch[ROW]] = vectors
            seen[batch[ROW]] = True
    except ray.exceptions.RayError as exc:
        raise EngineError(f"--engine ray: the embedding job failed ({failure_reason(exc)}); run the command "
                          "again.") from None
    if not seen.all():
        raise EngineError(f"--engine ray: {int((~seen).sum())} of {len(texts)} texts came back without a vector; "
                          "run the command again.")
    return out


def failure_reason(exc: BaseException) -> str:
    """Why a Ray job failed, in words: a worker that kept dying says so (with the bounds), else Ray's first line."""
    import ray

    if isinstance(exc, (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnavailableError,
                        ray.exceptions.WorkerCrashedError)):
        return (f"a worker process kept dying: each may restart {MAX_RESTARTS} times and each batch be retried "
                f"{MAX_TASK_RETRIES} times; look for out-of-memory kills on the nodes ({_first_line(exc)})")
    return _first_line(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return next((line for line in text if line.strip()), type(exc).__name__)[:200]
