"""The contamination checks of a generation run with a training file under `--engine ray`
(`data-checks RUN --train sft.jsonl`): every pass over the rows runs on the workers, each reading its own block of
predictions.parquet or of the training file; the driver holds counts, the 20 shown examples and the run's record.

`prepare` runs before the checks stage starts (so a bad training file fails it and nothing is half-written), in the
stage's scratch (`inputs.stage_scratch`: a hidden folder of the run that every worker sees, or for a run built for
object storage a prefix under its objects, so no node need see the driver's disk):

1. the training file is read by the workers in row ranges (a Parquet file as it is, a JSONL or CSV file or a
   save_to_disk folder's `--train-split` through the Parquet copy one worker makes, `_copy`), each block validated
   as in-process (`sft_texts`: the same one-line error); each block writes its distinct (n-gram hash, row) pairs
   into the hash's partition, its prompts' MinHash LSH band keys into the key's partition, its prompts and ids, and
   its rows of the training length sample;
2. each predictions block writes its prompts' and references' distinct n-gram hashes into the same partitions as
   the training hashes, and sends back its prompts' length histograms (words, and tokens with the run's tokenizer);
3. one task per partition joins the n-gram hashes (`contamination_blocks.match`) and writes each eval block the
   training rows of its hashes; one task per partition groups the band keys into candidate pairs
   (`near_duplicates.candidate_pairs`, the distributed form of LSH's bucket lookup);
4. each predictions block applies the in-process rule to its matches (`contamination.from_matches`), writes its
   columns of checks.parquet to scratch and sends back its counts, exact metric sums and best examples; one task
   per training block verifies the candidate pairs of its rows by their exact Jaccard similarity;
5. one task groups the verified pairs (`near_duplicates.groups`), one compares the lengths.

The n-gram join is here; the MinHash near duplicates are in `contamination_near.py`, the lengths in
`contamination_lengths.py`, the scratch files all three use in `contamination_scratch.py`. The checks stage
(`data_checks_ray.checks_ray`) then writes each block's shard with these columns and adds the section to checks.json.
All of it is the in-process answer: per-row columns, counts, metrics (exact sums), examples, near-duplicate groups
(the same candidates, verified alike) and lengths (the training prompts' seeded sample of `LENGTH_SAMPLE` is the
in-process one; eval lengths from histograms are the same distribution).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

from erroranalysis import rundir
from erroranalysis.core import shards, storage
from erroranalysis.datachecks import contamination_blocks as cb
from erroranalysis.engines import blocks as eb
from erroranalysis.rundir import readers
from erroranalysis.sources.table import as_source
from erroranalysis.stages import contamination_lengths, contamination_near
from erroranalysis.stages.contamination import LENGTH_SAMPLE
from erroranalysis.stages.contamination_lengths import added, histograms, write_sample
from erroranalysis.stages.contamination_near import write_bands
from erroranalysis.stages.contamination_scratch import TrainRows, at, by_part, read, write

MAX_PARTS = 64


def workers_read(params) -> bool:
    """Whether the workers can read the training file in blocks (a Parquet, JSONL or CSV file, a save_to_disk
    folder)."""
    from erroranalysis.stages.inputs import workers_read as readable

    return readable(as_source(params.train))


class Prepared:
    """What `prepare` leaves for the checks stage: the scratch of per-block columns (a local folder or a prefix on
    object storage) and the section; `close` removes the scratch."""

    def __init__(self, scratch, section: dict, train: str, cleanup: contextlib.ExitStack):
        self.scratch, self.section, self.train, self._cleanup = scratch, section, train, cleanup

    @property
    def columns(self) -> str:
        """The per-block columns' folder as a string (`shards.location` turns it back), for `block_columns`."""
        return str(at(self.scratch, "columns"))

    def close(self) -> None:
        self._cleanup.close()


