"""The scratch files of a generation run's contamination checks under `--engine ray` (`contamination_ray`): per-block
shards named by their first row (name order is row order) in the stage's scratch (`inputs.stage_scratch`: a hidden
folder of the run every worker sees, or a prefix on object storage for a run built there), the hash partitions, and
the training prompts and ids read back by row number. Every read and write goes through `core.shards`, so one code
serves a folder and a prefix; the scratch reaches the tasks as a string (`shards.location` turns it back)."""

from __future__ import annotations

import numpy as np

from erroranalysis.core import shards
from erroranalysis.datachecks import contamination_blocks as cb
from erroranalysis.engines import blocks as eb


def at(scratch, *names: str):
    """The folder `names` of the scratch `scratch` (a path or URL, or its string): a local Path or an ObjectPath."""
    folder = shards.location(scratch)
    for name in names:
        folder = folder / name
    return folder


def write(folder, name: str, table) -> None:
    """`table` as the Parquet file `name` of `folder`, whole (a task Ray runs twice writes the same file)."""
    import pyarrow.parquet as pq

    shards.write(folder, name, lambda f: pq.write_table(table, f), digest=False)


def read(folder):
    """The Parquet files of `folder` in name order (the first row in each name: row order), as one table."""
    import pyarrow as pa

    folder = shards.location(folder)
    names = shards.listed(folder, ".parquet")
    return pa.concat_tables([shards.read_table(folder / n) for n in names]) if names else None


def by_part(scratch: str, kind: str, block, hashes: np.ndarray, n_parts: int, **columns) -> None:
    """A block's `hashes` (with `columns` row by row) into the folder of their hash partition, `kind/<part>`."""
    import pyarrow as pa

    part = cb.part_of(hashes, n_parts)
    for p in np.unique(part):
        mine = part == p
        write(at(scratch, kind, str(p)), eb.SHARD.format(start=block.start),
              pa.table({"hash": hashes[mine], **{k: v[mine] for k, v in columns.items()}}))


class TrainRows:
    """A column of the training rows (`prompts` scratch shards) by row number, each shard read once when needed."""

    def __init__(self, scratch: str, starts: list[int], column: str, n: int = 0):
        self.folder, self.starts, self.column, self.n = at(scratch, "prompts"), np.asarray(starts), column, n
        self.shards: dict[int, list] = {}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, row):
        b = int(np.searchsorted(self.starts, row, side="right") - 1)
        if b not in self.shards:
            shard = self.folder / eb.SHARD.format(start=int(self.starts[b]))
            self.shards[b] = shards.read_table(shard, columns=[self.column]).column(0).to_pylist()
        return self.shards[b][int(row) - int(self.starts[b])]
