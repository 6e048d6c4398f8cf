"""`run --task token-classification --engine ray` with the eval set read by the workers: the driver holds no sentence.

The driver reads the Parquet footer (of the file, or of the Parquet copy one worker makes of a JSONL or CSV file,
`stages.inputs.worker_rows`), a streamed sha256 and the first rows, checked as in-process (`scan_head`: a wrong
column fails before the run exists). Each actor of `engines.ray_tokens.run_blocks` loads the token classifier once
and runs `stages.tokens.token_block` on its blocks of rows: the in-process rules read and check the block
(`sources.tokens.block_sentences`: the same one-line errors naming the file and line), `tokens.sentences_job`
tokenizes it, `infer.tokens.predict` predicts it and `tokens.tables` builds its rows of predictions.parquet,
spans.parquet and hidden_states.npy, written as the shards `part-<first row>` into the stage's staging area. The
driver keeps counts, checks that the shards cover every row once and that the ids are unique across blocks (hash
partitions, `sources.blocks.write_id_parts` / `first_duplicate`), and raises the first bad block's error.

With `--train`, the training file's gold-entity surfaces (what marks a span `seen_in_train`) are read by the workers
too (`worker_surfaces`): a Parquet file (local or in object storage) as it is, a JSONL or CSV file or a
save_to_disk folder through its Parquet copy, in blocks (`engines.blocks.map_blocks`), each checked as in-process
`read_sentences` checks the whole file and sending back its set of surfaces (`sources.tokens.gold_surfaces`, the
rule in-process uses); the driver holds their union, then sends it to the actors as the in-process job holds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from erroranalysis import rundir
from erroranalysis.core import files, shards
from erroranalysis.core.errors import DataError
from erroranalysis.core.shards import SHARD
from erroranalysis.engines import Engine, EngineError
from erroranalysis.sources import blocks
from erroranalysis.sources.table import DataOptions, as_source
from erroranalysis.sources.tokens import Sentences, block_sentences, gold_surfaces, read_sentences, sentences_of


def scan_head(data, data_opts: DataOptions, params, labels, types, rows_path) -> Sentences:
    """The first rows (`blocks.HEAD_ROWS`) as sentences checked as in-process, over a `blocks.Scanned` eval set:
    the row count from the footer, the sha256 streamed; the workers read the rest."""
    from erroranalysis.core import storage

    source = as_source(data)
    file = blocks.parquet_file(as_source(rows_path) if rows_path is not None else source)
    n_rows = file.metadata.num_rows
    if n_rows == 0:
        raise DataError(f"{source}: no examples (an empty Parquet file); add at least one row.")
    sha256 = storage.digest(source)["sha256"]
    head = block_sentences(source, 0, min(n_rows, blocks.HEAD_ROWS), data_opts, params.tokens_column,
                           params.tags_column, params.spans_column, labels, types, sha256=sha256, file=file)
    first = head.eval_set
    names = set(file.schema_arrow.names)
    head.eval_set = blocks.Scanned(
        frame=first.frame, path=source, format=first.format, sha256=sha256, columns=first.columns,
        metadata_columns=first.metadata_columns, max_chars=first.max_chars, notes=first.notes, n_rows=n_rows,
        sources={m: m if m in names else m.removeprefix("meta_") for m in first.metadata_columns},
        rows_path=rows_path)
    return head


def workers_read_train(train, rows_path) -> bool:
    """Whether the workers read the training file: its Parquet copy (a JSONL or CSV file, a save_to_disk folder), or
    a Parquet file on a local disk or object storage."""
    return rows_path is not None or blocks.readable(as_source(train))


def worker_surfaces(train, rows_path, data_opts: DataOptions, params, labels, types, scheme, engine: Engine
                    ) -> set[str]:
    """The training file's gold-entity surfaces, each block read, checked and reduced to its set of surfaces by a
    worker (`block_surfaces`); the driver holds their union: an aggregate bounded by the vocabulary of entities,
    not by the training rows. A bad cell is the in-process one-line error (the first to come back, where several
    blocks hold one)."""
    from erroranalysis.engines import blocks as engine_blocks

    source = as_source(train)
    rows = as_source(rows_path) if rows_path is not None else source
    file = blocks.parquet_file(rows)
    columns = (params.tokens_column, params.tags_column, params.spans_column)
    if file.metadata.num_rows == 0:  # no block to check: the in-process answer (its one-line error)
        return gold_surfaces(read_sentences(source, data_opts, *columns, labels, types), scheme, params.span_mode)
    kwargs = {"source": str(source), "copy": blocks.is_copy(file.schema_arrow), "data_opts": data_opts,
              "columns": columns, "labels": list(labels), "types": list(types), "scheme": scheme,
              "span_mode": params.span_mode}
    surfaces: set[str] = set()
    for _, part in engine_blocks.map_blocks(block_surfaces, str(rows), engine, kwargs=kwargs):
        surfaces |= part
    return surfaces


def block_surfaces(table, block, *, source, copy: bool, data_opts: DataOptions, columns: tuple, labels, types,
                   scheme: str, span_mode: str) -> set[str]:
    """On a worker: a block of the training file (an Arrow table, rows from `block.start`) checked as
    `read_sentences` checks the whole file, its errors naming the user's file and line; its gold surfaces back."""
    source = as_source(source)
    raw = blocks.with_lines(table.to_pandas(), block.start, copy)
    sentences = sentences_of(source, (raw, blocks.format_of(source)), data_opts, *columns, labels, types)
    return gold_surfaces(sentences, scheme, span_mode)