def prepare(run, params, engine, reporter) -> Prepared:
    """Steps 1 to 5 of the module's docstring; the caller closes the result when the stage is over."""
    from erroranalysis.stages.inputs import stage_scratch

    train, path = as_source(params.train), readers.shared_path(run, rundir.PREDICTIONS)  # URL: workers read it there
    rpb = eb.ROWS_PER_BLOCK  # read at call time: tests make blocks small
    blocks = eb.plan(path, rpb)
    cleanup = contextlib.ExitStack()
    # read back by other workers: on object storage for a run built there, else in the run (checked shared)
    scratch = cleanup.enter_context(stage_scratch(run.path, ".contamination-scratch-", engine))
    try:
        rows_path = _rows(train, params, engine, scratch)
        train_blocks = eb.plan(rows_path, rpb)
        n_parts = max(1, min(MAX_PARTS, len(train_blocks) + len(blocks)))
        reporter.note(f"checks: --engine ray: {params.ngram}-gram overlap of eval prompts and references with "
                      f"{eb.n_rows(train_blocks):,} training rows, in {n_parts} hash partitions")
        _scan_train(rows_path, eb.n_rows(train_blocks), params, engine, scratch, n_parts)
        job = {"scratch": str(scratch), "train_starts": [b.start for b in train_blocks]}
        ctx = _eval_context(blocks, params, scratch)
        model = (run.manifest.get("model") or {}).get("path")
        present, eval_lengths = _scan_eval(path, engine, ctx, n_parts, model)
        eb.call_each(_one, engine, [{"step": step, "part": p, **job}
                                    for p in range(n_parts) for step in ("join", "bands")])
        parts = eb.map_blocks(_columns_block, path, engine, rows_per_block=rpb, ordered=True,
                              columns=ctx.pop("read"), kwargs={
                                  **ctx, "fields": [f for f in ("prompt", "reference") if present[f]],
                                  "id_column": params.train_id_column, "train_starts": job["train_starts"]})
        named = storage.record_name(train)
        section = _section([p for _, p in parts], eb.n_rows(blocks), named, eb.n_rows(train_blocks))
        section["ngram"] = params.ngram
        *_, section["lengths"] = eb.call_each(_one, engine, [
            *({"step": "verify", "start": s, "threshold": params.train_near_threshold, **job}
              for s in job["train_starts"]),
            {"step": "lengths", "model": model, "eval_lengths": eval_lengths, **job}])
        section["near_duplicates"] = eb.call_each(_one, engine, [{
            "step": "near", "n_train": eb.n_rows(train_blocks), "threshold": params.train_near_threshold,
            "num_perm": params.minhash_perm, **job}])[0]
        return Prepared(scratch, section, named, cleanup)
    except BaseException:
        cleanup.close()
        raise


def _scan_train(rows_path, n_train: int, params, engine, scratch, n_parts: int) -> None:
    """Step 1: each training block's n-gram pairs and band keys into their partitions, its prompts and ids."""
    from erroranalysis.datachecks.near_duplicates import band_ranges

    eb.map_blocks(_train_block, str(rows_path), engine, rows_per_block=eb.ROWS_PER_BLOCK, ordered=True, kwargs={
        "source": str(params.train), "schema": shards.open_parquet(str(rows_path)).schema_arrow,
        "scratch": str(scratch), "text_column": params.train_text_column, "id_column": params.train_id_column,
        "n": params.ngram,
        "n_parts": n_parts, "length_rows": cb.sample_rows(n_train, LENGTH_SAMPLE, params.seed),
        "ranges": band_ranges(params.train_near_threshold, params.minhash_perm), "num_perm": params.minhash_perm,
        "seed": params.seed + 1})  # seed: minhash_pairs' in-process; ordered: a list, every block runs now


def _eval_context(blocks, params, scratch) -> dict:
    """Which predictions columns hold the prompts (else the texts) and references, and which a block reads."""
    names = set(shards.open_parquet(blocks[0].file).schema_arrow.names) if blocks else set()
    text = "prompt" if "prompt" in names else "text" if "text" in names else None
    reference = "reference" if "reference" in names else None
    metric = ["example_id", "correct"] + [c for c in ("reference_loss", "score") if c in names]
    return {"scratch": str(scratch), "n": params.ngram, "text": text, "reference": reference,
            "read": sorted({c for c in (text, reference) if c} | set(metric))}


def _scan_eval(path, engine, ctx: dict, n_parts: int, model) -> tuple[dict, dict]:
    """Step 2: each block's n-gram hashes into their partitions; which fields have text, and the length histograms."""
    present = {"prompt": False, "reference": False}
    lengths: dict = {"words": {}, "tokens": None}
    kwargs = {k: v for k, v in ctx.items() if k != "read"}
    for _, got in eb.map_blocks(_eval_block, path, engine, rows_per_block=eb.ROWS_PER_BLOCK,
                                columns=[c for c in (ctx["text"], ctx["reference"]) if c],
                                kwargs={**kwargs, "n_parts": n_parts, "model": model}):
        present = {k: present[k] or got["present"][k] for k in present}
        lengths = {k: added(lengths[k], got["lengths"][k]) for k in lengths}
    return present, lengths


