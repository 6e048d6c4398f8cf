"""Where an engine writes inference outputs: the three artifacts of the infer stage, as single files or shards.

- `FileSink`: one predictions.parquet (streamed row groups), probs.npy and hidden_states.npy (memory-mapped),
  filled chunk by chunk in row order: the in-process engine.
- `ShardSink`: folders predictions.parquet/, probs.npy/, hidden_states.npy/ of `part-<first row>.parquet|.npy`,
  one shard per chunk, each written atomically by whichever process computed it: the Ray engine's workers.
  Shard names carry the first row (zero-padded), so name order is row order for every reader, and a chunk that
  Ray runs twice (a retried task) rewrites the same shard with the same content.

The paths are given by the stage (its staging area); nothing here knows about run directories. `hidden` None
keeps no hidden states; `hidden_dtype` float16 halves them (a training run's step runs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from erroranalysis.core import files, shards
from erroranalysis.core.shards import SHARD


class FileSink:
    """Single files, written in row order; `close()` flushes them."""

    def __init__(self, predictions: Path, probs: Path, hidden: Path | None, n_rows: int,
                 hidden_dtype: str = "float32"):
        self.paths = (Path(predictions), Path(probs), hidden and Path(hidden))
        self.n_rows, self.hidden_dtype = n_rows, hidden_dtype
        self.writer = self.probs = self.hidden = None

    def write(self, start: int, table, out: dict[str, np.ndarray]) -> None:
        import pyarrow.parquet as pq

        m = len(out["probs"])
        if self.probs is None:
            self.probs = np.lib.format.open_memmap(self.paths[1], mode="w+", dtype=np.float32,
                                                   shape=(self.n_rows, out["probs"].shape[1]))
            if self.paths[2] is not None:
                self.hidden = np.lib.format.open_memmap(self.paths[2], mode="w+", dtype=self.hidden_dtype,
                                                        shape=(self.n_rows, out["hidden"].shape[1]))
            self.writer = pq.ParquetWriter(self.paths[0], table.schema)
        self.probs[start:start + m] = out["probs"]
        if self.hidden is not None:
            self.hidden[start:start + m] = out["hidden"]
        self.writer.write_table(table)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.probs.flush()
            if self.hidden is not None:
                self.hidden.flush()


class ShardSink:
    """Folders of shards, one per chunk, in any order and from any process: on a shared disk, or on object storage
    (`core.shards.write`)."""

    def __init__(self, predictions, probs, hidden, hidden_dtype: str = "float32"):
        self.paths = (predictions, probs, hidden)
        self.hidden_dtype = hidden_dtype

    def write(self, start: int, table, out: dict[str, np.ndarray]) -> None:
        import pyarrow.parquet as pq

        predictions, probs, hidden = self.paths
        # the arrays first, the table last: a shard's Parquet part is the sign that the whole chunk is written
        shards.write(probs, SHARD.format(start=start, suffix=".npy"), files.npy_writer(out["probs"]))
        if hidden is not None:
            shards.write(hidden, SHARD.format(start=start, suffix=".npy"), files.npy_writer(out["hidden"], self.hidden_dtype))
        shards.write(predictions, SHARD.format(start=start, suffix=".parquet"), lambda p: pq.write_table(table, p))

    def close(self) -> None:
        pass


def shard_starts(folder, suffix: str) -> list[int]:
    """The first rows of the shards in `folder` (local or on object storage), sorted."""
    return sorted(int(name[len("part-"):-len(suffix)]) for name in shards.names(folder, suffix))