def workers_stage(staging, job, engine: Engine, advance, block_fn: Callable) -> None:
    """The infer stage's body on Ray with the workers reading the rows (`job`: a `stages.tokens.TokenJob` over
    `scan_head`'s sentences): `block_fn` (`stages.tokens.token_block`) on each block, shards into `staging`, counts
    as facts."""
    from erroranalysis.stages.inputs import stage_scratch

    with stage_scratch(staging.run_path, ".ids-", engine) as ids:  # the id check's; checks the shared disk
        _workers_stage(staging, job, engine, advance, block_fn, ids)


def _workers_stage(staging, job, engine: Engine, advance, block_fn: Callable, ids) -> None:
    from erroranalysis.engines import blocks as engine_blocks
    from erroranalysis.engines.ray_data import check_coverage
    from erroranalysis.engines.ray_tokens import run_blocks
    from erroranalysis.engines.sinks import shard_starts

    scanned, p = job.sentences.eval_set, job.params
    paths = {name: str(staging.shards(name, engine)) for name in (rundir.PREDICTIONS, rundir.SPANS, rundir.HIDDEN)}
    ctx = {"source": str(scanned.path) if isinstance(scanned.path, Path) else scanned.path,
           "rows_path": scanned.rows_path, "data_opts": job.data_opts, "params": p, "scheme": job.scheme,
           "types": job.types, "surfaces": job.train_surfaces, "sha256": scanned.sha256, "sources": scanned.sources,
           "paths": paths, "ids": str(ids)}
    load_kwargs = {"device": p.device, "precision": p.precision, "trust_remote_code": p.trust_remote_code}
    found = run_blocks(block_fn, ctx, scanned.n_rows, model=str(job.model.resolve()), load_kwargs=load_kwargs,
                       engine=engine, progress=advance)
    covered = {start: result["rows"] for start, result in found}
    check_coverage(covered, scanned.n_rows, (paths[rundir.PREDICTIONS], None, paths[rundir.HIDDEN]))
    if shard_starts(paths[rundir.SPANS], ".parquet") != sorted(covered):
        raise EngineError(f"--engine ray: {rundir.SPANS} lacks shards of some blocks (the workers' filesystem is "
                          "not the driver's?); put the run directory on a filesystem every node shares.")
    options = job.data_opts
    if options.id_column:
        blocks.duplicate_error(engine_blocks.call_each(blocks.first_duplicate, engine, blocks.id_parts(ids)),
                               scanned.path, options)
    for key in ("n_error_spans", "truncated_sentences", "n_cut", "snapped_spans"):
        staging.facts[key] = int(sum(result[key] for _, result in found))
    staging.facts["read_by"] = "workers"


def write_table(folder, start: int, frame, schema, sources: dict) -> None:
    """A block's rows of a table as its shard: metadata columns in the file's types, a column without a value in
    this block (all None, or only empty lists) typed as text, so that every shard of the folder has one schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = blocks.conform(pa.Table.from_pandas(frame, preserve_index=False), schema, sources)
    for i, field in enumerate(table.schema):
        if pa.types.is_null(field.type):
            table = table.set_column(i, field.name, table.column(i).cast(pa.string()))
        elif pa.types.is_list(field.type) and pa.types.is_null(field.type.value_type):
            table = table.set_column(i, field.name, table.column(i).cast(pa.list_(pa.string())))
    shards.write(folder, SHARD.format(start=start, suffix=".parquet"),
                 lambda p: pq.write_table(table, p, row_group_size=files.ROW_GROUP))