def _rows(train, params, engine, scratch):
    """The Parquet file the blocks of the training file are read from: the file itself, or a JSONL or CSV file's
    (a save_to_disk folder split's) copy (`_copy`, made by one worker under Ray) in the stage's scratch, which goes
    with it."""
    from erroranalysis.sources import blocks

    if blocks.readable(train):
        return train
    target = at(scratch, "rows.parquet")
    eb.call_each(_copy, engine, [{"source": str(train), "target": str(target), "encoding": params.encoding,
                                  "split": params.split}])
    return target


PICKLED = b"erroranalysis.pickled"  # schema metadata of a `_copy`: its columns whose cells are pickled


def _copy(source: str, target: str, encoding: str, split: str | None = None) -> int:
    """A JSONL or CSV training file as Parquet with its `_line` (`sources.blocks.to_parquet`'s copy), where a column
    Arrow cannot store as one type (messages whose cells differ in shape, a bad cell among them) keeps its cells as
    they were read, pickled: the blocks validate them as in-process, with the same one-line error. A save_to_disk
    folder's cells are Arrow-typed already: `to_parquet` streams its split."""
    import pickle

    import pyarrow as pa
    import pyarrow.parquet as pq

    from erroranalysis.sources.blocks import COPY, COPY_ROW_GROUP, to_parquet
    from erroranalysis.sources.table import read_table

    path = as_source(source)  # a URL: read from object storage (a prefix is refused there in one line)
    if isinstance(path, Path) and path.is_dir():
        return to_parquet(source, target, split=split)

    frame, _ = read_table(path, encoding=encoding)
    pickled = []
    for name in frame.columns:
        try:
            pa.array(frame[name], from_pandas=True)
        except (pa.ArrowException, TypeError, ValueError):
            frame[name] = [pickle.dumps(v) for v in frame[name]]
            pickled.append(name)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), COPY: b"1",
                                           PICKLED: "\n".join(pickled).encode()})
    shards.write_file(target, lambda p: pq.write_table(table, p, row_group_size=COPY_ROW_GROUP))  # a path or a URL
    return len(frame)


def _unpickled(raw, schema) -> None:
    import pickle

    names = (schema.metadata or {}).get(PICKLED, b"").decode()
    for name in filter(None, names.split("\n")):
        raw[name] = [pickle.loads(v) for v in raw[name]]  # our own copy's cells (`_copy`), read back as they were


def _section(parts: list[dict], n_eval: int, train_path: str, n_train: int) -> dict:
    from erroranalysis.datachecks import contamination_report as report

    per_field: dict = {}
    for part in parts:
        for field, counts in part["fields"].items():
            mine = per_field.setdefault(field, dict.fromkeys(counts, 0))
            for key, value in counts.items():
                mine[key] += value
    metrics = report.merge_metrics([p["metrics"] for p in parts])
    candidates = [e for p in parts for e in p["examples"]]
    return report.section_of(per_field, n_eval, train_path, n_train, metrics, candidates)


# -- the passes (module-level: Ray pickles them) -----------------------------------------------------------------


def _train_block(table, block, *, source, schema, scratch, text_column, id_column, n, n_parts, length_rows,
                 ranges, num_perm, seed):
    import pyarrow as pa

    from erroranalysis.datachecks.train_texts import sft_texts
    from erroranalysis.sources.blocks import is_copy, with_lines
    from erroranalysis.stages.contamination import train_ids

    raw = with_lines(table.to_pandas(), block.start, is_copy(schema))
    _unpickled(raw, schema)
    texts = sft_texts(raw, source, text_column)  # the in-process validation: the same one-line error
    ids = train_ids(raw, source, id_column, block.start)
    hashes, rows = cb.train_pairs(texts["text"].tolist(), block.start, n)
    by_part(scratch, "train", block, hashes, n_parts, row=rows)
    prompts = texts["prompt"].tolist()
    write_bands(scratch, block, prompts, n_parts, ranges, num_perm, seed)
    write(at(scratch, "prompts"), eb.SHARD.format(start=block.start),
          pa.table({"prompt": prompts, "id": ids.tolist()}))
    write_sample(scratch, block, prompts, length_rows)
    return block.rows


