"""The checks stage's training-file part under `--engine ray` (leakage and shift of a classification, multi-label,
regression or token-classification run with `--train`): the workers read the training file in blocks of rows as
they read the eval set, and the driver holds counts, a bounded sample's results and the run's record.
`data_checks_ray.checks_ray` calls it:

1. `scan` (before the stage starts, so a bad training file fails it as in-process): a Parquet file is read by the
   workers as it is; a JSONL or CSV file or a save_to_disk folder (its `--train-split`) through a Parquet copy one
   worker makes (`sources.blocks.to_parquet`, a folder's record batches streamed); an
   in-memory training set (the Python API's `train_set`) is written to one. Each block is validated as
   `read_train_set` validates the whole file, its gold read by the run's task (`train_gold.TrainGold`, as
   in-process; the same one-line errors; ids unique across blocks by hash parts), writes its rows' text keys into
   the partitions the eval keys use (`blockwise.bucket_of`), counts what the shift
   report needs (`shift.side_counts`) and the two votes of the label rule (`train_blocks.label_votes`), and embeds
   its rows of the two samples: the near-leakage sample (every training row up to `--near-sample`, else a seeded
   sample of that many) and the domain classifier's (`shift.domain_rows`, in-process's own rows);
2. `leakage` (`check_ray_leakage.py`): one task per key partition joins each eval row to the first training row of
   its text (exact, every row); one task searches the eval rows of the near-duplicate sample against the training
   sample (`top_k_neighbors` as in-process) and sends back, per eval text key, its closest training row above the
   threshold;
3. `leak_columns` (`check_ray_leakage.py`, in the write pass): each eval block's leakage columns of checks.parquet,
   and its share of the summary (`train_blocks.leak_part`);
4. `shift` (`check_ray_shift.py`): the eval blocks' counts, then one task merges both sides' word counts (the driver
   holds no vocabulary) and one fits the domain classifier on its seeded rows: the same report as in-process.

What differs from in-process, stated in checks.json (`leakage.searched`), the stage record (`leakage_sample`) and
one line on stderr: near copies are searched for the sampled eval rows (and their texts) against the sampled
training rows, where in-process searches every row.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from erroranalysis.core import shards, storage
from erroranalysis.datachecks import blockwise as bw
from erroranalysis.datachecks import train_blocks as tb
from erroranalysis.engines import blocks as eb
from erroranalysis.stages.check_parts import checkpoint_embed, train_options
from erroranalysis.stages.check_ray_duplicates import binary16, save_shard, within
from erroranalysis.stages.check_ray_leakage import leakage
from erroranalysis.stages.check_ray_shift import dump_words, shift
from erroranalysis.stages.train_gold import NEEDS_IDS, TrainGold


def workers_read(params, train_set) -> bool:
    """Whether workers can read the training file (Parquet, JSONL, CSV or a save_to_disk folder; an in-memory set
    is written for them)."""
    from erroranalysis.stages.inputs import workers_read as readable

    return train_set is not None or readable(params.train)


def count_rows(params, train_set, engine) -> int:
    """The training rows (a Parquet file's footer; a JSONL or CSV file read, a folder's batches counted, by a worker),
    for the embedder's choice
    (`embedder_choice.plan` counts the texts in-process embeds: eval and training rows)."""
    from erroranalysis.sources import blocks
    from erroranalysis.sources.table import as_source

    if train_set is not None:
        return len(train_set)
    path = as_source(params.train)
    if blocks.readable(path):
        return blocks.parquet_file(path).metadata.num_rows
    from erroranalysis.engines import ray_data

    return ray_data.run_task(_count, engine, path=path, encoding=params.encoding, split=params.split)


def _count(path, encoding: str, split: str | None) -> int:
    from erroranalysis.sources.table import dataset_batches, read_table

    if isinstance(path, Path) and path.is_dir():  # streamed: the worker never holds the table
        return sum(batch.num_rows for batch in dataset_batches(path, split)[1])
    return len(read_table(path, encoding=encoding)[0])


@dataclass(frozen=True)
class Source:
    """Where the workers read the training rows: `rows` (a Parquet file), validated per block with `opts` as
    `read_train_set` does (None: an in-memory set, already validated), its errors naming `path`."""

    rows: str
    path: str
    named: str  # how checks.json and the stage record name it (`storage.record_name`)
    opts: object
    copy: bool
    n: int
    gold: TrainGold


def source(run, params, train_set, scratch, engine) -> Source:
    """The training rows the workers read; a missing column or an empty file is the in-process one-line error."""
    from erroranalysis.sources import blocks
    from erroranalysis.sources.table import as_source
    from erroranalysis.sources.train_table import read_train_rows, read_train_set, train_columns_error

    gold = TrainGold.of(run)
    if train_set is not None:
        import pandas as pd

        frame = train_set.frame
        table = pd.DataFrame({"example_id": frame["example_id"].astype(str), "text": frame["text"].astype(str),
                              "label": frame["label"].astype(str)})
        shards.write(scratch, "train.parquet", lambda p: table.to_parquet(p, index=False), digest=False)
        rows = scratch / "train.parquet"
        return Source(str(rows), str(train_set.path), storage.record_name(train_set.path), None, False,
                      len(train_set), gold)
    opts = train_options(run, params)
    path = as_source(params.train)
    rows = path
    if not blocks.readable(path):
        from erroranalysis.engines import ray_data

        rows = scratch / "train-rows.parquet"
        ray_data.run_task(blocks.to_parquet, engine, source=path, target=rows, encoding=opts.encoding,
                          split=opts.split)
    file = blocks.parquet_file(rows)
    names = file.schema_arrow.names
    columns = {"text_column": opts.text_column, "label_column": opts.label_column, "id_column": opts.id_column}
    reader = None if gold.task == NEEDS_IDS else (lambda p, table: gold.read(p, table, opts))
    if reader is None:
        if any(c and c not in names for c in columns.values()):
            raise train_columns_error(path, names, opts.text_column, opts.label_column, opts.id_column)
    else:  # the columns the task's reader needs, checked on no rows: in-process's one-line error
        read_train_rows(path, (_no_rows(names), blocks.format_of(path)), reader, **columns)
    if file.metadata.num_rows == 0:
        read_train_set(path, **columns, read=reader)  # in-process's one-line error (no rows to read)
    return Source(str(rows), str(path), storage.record_name(path), opts, blocks.is_copy(file.schema_arrow),
                  file.metadata.num_rows, gold)


def _no_rows(names):
    import pandas as pd

    return pd.DataFrame({**{name: pd.Series([], dtype=object) for name in names if name != "_line"},
                         "_line": pd.Series([], dtype="int64")})


def train_embedding(run, embedding):
    """What the workers embed training texts with: the eval side's text embedder, or for hidden states the run's
    checkpoint (as in-process embeds them)."""
    import copy

    if embedding is None:
        return None
    out = copy.copy(embedding)
    if embedding.hidden is not None:
        out.hidden, out.fn = None, checkpoint_embed(run)
    return out


def samples(src: Source, n_eval: int, params, near: bool, domain: bool) -> dict:
    """The training rows of the near-leakage search and both sides' rows of the domain classifier."""
    from erroranalysis.datachecks.label_issues import reference_rows
    from erroranalysis.datachecks.shift import domain_rows

    empty = np.zeros(0, np.int64)
    t_rows, e_rows = domain_rows(src.n, n_eval, seed=params.seed) if domain else (empty, empty)
    return {"near": reference_rows(src.n, params.near_sample, params.seed) if near else empty,
            "domain_train": t_rows, "domain_eval": e_rows}


