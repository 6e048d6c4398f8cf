"""Input files that Ray workers read themselves, so the driver holds none of their rows.

A Parquet file is read by the workers in row ranges as it is. A JSONL or CSV file cannot be cut into row ranges
without reading it (a CSV's quoted cells may span lines), so one worker reads it with the in-process reader and
writes a Parquet copy that keeps each row's line number (`erroranalysis.sources.blocks.to_parquet`); the blocks are
read from the copy, their errors naming the user's file and line. A `save_to_disk` folder is copied the same way,
its split's record batches streamed (`--split` chosen as in-process). The copy lives in a hidden folder beside the run
(on the filesystem the workers share with the driver; for a run going to object storage, under the run's objects
there) and goes when the command ends; one left by a command killed with SIGKILL is removed by the next
(`core.files.scratch_folder`, `core.shards.scratch`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from erroranalysis.core import files, storage
from erroranalysis.sources import blocks
from erroranalysis.sources.table import DataOptions, InMemory


def workers_read(data) -> bool:
    """Whether Ray workers can read `data` in blocks: a Parquet, JSONL or CSV file or a `save_to_disk` folder (not
    an in-memory table)."""
    return not isinstance(data, InMemory) and (blocks.readable(data) or blocks.convertible(data))


@contextlib.contextmanager
def scratch(beside, engine=None) -> Iterator:
    """Where workers write what they read from the inputs, before the run exists: for a run going to object storage
    (`beside` a URL) and a distributed engine, a prefix under the run's objects (`core.shards.scratch`: no node need
    see this disk); else a hidden folder beside `beside` (for a URL, beside its local mirror), checked to be seen by
    every node of `engine`'s cluster (`engines.shared_disk`). Removed when the block ends (or by the next command,
    after a SIGKILL)."""
    from erroranalysis.core import shards
    from erroranalysis.engines.shared_disk import check_shared

    if storage.is_url(beside) and getattr(engine, "distributed", False):
        with shards.scratch(storage.as_location(str(beside)) / "objects", ".rows-") as prefix:
            yield prefix
        return
    parent = storage.mirror_of(storage.as_location(str(beside))).parent if storage.is_url(beside) else \
        Path(beside).resolve().parent
    with files.scratch_folder(parent, f".{Path(str(beside)).name}.rows-") as folder:
        check_shared(folder, engine)
        yield folder


@contextlib.contextmanager
def stage_scratch(run_path, name: str, engine) -> Iterator:
    """Where a distributed stage's workers write what other workers read back (id partitions, duplicate buckets,
    training state): for a run being built for object storage, a prefix under its generation (no node need see
    this disk, and a failed run's generation takes it along); else a hidden folder `<name>*` in the run, checked to
    be seen by every node (`engines.shared_disk`). Removed when the block ends."""
    from erroranalysis.core import shards
    from erroranalysis.engines.shared_disk import check_shared
    from erroranalysis.rundir import commit

    generation = commit.generation_of(run_path)
    if generation is not None and getattr(engine, "distributed", False):
        with shards.scratch(generation, name) as prefix:
            yield prefix
        return
    check_shared(run_path, engine)
    with files.scratch_folder(run_path, name) as folder:
        yield folder


@contextlib.contextmanager
def worker_rows(data, opts: DataOptions, engine, beside) -> Iterator[Path | None]:
    """While the block runs: None for a Parquet file (the workers read it), else the path of a JSONL or CSV file's
    (or a `save_to_disk` folder's split's) Parquet copy, made by one worker in a `scratch` folder beside `beside`
    (the run's path)."""
    if blocks.readable(data):
        yield None
        return
    from erroranalysis.engines import ray_data

    with scratch(beside, engine) as folder:
        copy = folder / "rows.parquet"
        ray_data.run_task(blocks.to_parquet, engine, source=data, target=copy, encoding=opts.encoding,
                          split=opts.split)
        yield copy