def _fields(table, text, reference) -> dict[str, list[str]]:
    from erroranalysis.stages.contamination import column_strings

    frame = table.to_pandas()
    return {"prompt": column_strings(frame, text) if text else [""] * len(frame),
            "reference": column_strings(frame, reference) if reference else [""] * len(frame)}


def _eval_block(table, block, *, scratch, n, text, reference, n_parts, model):
    fields = _fields(table, text, reference)
    hashes = cb.eval_hashes(list(fields.values()), n)
    by_part(scratch, "eval", block, hashes, n_parts, start=np.full(hashes.size, block.start, np.int64))
    return {"present": {field: any(texts) for field, texts in fields.items()},
            "lengths": histograms(fields["prompt"], model)}


def _join(scratch: str, part: int, **_) -> int:
    """One hash partition: the training rows of each eval hash, sent to the eval blocks that hold it."""
    import pyarrow as pa

    evals = read(at(scratch, "eval", str(part)))
    trains = read(at(scratch, "train", str(part)))
    if evals is None or trains is None:
        return 0
    eval_hash = evals.column("hash").to_numpy()
    hashes, rows = cb.match(np.unique(eval_hash), trains.column("hash").to_numpy(), trains.column("row").to_numpy())
    block = evals.column("start").to_numpy()
    for start in np.unique(block):
        mine = np.isin(hashes, eval_hash[block == start])
        if mine.any():
            write(at(scratch, "hits", str(int(start))), f"part-{part:04d}.parquet",
                  pa.table({"hash": hashes[mine], "train_row": rows[mine]}))
    return int(np.unique(hashes).size)


def _columns_block(table, block, *, scratch, n, text, reference, fields, id_column, train_starts):
    import pandas as pd
    import pyarrow as pa

    from erroranalysis.datachecks import contamination_report as report
    from erroranalysis.datachecks.contamination import from_matches

    texts = _fields(table, text, reference)
    hits = read(at(scratch, "hits", str(block.start)))
    matched = hits.to_pandas() if hits is not None else pd.DataFrame({"hash": np.zeros(0, np.uint64),
                                                                      "train_row": np.zeros(0, np.int64)})
    frames = {field: from_matches(texts[field], matched, n) for field in fields}
    columns = report.row_columns(frames, block.rows, lambda rows: _train_ids(scratch, id_column, train_starts, rows))
    write(at(scratch, "columns"), eb.SHARD.format(start=block.start), pa.table({
        k: (v.tolist() if v.dtype == object else v) for k, v in columns.items() if not k.startswith("_")}))
    frame = table.to_pandas()
    ids = frame["example_id"].to_numpy(dtype=object)
    loss = frame["reference_loss"].to_numpy(dtype=np.float64) if "reference_loss" in frame else None
    score = frame["score"].to_numpy(dtype=np.float64) if "score" in frame else None
    return {"metrics": report.metric_counts(frame["correct"].to_numpy(dtype=bool), columns["in_train"], loss, score),
            "fields": report.field_counts(frames),
            "examples": report.example_candidates(frames, columns, ids, block.start)}


def _train_ids(scratch: str, id_column, train_starts: list[int], rows: np.ndarray) -> np.ndarray:
    """The ids of training `rows`: the 0-based row, or `--train-id-column`'s values from the blocks that hold
    them."""
    if id_column is None:
        return np.array([str(r) for r in rows], dtype=object)
    ids = TrainRows(scratch, train_starts, "id")
    return np.array([ids[r] for r in rows], dtype=object)


def _one(step: str, **kwargs):
    """The tasks that run once per partition, per training block or once (Ray runs several kinds at once)."""
    return {"join": _join, "bands": contamination_near.bands, "verify": contamination_near.verify,
            "near": contamination_near.near, "lengths": contamination_lengths.lengths}[step](**kwargs)


def block_columns(folder: str, block) -> dict:
    """A predictions block's contamination columns (step 4's scratch shard), for its shard of checks.parquet."""
    table = shards.read_table(shards.location(folder) / eb.SHARD.format(start=block.start))
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
