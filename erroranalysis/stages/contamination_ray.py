"""The contamination checks of a generation run with a training file under `--engine ray`
(`data-checks RUN --train sft.jsonl`): every pass over the rows runs on the workers, each reading its own block of
predictions.parquet or of the training file; the driver holds counts, the 20 shown examples and the run's record.

`prepare` runs before the checks stage starts (so a bad training file fails it and nothing is half-written), in
scratch folders inside the run that every worker sees:

1. the training file is read by the workers in row ranges (a Parquet file as it is, a JSONL or CSV file through the
   Parquet copy one worker makes, `_copy`), each block validated as in-process (`sft_texts`: the same one-line
   error); each block writes its distinct (n-gram hash, row) pairs into the hash's partition, its prompts' MinHash
   LSH band keys into the key's partition, its prompts and ids, and its rows of the training length sample;
2. each predictions block writes its prompts' and references' distinct n-gram hashes into the same partitions as
   the training hashes, and sends back its prompts' length histograms (words, and tokens with the run's tokenizer);
3. one task per partition joins the n-gram hashes (`contamination_blocks.match`) and writes each eval block the
   training rows of its hashes; one task per partition groups the band keys into candidate pairs
   (`near_duplicates.candidate_pairs`, the distributed form of LSH's bucket lookup);
4. each predictions block applies the in-process rule to its matches (`contamination.from_matches`), writes its
   columns of checks.parquet to scratch and sends back its counts, exact metric sums and best examples; one task
   per training block verifies the candidate pairs of its rows by their exact Jaccard similarity;
5. one task groups the verified pairs (`near_duplicates.groups`), one compares the lengths.

The checks stage (`data_checks_ray.checks_ray`) then writes each block's shard with these columns and adds the
section to checks.json. All of it is the in-process answer: per-row columns, counts, metrics (exact sums), examples,
near-duplicate groups (the same candidates, verified alike) and lengths (the training prompts' seeded sample of
`LENGTH_SAMPLE` is the in-process one; eval lengths from histograms are the same distribution).
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import tempfile
from pathlib import Path

import numpy as np

from erroranalysis import rundir
from erroranalysis.datachecks import contamination_blocks as cb
from erroranalysis.engines import blocks as eb
from erroranalysis.stages.contamination import LENGTH_SAMPLE

MAX_PARTS = 64


def workers_read(params) -> bool:
    """Whether the workers can read the training file in blocks (a Parquet, JSONL or CSV file)."""
    from erroranalysis.stages.inputs import workers_read as readable

    return readable(Path(params.train)) and params.split is None


class Prepared:
    """What `prepare` leaves for the checks stage: the scratch folder of per-block columns and the section."""

    def __init__(self, scratch: Path, section: dict, train: str):
        self.scratch, self.section, self.train = scratch, section, train

    @property
    def columns(self) -> str:
        return str(self.scratch / "columns")

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def prepare(run, params, engine, reporter) -> Prepared:
    """Steps 1 to 5 of the module's docstring; the caller closes the result when the stage is over."""
    train, path = Path(params.train), run.file(rundir.PREDICTIONS)
    rpb = eb.ROWS_PER_BLOCK  # read at call time: tests make blocks small
    blocks = eb.plan(path, rpb)
    scratch = Path(tempfile.mkdtemp(prefix=".contamination-scratch-", dir=run.path))
    try:
        with _rows(train, params, engine, run.path) as rows_path:
            train_blocks = eb.plan(rows_path, rpb)
            n_parts = max(1, min(MAX_PARTS, len(train_blocks) + len(blocks)))
            reporter.note(f"checks: --engine ray: {params.ngram}-gram overlap of eval prompts and references with "
                          f"{eb.n_rows(train_blocks):,} training rows, in {n_parts} hash partitions")
            _scan_train(rows_path, eb.n_rows(train_blocks), params, engine, scratch, n_parts)
        job = {"scratch": str(scratch), "train_starts": [b.start for b in train_blocks]}
        ctx = _eval_context(blocks, params, scratch)
        model = (run.manifest.get("model") or {}).get("path")
        present, eval_lengths = _scan_eval(path, engine, ctx, n_parts, model)
        _tasks(_one, engine, [{"step": step, "part": p, **job} for p in range(n_parts) for step in ("join", "bands")])
        parts = eb.map_blocks(_columns_block, path, engine, rows_per_block=rpb, ordered=True,
                              columns=ctx.pop("read"), kwargs={
                                  **ctx, "fields": [f for f in ("prompt", "reference") if present[f]],
                                  "id_column": params.train_id_column, "train_starts": job["train_starts"]})
        section = _section([p for _, p in parts], eb.n_rows(blocks), str(train.resolve()), eb.n_rows(train_blocks))
        section["ngram"] = params.ngram
        *_, section["lengths"] = _tasks(_one, engine, [
            *({"step": "verify", "start": s, "threshold": params.train_near_threshold, **job}
              for s in job["train_starts"]),
            {"step": "lengths", "model": model, "eval_lengths": eval_lengths, **job}])
        section["near_duplicates"] = _tasks(_one, engine, [{
            "step": "near", "n_train": eb.n_rows(train_blocks), "threshold": params.train_near_threshold,
            "num_perm": params.minhash_perm, **job}])[0]
        return Prepared(scratch, section, str(train.resolve()))
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def _scan_train(rows_path, n_train: int, params, engine, scratch: Path, n_parts: int) -> None:
    """Step 1: each training block's n-gram pairs and band keys into their partitions, its prompts and ids."""
    import pyarrow.parquet as pq

    from erroranalysis.datachecks.near_duplicates import band_ranges

    eb.map_blocks(_train_block, rows_path, engine, rows_per_block=eb.ROWS_PER_BLOCK, ordered=True, kwargs={
        "source": str(params.train), "schema": pq.read_schema(rows_path), "scratch": str(scratch),
        "text_column": params.train_text_column, "id_column": params.train_id_column, "n": params.ngram,
        "n_parts": n_parts, "length_rows": cb.sample_rows(n_train, LENGTH_SAMPLE, params.seed),
        "ranges": band_ranges(params.train_near_threshold, params.minhash_perm), "num_perm": params.minhash_perm,
        "seed": params.seed + 1})  # seed: minhash_pairs' in-process; ordered: a list, every block runs now


