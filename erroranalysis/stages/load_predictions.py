"""`erroranalysis analyze`: predictions made elsewhere (text, label, pred, and the model's output as prob_<label>
columns or one probs/scores/logits column: see `erroranalysis.sources.cells`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from erroranalysis import rundir
from erroranalysis.core.errors import DataError, preview, where
from erroranalysis.core.progress import as_reporter
from erroranalysis.rundir import Run, create_run
from erroranalysis.sources import cells
from erroranalysis.sources.table import DataOptions, EvalSet, as_source, load_eval_set, map_labels, read_table
from erroranalysis.stages.after import AfterParams, after_predictions
from erroranalysis.stages.analyze import OutputParams, Reading
from erroranalysis.stages.common import data_entry, say_notes
from erroranalysis.tasks import Task

PROB_PREFIX = "prob_"


def read_outputs(file, data_opts: DataOptions, outputs: OutputParams, required: tuple[str, ...]):
    """(eval set, the scores column or None, prob_<label> columns): the file read once, the model's output column
    kept out of the metadata."""
    source = as_source(file)
    table = read_table(source, encoding=data_opts.encoding, split=data_opts.split)
    columns = [c for c in table[0].columns if c != "_line"]
    scores, prob_columns = output_columns(columns, table[0], outputs, source)
    eval_set = load_eval_set(source, text_column=data_opts.text_column, label_column=data_opts.label_column,
                             id_column=data_opts.id_column, encoding=data_opts.encoding, split=data_opts.split,
                             required=required + ((scores,) if scores else ()), max_chars=data_opts.max_chars,
                             table=table)
    eval_set.metadata_columns = [c for c in eval_set.metadata_columns if c not in prob_columns]
    return eval_set, scores, prob_columns


def output_columns(columns: list[str], frame, outputs: OutputParams, source) -> tuple[str | None, list[str]]:
    """(the scores column or None, the prob_<label> columns): one way of giving the model's output, not two."""
    scores = cells.scores_column(columns, frame, outputs.probs_column, source)
    prob_columns = [c for c in columns if c.startswith(PROB_PREFIX)]
    if scores and prob_columns:
        raise DataError(f"{source}: both prob_<label> columns and the scores column {scores!r}; drop one of them.")
    if prob_columns and outputs.labels:
        raise DataError(f"{source}: --labels orders the lists of a scores column, but the prob_<label> columns name "
                        "their labels; drop --labels.")
    return scores, prob_columns


def analyze_predictions(file: str | Path, out: str | Path, reading: Reading, *, task: Task,
                        after: AfterParams = AfterParams(), overwrite: bool = False, embedder=None, progress=None,
                        engine=None) -> Run:
    """`erroranalysis analyze`: predictions made elsewhere (text, label, pred, and optional prob_<label> columns or
    a probs/scores/logits column, `reading.output`). `progress`: an `erroranalysis.core.progress.Reporter`;
    `engine`: where the rows are read and the checks' MiniLM embedding runs (Ray: the workers read the file in
    blocks, `_analyze_on_workers`)."""
    from erroranalysis.stages import inputs

    if engine is not None and engine.distributed and inputs.workers_read(file):
        return _analyze_on_workers(file, out, reading, task=task, after=after, overwrite=overwrite,
                                   embedder=embedder, progress=progress, engine=engine)
    data_opts, pred_column, outputs = reading.data, reading.pred_column_of(task), reading.output
    eval_set, scores, prob_columns = read_outputs(file, data_opts, outputs, (pred_column,))
    layout = Layout.of(eval_set, data_opts, pred_column, scores, prob_columns, outputs)
    labels = list(layout.labels) if layout.labels is not None else layout.order(distinct_labels(eval_set, layout))
    table, probs = convert(eval_set, layout, labels)
    if engine is not None and engine.distributed:
        from erroranalysis.engines import ray_data

        ray_data.connect(engine)  # fail before the run directory exists when Ray is missing or unreachable
    say_notes(eval_set, progress)
    manifest = {"task": "classification", "labels": labels, "seed": after.seed,
                "data": {**data_entry(eval_set), "pred_column": pred_column,
                         **({"probs_column": scores} if scores else {})}}
    record = {"pred_column": pred_column, "probabilities": probs is not None, "probs_column": scores}
    with create_run(out, overwrite=overwrite, **manifest) as run:
        with run.stage("load_predictions", record) as st:
            st.write_parquet(rundir.PREDICTIONS, table, engine)  # where the workers of the stages after read them
            if probs is not None:
                st.write_npy(rundir.PROBS, probs, engine)
        after_predictions(run, after, embedder=embedder, progress=progress, engine=engine)
    return run


