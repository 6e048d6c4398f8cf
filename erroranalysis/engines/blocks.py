"""A pure function over the blocks of a Parquet artifact, run where the rows are: the driver holds aggregates only.

`map_blocks(fn, path, engine)` cuts a Parquet file, or a folder of `part-*.parquet` shards, into blocks of rows
from its footers alone (`plan`: no row is read on the driver), then calls `fn(table, block, **kwargs)` on each:
in this process one block after another (`engine` None or local), or as Ray Data tasks, each of which reads its own
block (`read`) from the shared disk or object storage. `fn` returns a small partial result (counts, sums, a
bounded sample) that the caller merges; it may also write a shard of per-row output with `write_shard` into a
staging folder the stage gave, named by the block's first row so that name order is row order, as the inference
shards are (`erroranalysis.engines.sinks`). A `UserError` raised in a block comes back as the same one-line error
on the driver; a worker that keeps dying fails the job with the reason (`ray_data.failure_reason`).

Results arrive in any order under Ray; `map_blocks(..., ordered=True)` returns them in row order (they are small).
`call_on_worker(fn, engine, **kwargs)` runs one step on a bounded sample (a model fit) as a single Ray task,
so that the driver never holds its model or vectors; `call_each(fn, engine, calls)` runs one task per call (one per
partition of a join, say) at once.
"""

from __future__ import annotations

import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from erroranalysis.core import files, shards

ROWS_PER_BLOCK = files.ROW_GROUP  # a block is a row group of the run's own Parquet files
SHARD = shards.SHARD.replace("{suffix}", ".parquet")  # a Parquet shard: `part-<first row>.parquet`


@dataclass(frozen=True)
class Block:
    """Rows `start`..`start + rows` of the whole artifact: rows `offset`.. of `file`, in its row groups `groups`
    (`first_row`: the first row of `groups[0]` in the file)."""

    file: str
    start: int
    rows: int
    offset: int
    groups: tuple[int, ...]
    first_row: int

    @property
    def stop(self) -> int:
        return self.start + self.rows


def files_of(path) -> list[str]:
    """A Parquet artifact's files in row order (`core.shards.parts`): the file itself, a folder's shards, or the
    shards on object storage its pointer names (as URLs)."""
    return [str(p) for p in shards.parts(path, ".parquet")]


def null_counts(path, columns: list[str]) -> dict[str, int]:
    """Each of `columns`' missing cells in a Parquet artifact (a file or a folder of shards), from the footers'
    statistics, which the run's own files carry; a row group without them has that column read. A column the files
    lack counts 0 (the readers name it missing)."""
    counts = dict.fromkeys(columns, 0)
    for name in files_of(path):
        file = shards.open_parquet(name)
        leaves = {file.schema.column(i).path: i for i in range(file.metadata.num_columns)}
        for g in range(file.metadata.num_row_groups):
            group = file.metadata.row_group(g)
            for column in (c for c in columns if c in leaves):
                stats = group.column(leaves[column]).statistics
                counts[column] += (stats.null_count if stats is not None and stats.has_null_count else
                                   file.read_row_group(g, columns=[column]).column(0).null_count)
    return counts


def plan(path, rows_per_block: int | None = None) -> list[Block]:
    """The blocks of `path` from the footers only: whole row groups, as many as fit in `rows_per_block` rows (a
    larger row group is cut into blocks of that size), never across files. A row group is the smallest read
    Parquet allows, so each cut of one reads all of it: the run's own artifacts are written in row groups of
    `core.files.ROW_GROUP` rows, the block size, so each of their blocks reads its rows once."""
    rows_per_block = rows_per_block or ROWS_PER_BLOCK
    blocks, start = [], 0
    for file in files_of(path):
        try:
            meta = shards.open_parquet(file).metadata
        except Exception as exc:  # pyarrow's own types
            raise _unreadable(file, exc) from None
        offset, pending = 0, []  # pending: the row groups (index, rows) of the block being filled
        for i in range(meta.num_row_groups):
            size = meta.row_group(i).num_rows
            if pending and sum(rows for _, rows in pending) + size > rows_per_block:
                blocks.append(_whole(file, start, offset, pending))
                offset += sum(rows for _, rows in pending)
                pending = []
            if size > rows_per_block:  # cut: each cut reads the whole group (a file the run did not write)
                blocks.extend(Block(file, start + offset + cut, min(rows_per_block, size - cut), offset + cut, (i,),
                                    offset) for cut in range(0, size, rows_per_block))
                offset += size
            elif size:
                pending.append((i, size))
        if pending:
            blocks.append(_whole(file, start, offset, pending))
            offset += sum(rows for _, rows in pending)
        start += offset
    return blocks