def _eval_context(blocks, params, scratch: Path) -> dict:
    """Which predictions columns hold the prompts (else the texts) and references, and which a block reads."""
    import pyarrow.parquet as pq

    names = set(pq.read_schema(blocks[0].file).names) if blocks else set()
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
        lengths = {k: _added(lengths[k], got["lengths"][k]) for k in lengths}
    return present, lengths


@contextlib.contextmanager
def _rows(train: Path, params, engine, beside):
    """The Parquet file the blocks of the training file are read from: the file itself, or a JSONL or CSV file's
    copy (`_copy`, made by one worker under Ray)."""
    from erroranalysis.sources import blocks
    from erroranalysis.stages.inputs import scratch

    if blocks.readable(train):
        yield train
        return
    with scratch(beside) as folder:
        _tasks(_copy, engine, [{"source": str(train), "target": str(folder / "rows.parquet"),
                                "encoding": params.encoding}])
        yield folder / "rows.parquet"


PICKLED = b"erroranalysis.pickled"  # schema metadata of a `_copy`: its columns whose cells are pickled


def _copy(source: str, target: str, encoding: str) -> int:
    """A JSONL or CSV training file as Parquet with its `_line` (`sources.blocks.to_parquet`'s copy), where a column
    Arrow cannot store as one type (messages whose cells differ in shape, a bad cell among them) keeps its cells as
    they were read, pickled: the blocks validate them as in-process, with the same one-line error."""
    import pickle

    import pyarrow as pa
    import pyarrow.parquet as pq

    from erroranalysis.core import files
    from erroranalysis.sources.blocks import COPY, COPY_ROW_GROUP
    from erroranalysis.sources.table import read_table

    frame, _ = read_table(Path(source), encoding=encoding)
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
    files.atomic_write(Path(target), lambda p: pq.write_table(table, p, row_group_size=COPY_ROW_GROUP))
    return len(frame)


def _unpickled(raw, schema) -> None:
    import pickle

    names = (schema.metadata or {}).get(PICKLED, b"").decode()
    for name in filter(None, names.split("\n")):
        raw[name] = [pickle.loads(v) for v in raw[name]]  # our own copy's cells (`_copy`), read back as they were


def _tasks(fn, engine, calls: list[dict]) -> list:
    """`fn(**call)` for each call: Ray tasks at once under a distributed engine, else one after another here."""
    if engine is not None and engine.distributed:
        from erroranalysis.engines.ray_data import run_tasks

        return run_tasks(fn, engine, calls)
    return [fn(**call) for call in calls]


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


def _write(folder: Path, name: str, table) -> None:
    import pyarrow.parquet as pq

    from erroranalysis.core import files

    folder.mkdir(parents=True, exist_ok=True)
    files.atomic_write(folder / name, lambda f: pq.write_table(table, f))