@dataclass(frozen=True)
class Layout:
    """How a predictions file's rows become a run's, decided once for the whole file (from its first rows when
    workers read it): the columns that hold the prediction and the model's output, the labels when the output or
    --labels names them (None: the sorted distinct gold and predicted labels, `order`), whether gold and
    predictions are mapped onto them (`named`), the metadata columns kept."""

    label_column: str
    pred_column: str
    scores: str | None
    prob_columns: tuple[str, ...]
    labels: tuple[str, ...] | None
    named: bool
    metadata: tuple[str, ...]

    @classmethod
    def of(cls, eval_set: EvalSet, data_opts: DataOptions, pred_column: str, scores: str | None,
           prob_columns: list[str], outputs: OutputParams) -> Layout:
        frame = eval_set.frame
        labels = list(outputs.labels) or None
        if prob_columns:
            labels = [c[len(PROB_PREFIX):] for c in prob_columns]
        elif scores and not labels:
            labels = cells.scores_labels(frame[scores].to_numpy(dtype=object), source=str(eval_set.path),
                                         lines=frame["_line"].to_numpy(), column=scores)
        return cls(data_opts.label_column, pred_column, scores, tuple(prob_columns),
                   tuple(labels) if labels else None, bool(prob_columns or scores or outputs.labels),
                   tuple(eval_set.metadata_columns))

    def order(self, found) -> list[str]:
        """The labels from the distinct gold and predicted ones: a scores column's lists in natural order."""
        return cells.sort_labels(found) if self.scores else sorted(found)


def distinct_labels(eval_set: EvalSet, layout: Layout) -> set:
    """The distinct gold and predicted labels of some rows (the predictions checked as `convert` does)."""
    preds = _labels_column(eval_set.frame, layout.pred_column, eval_set)
    return set(eval_set.frame["label"].to_numpy()) | set(preds)


def convert(eval_set: EvalSet, layout: Layout, labels: list[str]):
    """(predictions table, probabilities or None) of some rows (the whole file, or one block of it on a worker),
    every cell checked with the in-process one-line errors."""
    frame, source, lines = eval_set.frame, str(eval_set.path), eval_set.frame["_line"].to_numpy()
    preds = _labels_column(frame, layout.pred_column, eval_set)
    gold = frame["label"].to_numpy()
    probs = None
    if layout.prob_columns:
        probs = _probabilities(frame, list(layout.prob_columns), eval_set)
    elif layout.scores:
        probs = cells.read_scores(frame[layout.scores].to_numpy(dtype=object), labels, multilabel=False,
                                  source=source, lines=lines, column=layout.scores).astype(np.float32)
    if layout.named:
        gold = map_labels(gold, labels, source=source, lines=lines, column=layout.label_column)
        preds = map_labels(preds, labels, source=source, lines=lines, column=layout.pred_column)
    return _analyze_table(frame, gold, preds, labels, probs, list(layout.metadata)), probs


def _analyze_on_workers(file, out, reading: Reading, *, task: Task, after: AfterParams, overwrite: bool, embedder,
                        progress, engine) -> Run:
    """`analyze` with Ray workers reading the file in blocks (a JSONL or CSV file from a Parquet copy one worker
    makes, `stages.inputs`): the driver reads the first rows (the columns, the output's layout), then a first pass
    over the blocks validates them and brings back per block the distinct labels and the texts cut (`_first_pass`:
    ids are checked unique on the workers); the second converts each block and writes it as shards of the stage
    (`part-<first row>`), the driver checking that they cover every row once before it commits."""
    from erroranalysis.core import storage
    from erroranalysis.engines import ray_data
    from erroranalysis.stages import inputs

    if not storage.is_url(out):
        rundir.check_out(Path(out), overwrite)  # a clash fails before any work
    ray_data.connect(engine)  # fail before anything is written when Ray is missing or unreachable
    reporter = as_reporter(progress)
    with inputs.worker_rows(file, reading.data, engine, out) as copy, inputs.scratch(out, engine) as ids:
        scanned, work = _first_pass(file, copy, reading, task, engine, reporter, ids)
        say_notes(scanned, reporter)
        layout, labels = work["layout"], work["labels"]
        manifest = {"task": "classification", "labels": labels, "seed": after.seed,
                    "data": {**data_entry(scanned), "pred_column": layout.pred_column,
                             **({"probs_column": layout.scores} if layout.scores else {})}}
        has_probs = bool(layout.prob_columns or layout.scores)
        record = {"pred_column": layout.pred_column, "probabilities": has_probs, "probs_column": layout.scores}
        with create_run(out, overwrite=overwrite, **manifest) as run:
            with run.stage("load_predictions", record) as st, \
                    reporter.stage("load_predictions", total=scanned.n_rows) as advance:
                paths = (st.shards(rundir.PREDICTIONS, engine),
                         st.shards(rundir.PROBS, engine) if has_probs else None)
                written = _over_blocks(_write_block, scanned.rows, engine, {**work, "paths": paths}, advance)
                ray_data.check_coverage({b.start: r for b, r in written}, scanned.n_rows, paths)
                st.facts["read_by"] = "workers"
            after_predictions(run, after, embedder=embedder, progress=progress, engine=engine)
    return run


