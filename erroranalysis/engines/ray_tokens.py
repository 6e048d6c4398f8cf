"""Token classification on Ray Data: actors that load the token classifier once each.

`run_blocks` (an eval set the workers read): the driver sends each actor row ranges (start, rows) and a block
function (`erroranalysis.stages.tokens_ray.token_block`) that reads, checks, tokenizes and predicts its rows with
the in-process functions and writes their shards; only counts come back, or the block's one-line error, which the
driver raises (the first block's in file order).

`predict_tokens` (sentences the driver read: an in-memory table, a datasets folder): the sentences, already read,
checked and tokenized by the driver, go to the actors, which run the in-process batch function
(`erroranalysis.infer.tokens.predict`) on their block of sentences; each sentence's outputs come back to the
driver, which builds the tables as the in-process stage does. The driver checks that every sentence came back
exactly once.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable

import numpy as np

from erroranalysis.engines import Engine, EngineError
from erroranalysis.engines.ray_data import ROW, block_error, bounded_map, connect, failure_reason

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
    gpus, actors, size = _actors(ray, engine, load_kwargs.get("device", "auto"), n)
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


class TokenBlockRunner:
    """The callable class `map_batches` runs for `run_blocks`: the token classifier loaded once per actor;
    `fn(clf, start, rows, **ctx)` on each row range, its counts (pickled) or its UserError back as data."""

    def __init__(self, model: str, load_kwargs: dict, fn: Callable, ctx: dict):
        from erroranalysis.infer.tokens import load_token_classifier

        self.clf = load_token_classifier(model, **load_kwargs)
        self.fn, self.ctx = fn, ctx

    def __call__(self, batch):
        from erroranalysis.core.errors import UserError

        starts, rows = np.asarray(batch["start"], np.int64), np.asarray(batch["rows"], np.int64)
        results, errors = [], []
        for start, n in zip(starts.tolist(), rows.tolist()):
            try:
                results.append(pickle.dumps(self.fn(self.clf, start, n, **self.ctx)))
                errors.append("")
            except UserError as exc:  # Ray would keep only its text inside a traceback
                results.append(b"")
                errors.append(f"{type(exc).__name__}\t{exc}")
        return {"start": starts, "rows": rows, "result": np.array(results, dtype=object),
                "error": np.array(errors, dtype=object)}


def run_blocks(fn: Callable, ctx: dict, n_rows: int, *, model: str, load_kwargs: dict, engine: Engine,
               progress: Callable[[int], None] | None = None) -> list[tuple[int, dict]]:
    """`fn(clf, start, rows, **ctx)` over row ranges of `n_rows` rows on actors that each load the token classifier
    once: (start, result) per block in row order; the first bad block's error (in file order) raised here."""
    ray = connect(engine)
    gpus, actors, size = _actors(ray, engine, load_kwargs.get("device", "auto"), n_rows)
    ranges = [{"start": s, "rows": min(size, n_rows - s)} for s in range(0, n_rows, size)]
    ds = ray.data.from_items(ranges, override_num_blocks=len(ranges))
    done = bounded_map(ds, TokenBlockRunner, fn_constructor_kwargs={
        "model": model, "load_kwargs": {**load_kwargs, "device": "cuda" if gpus else "cpu"}, "fn": fn, "ctx": ctx},
        batch_size=1, batch_format="numpy", num_cpus=1, num_gpus=1.0 if gpus else None,
        compute=ray.data.ActorPoolStrategy(size=actors))
    found: dict[int, dict] = {}
    errors: dict[int, str] = {}
    try:
        for row in done.iter_rows():
            start = int(row["start"])
            if row["error"]:
                errors[start] = row["error"]
            elif start not in found:  # a retried block may report twice; its shards are the same
                found[start] = pickle.loads(row["result"])
                if progress:
                    progress(int(row["rows"]))
    except ray.exceptions.RayError as exc:
        raise EngineError(f"--engine ray: the token-classification job failed ({failure_reason(exc)}); nothing was "
                          "committed, run the command again.") from None
    if errors:
        raise block_error(errors[min(errors)])
    return sorted(found.items())


def _actors(ray, engine: Engine, device: str, n_rows: int) -> tuple[int, int, int]:
    """(GPUs to use, actors, sentences per block) for `n_rows` sentences: one actor per GPU where the cluster has
    GPUs and `device` allows, else one per CPU (or `--ray-actors`), never more actors than blocks."""
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0)) if device in ("auto", "cuda") or device.startswith("cuda") else 0
    if device.startswith("cuda") and not gpus:
        raise EngineError(f"--device {device}: the Ray cluster has no GPUs; use --device auto or cpu, or add GPU "
                          "workers.")
    actors = engine.concurrency or gpus or max(1, int(resources.get("CPU", 1)))
    size = engine.block_rows(n_rows, actors, SENTENCES_PER_BLOCK)
    return gpus, max(1, min(actors, -(-n_rows // size))), size
