"""Input files that Ray workers read themselves, so the driver holds none of their rows.

A Parquet file is read by the workers in row ranges as it is. A JSONL or CSV file cannot be cut into row ranges
without reading it (a CSV's quoted cells may span lines), so one worker reads it with the in-process reader and
writes a Parquet copy that keeps each row's line number (`erroranalysis.sources.blocks.to_parquet`); the blocks are
read from the copy, their errors naming the user's file and line. A `save_to_disk` folder is copied the same way,
its split's record batches streamed (`--split` chosen as in-process). The copy lives in a hidden folder beside the run
(on the filesystem the workers share with the driver; for a run going to object storage, under the run's objects
there) and goes when the command ends; one left by a command killed with SIGKILL is removed by the next
(`core.files.scratch_folder`, `core.shards.scratch`).

A run's own artifacts are read by the workers where `for_workers` says: a run on object storage at its shards' URL,
a local run in its folder, which every node must see (checked first).
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


def for_workers(run, name: str, engine):
    """Where `engine`'s workers read the run's artifact `name` (`readers.shared_path`: a run on object storage, its
    shards' URL). A local run's folder is first checked to be seen by every node (`engines.shared_disk`), so that a
    stage run alone (`metrics RUN --engine ray`) on a disk some node lacks fails in one line before any work, not on
    a worker's missing file."""
    from erroranalysis.engines.shared_disk import check_shared
    from erroranalysis.rundir import readers

    path = readers.shared_path(run, name)
    if not storage.is_url(path):
        check_shared(run.path, engine)
    return path


@contextlib.contextmanager
def scratch(beside, engine=None) -> Iterator:
    """Where workers write what they read from the inputs, before the run exists: a hidden folder beside `beside`
    (the run's path; for a URL, beside its local mirror), or for a run going to object storage a prefix there
    (`_scratch`)."""
    url = storage.as_location(str(beside)) if storage.is_url(beside) else None
    parent = storage.mirror_of(url).parent if url is not None else Path(beside).resolve().parent
    with _scratch(url, parent, f".{Path(str(beside)).name}.rows-", ".rows-", engine) as folder:
        yield folder


@contextlib.contextmanager
def stage_scratch(run_path, name: str, engine) -> Iterator:
    """Where a distributed stage's workers write what other workers read back (id partitions, duplicate buckets,
    training state): a hidden folder `<name>*` in the run, or for a run being built for object storage a prefix
    there (`_scratch`)."""
    from erroranalysis.rundir import commit

    with _scratch(commit.run_url(run_path), run_path, name, name, engine) as folder:
        yield folder


@contextlib.contextmanager
def _scratch(url, parent, name: str, remote_name: str, engine) -> Iterator:
    """Scratch that other workers read back: under a distributed engine, for a run at object storage URL `url`, the
    prefix `URL/objects/scratch/<remote_name><host>-<pid>-*` (`core.shards.scratch`: no node need see this disk);
    else a hidden folder `<name><host>-<pid>-*` in `parent`, checked to be seen by every node of `engine`'s cluster
    (`engines.shared_disk`). Removed when the block ends; one a SIGKILL left is removed by the next command on this
    host."""
    from erroranalysis.core import shards
    from erroranalysis.engines.shared_disk import check_shared
    from erroranalysis.rundir.remote import OBJECTS

    if url is not None and getattr(engine, "distributed", False):
        with shards.scratch(url / OBJECTS, remote_name) as prefix:
            yield prefix
        return
    with files.scratch_folder(parent, name) as folder:
        check_shared(folder, engine)
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
