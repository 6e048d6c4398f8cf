"""The shift report of a run's training file under `--engine ray` (step 4 of `check_ray_train`): the
eval blocks' counts, then one task merges both sides' word counts (the driver holds no vocabulary) and one fits the
domain classifier on its seeded rows: the same report as in-process. The passes are module-level: Ray pickles them."""

from __future__ import annotations

import functools
import pickle
from collections import Counter

import numpy as np

from erroranalysis.core import shards
from erroranalysis.engines import blocks as eb
from erroranalysis.stages.check_ray_duplicates import load_shards, save_shard, within

EVAL_COLUMNS = ["example_id", "text", "label"]  # what the eval blocks' pass reads


def shift(path, scratch, train_side: dict, chosen: dict, domain: bool, embedding, params, engine) -> dict:
    """The shift report (`shift.shift_report`'s) from the eval blocks' counts, both sides' words merged on a worker,
    and the domain classifier fitted on a worker on its seeded rows."""
    from erroranalysis.datachecks.shift import findings

    eb.call_on_worker(_merge_words, engine, folder=str(scratch / "train-words"), out=str(scratch / "train-words.pkl"))
    evals = {"n": 0, "labels": Counter(), "lengths": Counter(), "words": Counter()}
    oov = 0
    for _, part in eb.map_blocks(_eval_shift, path, engine, columns=EVAL_COLUMNS, kwargs={
            "scratch": str(scratch), "domain": chosen["domain_eval"], "embedding": embedding if domain else None}):
        evals["n"] += part["n"]
        evals["labels"].update(part["labels"])
        evals["lengths"].update(part["lengths"])
        oov += part["oov"]
    report = eb.call_on_worker(_counted, engine, scratch=str(scratch), train=train_side, evals=evals, oov=oov)
    if domain:
        report["domain"] = eb.call_on_worker(_domain, engine, scratch=str(scratch), seed=params.seed)
    report["findings"] = [f.to_dict() for f in findings(report)]
    return report


def _merge_words(folder: str, out: str) -> None:
    merged = pickle.dumps(_merged(folder))
    shards.write_file(out, lambda f: f.write_bytes(merged))


def _merged(folder: str) -> Counter:
    merged: Counter = Counter()
    folder = shards.location(folder)
    for f in shards.listed(folder, ".pkl"):
        merged.update(pickle.loads(shards.read_bytes(folder / f)))
    return merged


@functools.lru_cache(maxsize=1)
def _vocabulary(path: str) -> Counter:
    return pickle.loads(shards.read_bytes(path))  # once per worker process


def _eval_shift(table, block, *, scratch, domain, embedding):
    from erroranalysis.datachecks.shift import mostly_oov, side_counts, words

    texts = table.column("text").to_pylist()
    counts = side_counts(texts, table.column("label").to_pylist())
    dump_words(shards.location(scratch) / "eval-words", block, counts.pop("words"))
    oov = mostly_oov([words(t) for t in texts], _vocabulary(str(shards.location(scratch) / "train-words.pkl")))
    if embedding is not None:
        wanted = within(domain, block)
        if len(wanted):
            example_ids = np.asarray(table.column("example_id").to_pylist(), dtype=object).astype(str)
            save_shard(scratch, "eval-domain", block, embedding(texts, block, wanted), rows=wanted + block.start,
                  ids=example_ids[wanted])
    return {**counts, "oov": oov}


def _counted(scratch: str, train: dict, evals: dict, oov: int) -> dict:
    from erroranalysis.datachecks.shift import counted_report

    train = {**train, "words": _vocabulary(str(shards.location(scratch) / "train-words.pkl"))}
    evals = {**evals, "words": _merged(str(shards.location(scratch) / "eval-words"))}
    return counted_report(train, evals, oov, labels=True)


def _domain(scratch: str, seed: int) -> dict:
    from erroranalysis.datachecks.shift import domain_fit

    t_vec, _ = load_shards(scratch, "train-domain")
    e_vec, evals = load_shards(scratch, "eval-domain")
    rows = evals.get("rows", np.zeros(0, np.int64))
    out = domain_fit(t_vec, e_vec, rows, seed=seed)
    by_row = dict(zip(rows.tolist(), evals.get("ids", np.zeros(0, str)).tolist()))
    for row in out.get("least_like_train") or []:
        row["example_id"] = str(by_row[row["eval_index"]])
    return out


def dump_words(folder, block, value) -> None:
    """A block's word counts (a Counter), pickled into `folder` as the shard of its first row (`merged` reads them)."""
    data = pickle.dumps(value)
    stem = eb.SHARD.format(start=block.start)[:-len(".parquet")]
    shards.write(folder, f"{stem}.pkl", lambda f: f.write_bytes(data), digest=False)
