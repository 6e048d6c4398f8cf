"""Token classification on Ray Data: the sentences, already read, checked and tokenized by the driver (the same
rules and one-line errors as in-process), go to actors that load the token classifier once each and run the
in-process batch function (`erroranalysis.infer.tokens.predict`) on their block of sentences; each sentence's
outputs (predicted tags, confidences, losses, word vectors) come back to the driver, which builds the tables as the
in-process stage does. The driver checks that every sentence came back exactly once.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable

import numpy as np

from erroranalysis.engines import Engine, EngineError
from erroranalysis.engines.ray_data import ROW, bounded_map, connect, failure_reason

SENTENCES_PER_BLOCK = 1024


class TokenBlockPredictor:
    """The callable class `map_batches` runs: the token classifier loaded once per actor; a block of encoded
    sentences in, their outputs out (pickled: objects of our own, between our own processes)."""

    def __init__(self, model: str, load_kwargs: dict, aggregation: str, batch_size: int):
        from erroranalysis.infer.tokens import load_token_classifier

        self.clf = load_token_classifier(model, **load_kwargs)
        self.aggregation, self.batch_size = aggregation, batch_size

    def __call__(self, batch):
        from erroranalysis.infer.tokens import predict

        encoded = [pickle.loads(b) for b in batch["encoded"]]
        gold = [pickle.loads(b) for b in batch["gold"]]
        outs = predict(self.clf, encoded, gold, aggregation=self.aggregation, batch_size=self.batch_size)
        return {ROW: np.asarray(batch[ROW], dtype=np.int64),
                "out": np.array([pickle.dumps(o) for o in outs], dtype=object)}


def predict_tokens(model, encoded: list, gold: list, *, load_kwargs: dict, aggregation: str, batch_size: int,
                   engine: Engine, progress: Callable[[int], None] | None = None) -> list[dict]:
    """`infer.tokens.predict`'s per-sentence outputs for `encoded` (with `gold` tag ids), computed on Ray actors."""
    connect(engine)
    import ray
    import ray.data

    n = len(encoded)
    device = load_kwargs.get("device", "auto")
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0)) if device in ("auto", "cuda") or device.startswith("cuda") else 0
    if device.startswith("cuda") and not gpus:
        raise EngineError(f"--device {device}: the Ray cluster has no GPUs; use --device auto or cpu, or add GPU "
                          "workers.")
    actors = engine.concurrency or gpus or max(1, int(resources.get("CPU", 1)))
    size = engine.block_rows(n, actors, SENTENCES_PER_BLOCK)
    actors = max(1, min(actors, -(-n // size)))
    items = [{ROW: i, "encoded": pickle.dumps(e), "gold": pickle.dumps([int(t) for t in g])}
             for i, (e, g) in enumerate(zip(encoded, gold))]
    ds = ray.data.from_items(items, override_num_blocks=max(1, -(-n // size)))
    kwargs = {**load_kwargs, "device": "cuda" if gpus else "cpu"}
    done = bounded_map(ds, TokenBlockPredictor, fn_constructor_kwargs={
        "model": str(model), "load_kwargs": kwargs, "aggregation": aggregation, "batch_size": batch_size},
        batch_size=size, batch_format="numpy", num_cpus=1, num_gpus=1.0 if gpus else None,
        compute=ray.data.ActorPoolStrategy(size=actors))
    outs: list = [None] * n
    try:
        for row in done.iter_rows():
            i = int(row[ROW])
            if outs[i] is not None:
                raise EngineError(f"--engine ray: sentence {i} came back twice; nothing was committed, run the "
                                  "command again.")
            outs[i] = pickle.loads(row["out"])
            if progress:
                progress(1)
    except ray.exceptions.RayError as exc:
        raise EngineError(f"--engine ray: the token-classification job failed ({failure_reason(exc)}); nothing was "
                          "committed, run the command again.") from None
    missing = [i for i, o in enumerate(outs) if o is None]
    if missing:
        raise EngineError(f"--engine ray: {len(missing)} sentences did not come back (first: row {missing[0]}); "
                          "nothing was committed, run the command again.")
    return outs
