"""Where the batch functions run: in this process (`local`, the default) or on a Ray cluster (`ray`).

Both engines run the same code on each chunk of rows: `erroranalysis.infer.classifier.ChunkPredictor` for
inference, `erroranalysis.embedding.MiniLMEmbedder.__call__` for embedding. `local` feeds the chunks one after
another; `ray` makes the eval set a Ray Dataset and runs them with `map_batches` over actors that each load the
model once, writing shards (`sinks.ShardSink`). Ray is an optional extra: `pip install 'erroranalysis-ml[ray]'`.
"""

from __future__ import annotations

from dataclasses import dataclass

from erroranalysis.errors import UserError
from erroranalysis.validation import check_choice, check_int, check_param

ENGINES = ("local", "ray")
INSTALL = "pip install 'erroranalysis-ml[ray]'  (or: pip install 'ray[data]')"


class EngineError(UserError):
    """The engine cannot run (Ray missing or unreachable) or did not produce every row."""


@dataclass(frozen=True)
class Engine:
    """`name` ("local" or "ray"); for Ray, `address` (None starts a local Ray, "auto" joins the cluster this
    machine belongs to, "HOST:PORT" a given one) and `concurrency` (actors; None: one per GPU when the cluster has
    GPUs and the device allows, else one per CPU)."""

    name: str = "local"
    address: str | None = None
    concurrency: int | None = None

    def __post_init__(self):
        check_choice("engine", self.name, ENGINES)
        check_param("ray_address", self.address, self.address is None or (isinstance(self.address, str)
                                                                           and self.address.strip() != ""),
                    "auto or HOST:PORT")
        if self.concurrency is not None:
            check_int("concurrency", self.concurrency, 1)
        if self.name == "local" and self.address is not None:
            raise EngineError("--ray-address is only used with --engine ray; add --engine ray or drop it.")

    @property
    def distributed(self) -> bool:
        return self.name == "ray"

    def record(self) -> dict:
        return {"engine": self.name, **({"ray_address": self.address} if self.address else {})}


LOCAL = Engine()
