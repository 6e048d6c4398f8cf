"""Where the batch functions run: in this process (`local`, the default) or on a Ray cluster (`ray`).

Both engines run the same code on each chunk of rows: `erroranalysis.infer.classifier.ChunkPredictor` for
inference, `erroranalysis.embedding.MiniLMEmbedder.__call__` for embedding. `local` feeds the chunks one after
another; `ray` makes the eval set a Ray Dataset and runs them with `map_batches` over actors that each load the
model once, writing shards (`sinks.ShardSink`). Ray is an optional extra: `pip install 'erroranalysis-ml[ray]'`.
"""

from __future__ import annotations

from dataclasses import dataclass

from erroranalysis.errors import UserError
from erroranalysis.params import Choice, Int, Params, Text, param

ENGINES = ("local", "ray")
INSTALL = "pip install 'erroranalysis-ml[ray]'  (or: pip install 'ray[data]')"


class EngineError(UserError):
    """The engine cannot run (Ray missing or unreachable) or did not produce every row."""


@dataclass(frozen=True)
class Engine(Params):
    """Where the batch functions run. For Ray, `address` (None starts a local Ray, "auto" joins the cluster this
    machine belongs to, "HOST:PORT" a given one) and `concurrency` (actors; None: one per GPU when the cluster has
    GPUs and the device allows, else one per CPU)."""

    engine: str = param("local", Choice(*ENGINES), "Where inference and embedding run: local (this process) or ray "
                      "(Ray Data; pip install 'erroranalysis-ml[ray]').", flag="--engine")
    address: str | None = param(None, Text(), "With --engine ray: auto (the cluster this machine is in) or "
                                "HOST:PORT.", flag="--ray-address", none="start a local Ray")
    concurrency: int | None = param(None, Int(1), "With --engine ray: actors.", flag="--ray-actors",
                                    none="one per GPU when the cluster has GPUs, else one per CPU")

    def validate(self) -> None:
        if self.engine == "local" and self.address is not None:
            raise EngineError("--ray-address is only used with --engine ray; add --engine ray or drop it.")

    @property
    def distributed(self) -> bool:
        return self.engine == "ray"

    def record(self) -> dict:
        return {"engine": self.engine, **({"ray_address": self.address} if self.address else {})}


LOCAL = Engine()