def scan(src: Source, scratch, n_buckets: int, chosen: dict, embedding, engine) -> dict:
    """Step 1 over the training blocks: the merged counts and the label rule; ids unique across blocks."""
    from erroranalysis.sources import blocks

    opts, labels = src.opts, src.gold.id_labels
    results = eb.map_blocks(_scan, src.rows, engine, kwargs={
        "source": src.path, "opts": opts, "copy": src.copy, "gold": src.gold, "scratch": str(scratch),
        "n_buckets": n_buckets, "near": chosen["near"], "domain": chosen["domain_train"], "embedding": embedding})
    votes, label_counts, lengths = [], Counter(), Counter()
    for _, part in results:
        votes.append(part["votes"])
        label_counts.update(part["labels"])
        lengths.update(part["lengths"])
    if opts is not None and opts.id_column:
        found = eb.call_on_worker(_first_duplicates, engine, folder=str(scratch / "train-ids"))
        blocks.duplicate_error(found, src.path, opts)
    ids = tb.ids_are_labels(votes, labels)
    names = Counter()
    for value, count in label_counts.items():
        names[str(tb.class_names([value], labels, ids)[0])] += count
    return {"ids": ids, "side": {"n": src.n, "labels": names, "lengths": lengths, "words": Counter()}}


def _scan(table, block, *, source, opts, copy, gold, scratch, n_buckets, near, domain, embedding):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from erroranalysis.datachecks.duplicates import text_keys
    from erroranalysis.datachecks.shift import side_counts
    from erroranalysis.sources import blocks
    from erroranalysis.sources.table import as_source

    frame = table.to_pandas()
    scratch = shards.location(scratch)
    if opts is not None:
        frame = blocks.with_lines(frame, block.start, copy)
        frame = (blocks.rows_of(frame, block.start, opts, source=as_source(source)) if gold.task == NEEDS_IDS else
                 _task_rows(gold, frame, block.start, opts, as_source(source))).frame
        if opts.id_column:
            blocks.write_id_parts(scratch / "train-ids", block.start, frame["example_id"], frame["_line"])
    texts = frame["text"].tolist()
    raw = frame["label"].astype(str).to_numpy(dtype=object)
    ids = frame["example_id"].astype(str).to_numpy(dtype=object)
    rows = np.arange(block.start, block.stop)
    keys = text_keys(texts)
    bucket = bw.bucket_of(keys, n_buckets)
    for p in np.unique(bucket):
        mine = bucket == p
        part = pa.table({"key": binary16(keys[mine]), "row": rows[mine], "label": raw[mine].tolist(),
                         "example_id": ids[mine].tolist()})
        shards.write(scratch / "train-hashes" / str(p), eb.SHARD.format(start=block.start),
                     lambda f, t=part: pq.write_table(t, f), digest=False)
    counts = side_counts(texts, raw)
    dump_words(scratch / "train-words", block, counts.pop("words"))
    if embedding is not None:
        in_near, in_domain = within(near, block), within(domain, block)
        wanted = np.union1d(in_near, in_domain)
        vectors = embedding(texts, block, wanted) if len(wanted) else np.zeros((0, 0), np.float32)
        save_shard(scratch, "train-near", block, vectors[np.searchsorted(wanted, in_near)], keys=keys[in_near],
              rows=rows[in_near], ids=ids[in_near].astype(str), labels=raw[in_near].astype(str))
        save_shard(scratch, "train-domain", block, vectors[np.searchsorted(wanted, in_domain)])
    return {"votes": tb.label_votes(raw, gold.id_labels), "labels": counts["labels"], "lengths": counts["lengths"]}