def _read(folder: Path):
    """The Parquet files of `folder` in name order (the first row in each name: row order), as one table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shards = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
    return pa.concat_tables([pq.read_table(s) for s in shards]) if shards else None


def _by_part(scratch: str, kind: str, block, hashes: np.ndarray, n_parts: int, **columns) -> None:
    import pyarrow as pa

    part = cb.part_of(hashes, n_parts)
    for p in np.unique(part):
        mine = part == p
        _write(Path(scratch) / kind / str(p), eb.SHARD.format(start=block.start),
               pa.table({"hash": hashes[mine], **{k: v[mine] for k, v in columns.items()}}))


def _train_block(table, block, *, source, schema, scratch, text_column, id_column, n, n_parts, length_rows,
                 ranges, num_perm, seed):
    import pyarrow as pa

    from erroranalysis.datachecks.near_duplicates import band_keys
    from erroranalysis.datachecks.train_texts import sft_texts
    from erroranalysis.sources.blocks import is_copy, with_lines
    from erroranalysis.stages.contamination import train_ids

    raw = with_lines(table.to_pandas(), block.start, is_copy(schema))
    _unpickled(raw, schema)
    texts = sft_texts(raw, source, text_column)  # the in-process validation: the same one-line error
    ids = train_ids(raw, source, id_column, block.start)
    hashes, rows = cb.train_pairs(texts["text"].tolist(), block.start, n)
    _by_part(scratch, "train", block, hashes, n_parts, row=rows)
    prompts = texts["prompt"].tolist()
    keys = band_keys(prompts, block.start, ranges, num_perm=num_perm, seed=seed)
    # keys are of one length (bands of as many hash values): a key's first 4 bytes, a uniform hash, partition it
    first = np.frombuffer(b"".join(keys["key"]), dtype=np.uint8).reshape(len(keys), -1)[:, :4].copy().view(
        np.uint32)[:, 0].astype(np.uint64) if len(keys) else np.zeros(0, np.uint64)
    _by_part(scratch, "bands", block, first + keys["band"].to_numpy().astype(np.uint64), n_parts,
             row=keys["row"].to_numpy(), band=keys["band"].to_numpy(), key=np.asarray(keys["key"], dtype=object))
    name = eb.SHARD.format(start=block.start)
    _write(Path(scratch) / "prompts", name, pa.table({"prompt": prompts, "id": ids.tolist()}))
    at = cb.within(length_rows, block.start, block.stop) - block.start
    if at.size:
        _write(Path(scratch) / "train_lengths", name, pa.table({"prompt": [prompts[i] for i in at]}))
    return block.rows


def _fields(table, text, reference) -> dict[str, list[str]]:
    from erroranalysis.stages.contamination import _strings

    frame = table.to_pandas()
    return {"prompt": _strings(frame, text) if text else [""] * len(frame),
            "reference": _strings(frame, reference) if reference else [""] * len(frame)}


def _eval_block(table, block, *, scratch, n, text, reference, n_parts, model):
    from erroranalysis.datachecks.lengths import histogram, word_counts

    fields = _fields(table, text, reference)
    hashes = cb.eval_hashes(list(fields.values()), n)
    _by_part(scratch, "eval", block, hashes, n_parts, start=np.full(hashes.size, block.start, np.int64))
    count, _ = _token_counter(model)
    lengths = {"words": histogram(word_counts(fields["prompt"])),
               "tokens": histogram(count(fields["prompt"])) if count is not None else None}
    return {"present": {field: any(texts) for field, texts in fields.items()}, "lengths": lengths}


@functools.lru_cache(maxsize=1)
def _token_counter(model: str | None):
    from erroranalysis.stages.contamination import token_counter

    return token_counter(model)  # once per worker process: the tokenizer loads once


def _added(a: dict | None, b: dict | None) -> dict | None:
    if a is None or b is None:
        return a if b is None else b
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}


def _join(scratch: str, part: int, **_) -> int:
    """One hash partition: the training rows of each eval hash, sent to the eval blocks that hold it."""
    import pyarrow as pa

    evals = _read(Path(scratch) / "eval" / str(part))
    trains = _read(Path(scratch) / "train" / str(part))
    if evals is None or trains is None:
        return 0
    eval_hash = evals.column("hash").to_numpy()
    hashes, rows = cb.match(np.unique(eval_hash), trains.column("hash").to_numpy(), trains.column("row").to_numpy())
    block = evals.column("start").to_numpy()
    for start in np.unique(block):
        mine = np.isin(hashes, eval_hash[block == start])
        if mine.any():
            _write(Path(scratch) / "hits" / str(int(start)), f"part-{part:04d}.parquet",
                   pa.table({"hash": hashes[mine], "train_row": rows[mine]}))
    return int(np.unique(hashes).size)


def _columns_block(table, block, *, scratch, n, text, reference, fields, id_column, train_starts):
    import pandas as pd
    import pyarrow as pa

    from erroranalysis.datachecks import contamination_report as report
    from erroranalysis.datachecks.contamination import from_matches

    texts = _fields(table, text, reference)
    hits = _read(Path(scratch) / "hits" / str(block.start))
    matched = hits.to_pandas() if hits is not None else pd.DataFrame({"hash": np.zeros(0, np.uint64),
                                                                      "train_row": np.zeros(0, np.int64)})
    frames = {field: from_matches(texts[field], matched, n) for field in fields}
    columns = report.row_columns(frames, block.rows, lambda rows: _train_ids(scratch, id_column, train_starts, rows))
    _write(Path(scratch) / "columns", eb.SHARD.format(start=block.start), pa.table({
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
    ids = _Rows(scratch, train_starts, "id")
    return np.array([ids[r] for r in rows], dtype=object)


def _one(step: str, **kwargs):
    """The tasks that run once per partition, per training block or once (Ray runs several kinds at once)."""
    return {"join": _join, "bands": _bands, "verify": _verify, "near": _near, "lengths": _lengths}[step](**kwargs)


class _Rows:
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


def _bands(scratch: str, part: int, train_starts: list[int], **_) -> int:
    """One partition of the LSH band keys: its candidate pairs, sent to the training block of their first row."""
    import pyarrow as pa

    from erroranalysis.datachecks.near_duplicates import candidate_pairs

    table = _read(Path(scratch) / "bands" / str(part))
    if table is None:
        return 0
    pairs = candidate_pairs(table.select(["row", "band", "key"]).to_pandas())
    where = np.searchsorted(np.asarray(train_starts), pairs["i"].to_numpy(), side="right") - 1
    for b in np.unique(where):
        mine = pairs[where == b]
        _write(Path(scratch) / "candidates" / str(train_starts[b]), f"part-{part:04d}.parquet",
               pa.Table.from_pandas(mine, preserve_index=False))
    return len(pairs)


def _verify(scratch: str, start: int, train_starts: list[int], threshold: float, **_) -> int:
    """The candidate pairs whose first row is in one training block, verified by their exact Jaccard similarity."""
    import pyarrow as pa

    from erroranalysis.datachecks.near_duplicates import verified

    table = _read(Path(scratch) / "candidates" / str(start))
    if table is None:
        return 0
    pairs = table.to_pandas().drop_duplicates(ignore_index=True)
    found = verified(pairs, _Rows(scratch, train_starts, "prompt").__getitem__, threshold)
    _write(Path(scratch) / "verified", eb.SHARD.format(start=start), pa.Table.from_pandas(found, preserve_index=False))
    return len(found)


def _near(scratch: str, train_starts: list[int], n_train: int, threshold: float, num_perm: int) -> dict:
    """The near-duplicate section from the verified pairs (in row order: each block's shard is sorted)."""
    import pandas as pd

    from erroranalysis.datachecks.contamination_report import near_duplicate_section
    from erroranalysis.datachecks.near_duplicates import groups

    table = _read(Path(scratch) / "verified")
    pairs = table.to_pandas() if table is not None else pd.DataFrame(
        {"i": np.zeros(0, np.int64), "j": np.zeros(0, np.int64), "similarity": np.zeros(0)})
    return near_duplicate_section(_Rows(scratch, train_starts, "prompt", n_train), pairs, groups(n_train, pairs),
                                  _Rows(scratch, train_starts, "id", n_train), threshold, num_perm)


def _lengths(scratch: str, model: str | None, eval_lengths: dict, **_) -> dict:
    """The length comparison: the training sample's prompts against every eval prompt's lengths (the blocks'
    histograms: the same distribution, so the same quantiles and KS test)."""
    from erroranalysis.datachecks.lengths import counts_report, from_histogram, word_counts

    train = _read(Path(scratch) / "train_lengths")
    prompts = train.column("prompt").to_pylist() if train is not None else []
    count, tokenizer = _token_counter(model)
    tokens = eval_lengths["tokens"]
    out = counts_report(word_counts(prompts), from_histogram(eval_lengths["words"]),
                        np.asarray(count(prompts)) if count is not None else None,
                        from_histogram(tokens) if count is not None and tokens is not None else None, tokenizer)
    out["n_train_measured"] = len(prompts)
    return out


def block_columns(folder: str, block) -> dict:
    """A predictions block's contamination columns (step 4's scratch shard), for its shard of checks.parquet."""
    import pyarrow.parquet as pq

    table = pq.read_table(Path(folder) / eb.SHARD.format(start=block.start))
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