def _whole(file: str, start: int, offset: int, groups: list[tuple[int, int]]) -> Block:
    return Block(file, start + offset, sum(rows for _, rows in groups), offset, tuple(i for i, _ in groups), offset)


def n_rows(blocks: list[Block]) -> int:
    return blocks[-1].stop if blocks else 0


def read(block: Block, columns=None):
    """The block's rows (an Arrow table), only `columns` when given."""
    try:
        table = shards.open_parquet(block.file).read_row_groups(list(block.groups), columns=columns)
    except Exception as exc:  # pyarrow's own types; its messages can quote cells, so only the kind is said
        raise _unreadable(block.file, exc) from None
    return table.slice(block.offset - block.first_row, block.rows)


def read_npy_rows(path, block: Block):
    """Rows `block.start`..`block.stop` of an array artifact beside the Parquet one (probs.npy, hidden_states.npy):
    one .npy file, or the shards that cover them (`core.shards.parts`: local, or on object storage)."""
    import numpy as np

    wanted, first = [], 0  # shards in name order are row order, as every reader takes them (rundir.formats.npy):
    try:  # offsets from their lengths (headers only), no number parsed from a name
        for shard in shards.parts(path, ".npy"):
            if first >= block.stop:
                break
            length = shards.npy_shape(shard)[0]
            if first + length > block.start:
                wanted.append(shards.npy_rows(shard, max(0, block.start - first), block.stop - first))
            first += length
    except (OSError, ValueError) as exc:
        raise _unreadable(path, exc) from None
    return np.concatenate(wanted) if wanted else np.zeros((0, 0), np.float32)


def _unreadable(file, exc: Exception):
    """The run's own file damaged: the one-line error every reader gives (`rundir.formats`), raised on a worker or
    here alike."""
    from erroranalysis.core.errors import RunError

    return RunError(f"{file}: unreadable, damaged ({type(exc).__name__}); run the stage that writes it again.")


def write_shard(folder, block: Block, table) -> None:
    """Write `table` (this block's per-row output) as the shard of its first row, whole (`core.shards.write`: on
    a local disk or object storage): a task that Ray runs twice writes the same shard with the same content."""
    import pyarrow.parquet as pq

    shards.write(folder, SHARD.format(start=block.start), lambda p: pq.write_table(table, p))


def map_blocks(fn: Callable, path, engine=None, *, columns=None, kwargs: dict | None = None,
               rows_per_block: int | None = None, ordered: bool = False,
               progress: Callable[[int], None] | None = None) -> list[tuple[Block, Any]] | Iterator:
    """`fn(table, block, **kwargs)` over every block of the Parquet artifact at `path`: (block, result) pairs,
    as they come (an iterator) or, `ordered`, a list in row order. `progress(rows)` after each block."""
    blocks = plan(path, rows_per_block or ROWS_PER_BLOCK)  # read at call time: tests set the module's value
    if engine is not None and engine.distributed:
        results = _on_ray(fn, blocks, engine, columns, kwargs or {})
    else:
        results = ((b, fn(read(b, columns), b, **(kwargs or {}))) for b in blocks)
    results = _reporting(results, progress)
    return sorted(results, key=lambda pair: pair[0].start) if ordered else results