def _task_rows(gold: TrainGold, raw, start: int, opts, source):
    """A block of a multi-label, regression or token training file read by the run's task, as in-process; ids default
    to the row number in the whole file (`blocks.rows_of`)."""
    from erroranalysis.sources.blocks import format_of

    train = gold.read(source, (raw, format_of(source)), opts)
    if not opts.id_column:
        train.frame["example_id"] = np.arange(start, start + len(raw)).astype(str).astype(object)
    return train


def _first_duplicates(folder: str) -> list:
    from erroranalysis.sources import blocks

    return [blocks.first_duplicate(**part) for part in blocks.id_parts(folder)]


# -- what `data_checks_ray.checks_ray` calls ---------------------------------------------------------------------


@dataclass
class Trained:
    """The training file's state between the steps: where its rows are, the samples, the scan's counts."""

    src: Source
    chosen: dict
    scanned: dict
    near: bool
    domain: bool
    embedding: object


def prepare(run, params, train: dict, scratch, n_eval: int, n_buckets: int, embedding, engine, record: dict,
            reporter) -> Trained:
    """Step 1, before the stage starts; states the leakage sample in the record and, when it is one, on stderr."""
    near = embedding is not None
    domain = near and params.shift and train["domain"]
    src = source(run, params, train["set"], scratch, engine)
    chosen = samples(src, n_eval, params, near, domain)
    record["train"] = src.named
    record["leakage_sample"] = {"eval": record["sample"], "train": {
        "rows": int(len(chosen["near"])), "of": src.n, "seed": params.seed}} if near else None
    if near and (record["sample"]["rows"] < n_eval or len(chosen["near"]) < src.n):
        reporter.note(f"checks: --engine ray: near leakage searched for a seeded sample of {record['sample']['rows']} "
                      f"of {n_eval} eval rows against {len(chosen['near'])} of {src.n} training rows (--near-sample)")
    embed_train = train_embedding(run, embedding)
    scanned = scan(src, scratch, n_buckets, chosen, embed_train, engine)
    return Trained(src, chosen, scanned, near, domain, embedding)


def write_state(trained: Trained, scratch, eval_starts: list[int], n_buckets: int, params, engine) -> dict:
    """Step 2, in the stage: what each eval block's write pass needs for its leakage columns (`leak_columns`)."""
    leak = leakage(scratch, eval_starts, n_buckets, trained.near, params, engine)
    return {**leak, "labels": trained.src.gold.id_labels, "ids": trained.scanned["ids"]}


def sections(trained: Trained, parts: list[dict], record: dict, path, scratch, params, engine) -> tuple:
    """checks.json's leakage and shift sections (shift None without `params.shift`)."""
    leak = tb.merge_leak(parts, trained.src.path, trained.src.n, trained.near)
    leak["searched"] = record["leakage_sample"]
    shifted = shift(path, scratch, trained.scanned["side"], trained.chosen, trained.domain, trained.embedding,
                    params, engine) if params.shift else None
    return leak, shifted