def _first_pass(file, copy, reading: Reading, task: Task, engine, reporter, ids):
    """(the file as the driver knows it, what each block's conversion needs): the first rows read here, then every
    block validated by the workers, which send back its distinct labels and texts cut, and with --id-column write
    its ids cut by hash into folder `ids`, where one task per part finds an id used twice (`blocks.write_id_parts`):
    the driver holds none of them."""
    from erroranalysis.engines import ray_data
    from erroranalysis.sources import blocks

    data_opts, pred_column, outputs = reading.data, reading.pred_column_of(task), reading.output
    source = as_source(file)
    head = blocks.read_rows(copy or source, 0, blocks.HEAD_ROWS)
    scores, prob_columns = output_columns([c for c in head.columns if c != "_line"], head, outputs, source)
    scanned = blocks.scan(source, data_opts, None, required=(pred_column,) + ((scores,) if scores else ()),
                          rows_path=copy)
    scanned.metadata_columns = [c for c in scanned.metadata_columns if c not in prob_columns]
    layout = Layout.of(scanned, data_opts, pred_column, scores, prob_columns, outputs)
    work = {"source": source, "opts": data_opts, "required": (pred_column,) + ((scores,) if scores else ()),
            "sha256": scanned.sha256, "layout": layout}
    with reporter.stage("check rows", total=scanned.n_rows) as advance:
        found = _over_blocks(_check_block, scanned.rows, engine, {**work, "ids": ids}, advance)
    scanned.n_cut = sum(f["n_cut"] for _, f in found)
    if data_opts.id_column:
        blocks.duplicate_error(ray_data.run_tasks(blocks.first_duplicate, engine, blocks.id_parts(ids)), source,
                               data_opts)
    labels = list(layout.labels) if layout.labels is not None else \
        layout.order(set().union(*(f["labels"] for _, f in found)))
    schema = blocks.parquet_file(scanned.rows).schema_arrow  # the shards' metadata columns keep the file's types
    return scanned, {**work, "labels": labels, "schema": schema, "sources": scanned.sources}


def _over_blocks(fn, rows, engine, kwargs: dict, advance) -> list:
    """`fn` over the blocks of Parquet file `rows` on the workers: (block, result) pairs in row order; the first
    block's error in file order raised as the in-process one-line error (each block sends back its first)."""
    from erroranalysis.engines import blocks as engine_blocks
    from erroranalysis.engines.ray_data import block_error

    pairs = engine_blocks.map_blocks(fn, rows, engine, kwargs=kwargs, ordered=True, progress=advance,
                                     rows_per_block=engine_blocks.ROWS_PER_BLOCK)
    for _, result in pairs:
        if isinstance(result, str):
            raise block_error(result)
    return pairs


def _block_rows(table, block, source, opts: DataOptions, required, sha256: str) -> EvalSet:
    from erroranalysis.sources import blocks

    frame = blocks.with_lines(table.to_pandas(), block.start, blocks.is_copy(table.schema))
    return blocks.rows_of(frame, block.start, opts, source=source, required=required, sha256=sha256)


