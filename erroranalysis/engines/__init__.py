"""Where the batch functions run: in this process (`local`, the default) or on a Ray cluster (`ray`).

Inference and embedding run per chunk (below); the stages after them run per block of the run's Parquet artifacts
(`erroranalysis.engines.blocks.map_blocks`), the driver merging what each block sends back.

Both engines run the same code on each chunk of rows: `erroranalysis.infer.classifier.ChunkPredictor` for
inference, `erroranalysis.embed.models.MiniLMEmbedder.__call__` for embedding. `local` feeds the chunks one after
another; `ray` makes the eval set a Ray Dataset and runs them with `map_batches` over actors that each load the
model once, writing shards (`sinks.ShardSink`). Ray is an optional extra: `pip install 'erroranalysis-ml[ray]'`.
"""

from __future__ import annotations

from dataclasses import dataclass

from erroranalysis.core.errors import UserError
from erroranalysis.core.params import Choice, Int, Params, Text, param

ENGINES = ("local", "ray")
INSTALL = "pip install 'erroranalysis-ml[ray]'  (or: pip install 'ray[data]')"


class EngineError(UserError):
    """The engine cannot run (Ray missing or unreachable) or did not produce every row."""


@dataclass(frozen=True)
class Engine(Params):
    """Where the batch functions run. For Ray, `address` (None starts a local Ray, "auto" joins the cluster this
    machine belongs to, "HOST:PORT" a given one), `concurrency` (actors; None: one per GPU when the cluster has
    GPUs and the device allows, else one per CPU) and `blocks_per_actor` (how finely the rows are cut)."""

    engine: str = param("local", Choice(*ENGINES), "Where inference and the stages after it run: local (this "
                      "process) or ray (Ray Data; pip install 'erroranalysis-ml[ray]').", flag="--engine")
    address: str | None = param(None, Text(), "With --engine ray: auto (the cluster this machine is in) or "
                                "HOST:PORT.", flag="--ray-address", none="start a local Ray")
    concurrency: int | None = param(None, Int(1), "With --engine ray: actors.", flag="--ray-actors",
                                    none="one per GPU when the cluster has GPUs, else one per CPU")
    blocks_per_actor: int = param(4, Int(1), "With --engine ray: cut the rows into at least this many blocks per "
                                  "actor (smaller blocks than the 4,096-row chunk when the eval set is small), so "
                                  "every actor gets work and a slow one holds up little.",
                                  flag="--ray-blocks-per-actor")

    def validate(self) -> None:
        if self.engine == "local" and self.address is not None:
            raise EngineError("--ray-address is only used with --engine ray; add --engine ray or drop it.")

    def block_rows(self, n_rows: int, actors: int, chunk_rows: int) -> int:
        """Rows per Ray block: the in-process chunk, or less, so that `n_rows` make at least `blocks_per_actor`
        blocks for each of `actors` (Ray leaves an actor idle, and warns, when it has fewer blocks than actors)."""
        wanted = actors * self.blocks_per_actor
        return max(1, min(chunk_rows, -(-n_rows // wanted)))

    @property
    def distributed(self) -> bool:
        return self.engine == "ray"

    def record(self) -> dict:
        return {"engine": self.engine, **({"ray_address": self.address} if self.address else {})}


LOCAL = Engine()
