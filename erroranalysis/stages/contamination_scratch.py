"""The scratch files of a generation run's contamination checks under `--engine ray` (`contamination_ray`): per-block
shards named by their first row (name order is row order) in folders every worker sees, the hash partitions, and the
training prompts and ids read back by row number."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from erroranalysis.datachecks import contamination_blocks as cb
from erroranalysis.engines import blocks as eb


def write(folder: Path, name: str, table) -> None:
    """`table` as the Parquet file `name` of `folder`, atomically (a task Ray runs twice writes the same file)."""
    import pyarrow.parquet as pq

    from erroranalysis.core import files

    folder.mkdir(parents=True, exist_ok=True)
    files.atomic_write(folder / name, lambda f: pq.write_table(table, f))


def read(folder: Path):
    """The Parquet files of `folder` in name order (the first row in each name: row order), as one table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shards = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
    return pa.concat_tables([pq.read_table(s) for s in shards]) if shards else None


def by_part(scratch: str, kind: str, block, hashes: np.ndarray, n_parts: int, **columns) -> None:
    """A block's `hashes` (with `columns` row by row) into the folder of their hash partition, `kind/<part>`."""
    import pyarrow as pa

    part = cb.part_of(hashes, n_parts)
    for p in np.unique(part):
        mine = part == p
        write(Path(scratch) / kind / str(p), eb.SHARD.format(start=block.start),
               pa.table({"hash": hashes[mine], **{k: v[mine] for k, v in columns.items()}}))


class TrainRows:
    """A column of the training rows (`prompts` scratch shards) by row number, each shard read once when needed."""

    def __init__(self, scratch: str, starts: list[int], column: str, n: int = 0):
        self.folder, self.starts, self.column, self.n = Path(scratch) / "prompts", np.asarray(starts), column, n
        self.shards: dict[int, list] = {}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, row):
        import pyarrow.parquet as pq

        b = int(np.searchsorted(self.starts, row, side="right") - 1)
        if b not in self.shards:
            shard = self.folder / eb.SHARD.format(start=int(self.starts[b]))
            self.shards[b] = pq.read_table(shard, columns=[self.column]).column(0).to_pylist()
        return self.shards[b][int(row) - int(self.starts[b])]