def _check_block(table, block, *, source, opts: DataOptions, required, sha256: str, layout: Layout, ids):
    """A worker's first pass over a block: {labels, n_cut}, its ids written into folder `ids` by hash
    (`blocks.write_id_parts`), or its first bad cell as "Class\tmessage"."""
    from erroranalysis.core.errors import UserError
    from erroranalysis.sources import blocks

    try:
        eval_set = _block_rows(table, block, source, opts, required, sha256)
        labels = distinct_labels(eval_set, layout)  # the predictions checked here too: before the run exists
    except UserError as exc:  # sent back as data: the driver raises the first block's, in file order
        return f"{type(exc).__name__}\t{exc}"
    if opts.id_column:
        blocks.write_id_parts(ids, block.start, eval_set.frame["example_id"], eval_set.frame["_line"])
    return {"labels": labels, "n_cut": int(eval_set.frame["_cut"].sum())}


def _write_block(table, block, *, source, opts: DataOptions, required, sha256: str, layout: Layout, labels,
                 schema, sources: dict, paths):
    """A worker's second pass over a block: converted, written as the stage's shards of its first row (the
    probabilities first: the Parquet shard is the sign the block is whole); its rows, or its first bad cell."""
    import pyarrow as pa

    from erroranalysis.core import files, shards
    from erroranalysis.core.errors import UserError
    from erroranalysis.core.shards import SHARD
    from erroranalysis.engines.blocks import write_shard
    from erroranalysis.sources import blocks

    try:
        frame, probs = convert(_block_rows(table, block, source, opts, required, sha256), layout, labels)
    except UserError as exc:
        return f"{type(exc).__name__}\t{exc}"
    if probs is not None:
        shards.write(paths[1], SHARD.format(start=block.start, suffix=".npy"), files.npy_writer(probs))
    out = blocks.conform(pa.Table.from_pandas(frame, preserve_index=False), schema, sources)
    write_shard(paths[0], block, out)
    return block.rows


def _labels_column(frame, column: str, eval_set: EvalSet) -> np.ndarray:
    values = frame[column]
    cells.require(values, "label", source=eval_set.path, lines=frame["_line"].to_numpy(), column=column)
    empty = values.isna().to_numpy() | (values.astype(str).str.strip() == "").to_numpy()
    if empty.any():
        line = int(frame["_line"].iat[int(np.argmax(empty))])
        raise DataError(f"{where(eval_set.path, line, column)}: empty prediction; every row needs one.")
    if values.dtype.kind == "f":
        values = values.astype(np.int64)
    return values.astype(str).to_numpy(dtype=object)


def probability_columns(frame, columns: list[str], source) -> np.ndarray:
    """The prob_<label> columns as floats, or a one-line error at the first that is not a number in [0, 1]."""
    import pandas as pd

    values = frame[columns].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | (values < 0) | (values > 1)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise DataError(f"{where(source, int(frame['_line'].iat[r]), columns[c])}: probability "
                        f"{preview([frame[columns[c]].iat[r]])} is not a number in [0, 1].")
    return values


def _probabilities(frame, columns: list[str], eval_set: EvalSet) -> np.ndarray:
    """Single-label probabilities: each row's also sum to 1."""
    values = probability_columns(frame, columns, eval_set.path)
    sums = values.sum(1)
    off = np.abs(sums - 1) > 1e-3
    if off.any():
        r = int(np.argmax(off))
        raise DataError(f"{where(eval_set.path, int(frame['_line'].iat[r]))}: the {PROB_PREFIX}* columns sum to "
                        f"{sums[r]:.4f}, not 1; give one probability per class, or none.")
    return (values / sums[:, None]).astype(np.float32)


def _analyze_table(frame, gold, preds, labels, probs, metadata):
    import pandas as pd

    table = pd.DataFrame({"example_id": frame["example_id"].astype(str), "text": frame["text"],
                          "label": gold.astype(str), "pred": preds.astype(str)})
    table["correct"] = table["label"] == table["pred"]
    if probs is not None:
        index = {label: i for i, label in enumerate(labels)}
        rows = np.arange(len(table))
        gold_p = probs[rows, [index[g] for g in gold]]
        table["confidence"] = probs.max(1).astype(np.float32)
        table["loss"] = (-np.log(np.clip(gold_p, 1e-12, 1))).astype(np.float32)
    else:
        table["confidence"] = np.float32(np.nan)
        table["loss"] = np.float32(np.nan)
    table["n_tokens"] = table["text"].str.split().str.len().fillna(0).astype(np.int32)
    table["truncated"] = frame["_cut"].to_numpy(dtype=bool)  # cut at --max-chars when read
    for column in metadata:
        table[column] = frame[column].to_numpy()
    return table