def call_on_worker(fn: Callable, engine=None, **kwargs) -> Any:
    """`fn(**kwargs)` as one Ray task (a worker process) under a distributed engine, else here: for a step on a
    bounded sample whose model and vectors the driver must not hold (the cluster stage's fit). `fn` is a
    module-level function; a UserError raised in it is raised here as the same one-line error. It computes with
    this process's number of BLAS threads (and torch's, when torch is loaded here), which set how sums are rounded:
    it answers as it would have here (a Ray worker's default is one thread)."""
    if engine is None or not getattr(engine, "distributed", False):
        return fn(**kwargs)
    from threadpoolctl import threadpool_info

    from erroranalysis.engines.ray_data import run_task

    threads = max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), default=None)
    torch = sys.modules.get("torch")
    return run_task(_with_threads, engine, step=fn, kwargs=kwargs, threads=threads,
                    torch_threads=torch.get_num_threads() if torch is not None else None)


def call_each(fn: Callable, engine, calls: list[dict]) -> list:
    """`fn(**call)` for each of `calls`, their results in order: Ray tasks at once under a distributed engine
    (`ray_data.run_tasks`), else one after another here. `fn` is a module-level function; a UserError raised in it
    is raised here as the same one-line error."""
    if engine is not None and engine.distributed:
        from erroranalysis.engines.ray_data import run_tasks

        return run_tasks(fn, engine, calls)
    return [fn(**call) for call in calls]


def _with_threads(step: Callable, kwargs: dict, threads: int | None, torch_threads: int | None) -> Any:
    from threadpoolctl import threadpool_limits

    if torch_threads:
        import torch

        torch.set_num_threads(torch_threads)
    with threadpool_limits(limits=threads, user_api="blas"):
        return step(**kwargs)


def _reporting(results, progress):
    for block, result in results:
        if progress:
            progress(block.rows)
        yield block, result


class _Task:
    """What a Ray task runs on one block: read it, call `fn`, send back the pickled result (or the UserError's
    class and text, which the driver raises as the in-process error)."""

    def __init__(self, fn, blocks, columns, kwargs):
        self.fn, self.blocks, self.columns, self.kwargs = fn, blocks, columns, kwargs

    def __call__(self, batch: dict) -> dict:
        import numpy as np

        from erroranalysis.core.errors import UserError

        out, errors = [], []
        for i in batch["i"]:
            block = self.blocks[int(i)]
            try:
                out.append(pickle.dumps(self.fn(read(block, self.columns), block, **self.kwargs)))
                errors.append("")
            except UserError as exc:
                out.append(b"")
                errors.append(f"{type(exc).__name__}\t{exc}")
        return {"i": np.asarray(batch["i"]), "result": np.asarray(out, dtype=object),
                "error": np.asarray(errors, dtype=object)}


def _on_ray(fn, blocks: list[Block], engine, columns, kwargs) -> Iterator[tuple[Block, Any]]:
    from erroranalysis.engines import EngineError
    from erroranalysis.engines.ray_data import block_error, bounded_map, connect, failure_reason

    ray = connect(engine)  # Ray with ray.data imported
    if not blocks:
        return
    items = ray.data.from_items([{"i": i} for i in range(len(blocks))], override_num_blocks=len(blocks))
    task = _Task(fn, blocks, columns, kwargs)
    done = bounded_map(items, _call, fn_kwargs={"task": task}, batch_size=1, batch_format="numpy", num_cpus=1,
                       concurrency=engine.concurrency)
    seen = set()
    try:
        for row in done.iter_rows():
            if row["error"]:
                raise block_error(row["error"])
            i = int(row["i"])
            if i not in seen:  # a retried task may report twice; its result is the same
                seen.add(i)
                yield blocks[i], pickle.loads(row["result"])
    except ray.exceptions.RayError as exc:
        raise EngineError(f"--engine ray: a job over {Path(blocks[0].file).name} failed ({failure_reason(exc)}); "
                          "nothing was committed, run the command again.") from None
    if len(seen) != len(blocks):
        raise EngineError(f"--engine ray: {len(blocks) - len(seen)} of {len(blocks)} blocks came back from no "
                          "worker; nothing was committed, run the command again.")


def _call(batch: dict, task: _Task) -> dict:
    return task(batch)
