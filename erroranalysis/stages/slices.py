"""The slices stage: find error slices in a run's predictions and commit slices.parquet and slice_members.parquet.

Reads predictions (text, label, correct, truncated and the metadata columns), runs
`erroranalysis.slices.extract_features` and `find_slices`. Parameters are checked when `SliceParams` is built and
inputs before the stage starts, so a bad call leaves the previous slices intact. See docs/run-directory.md.

Under a distributed engine (`--engine ray`) the driver reads no row: `erroranalysis.slices.search_blocks` runs
per-block counting passes on the workers and merges counts (the method: `erroranalysis.slices._blocks`,
docs/scale.md), and the workers write slice_members.parquet as one shard per block. Same slices, counts and members
as in process; duplicate example ids are then checked within each block only.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from erroranalysis import rundir
from erroranalysis.core import schemas, shards
from erroranalysis.core.errors import RunError
from erroranalysis.rundir import SLICE_MEMBERS, SLICES, Run, readers
from erroranalysis.rundir.artifacts import TABLES
from erroranalysis.slices import FeatureParams, SearchParams
from erroranalysis.stages.common import metadata_of
from erroranalysis.stages.inputs import for_workers

STAGE = "slices"


@dataclass(frozen=True)
class SliceParams(FeatureParams, SearchParams):
    """The slice stage (`erroranalysis slices --help`): the search's and the features' parameters
    (`slices.SearchParams`, `slices.FeatureParams`)."""


def slices_run(run_dir: str | Path, params: SliceParams = SliceParams(), *, embed_fn=None, engine=None,
               **overrides) -> dict[str, Any]:
    """Find a run's error slices and commit them; return a summary (counts, base error rate, messages, slices).

    `embed_fn` replaces the packaged word-embedding model used to merge near-synonymous word slices
    (`merge=False` skips merging). `engine` (`erroranalysis.engines.Engine`): a distributed one counts on its
    workers (`slices_by_blocks`)."""
    from erroranalysis import slices as sl

    params = params.replace(**overrides) if overrides else params
    run = rundir.Run.open(run_dir)
    if engine is not None and engine.distributed:
        return slices_by_blocks(run, params, embed_fn, engine)
    frame = readers.read_units(run)
    listed = (run.manifest.get("data") or {}).get("metadata_columns") or []
    absent = [c for c in listed if c not in frame.columns]
    support = sl.default_min_support(len(frame)) if params.min_support is None else int(params.min_support)
    meta_cols = metadata_of(run, frame.columns)
    record = _record(run, params, support, meta_cols, embed_fn)

    with run.stage(STAGE, record) as staging:
        start = time.perf_counter()
        features = sl.extract_features(
            frame["text"].tolist(), frame[meta_cols] if meta_cols else None,
            labels=frame["label"].tolist() if run.task in ("classification", "token-classification") else None,
            truncated=frame["truncated"].tolist() if "truncated" in frame.columns else None,
            min_support=support, params=params.project(sl.FeatureParams))
        feature_seconds = time.perf_counter() - start
        result = sl.find_slices(
            features, frame["correct"].to_numpy(), example_ids=frame["example_id"].to_numpy(dtype=object),
            params=params.project(sl.SearchParams).replace(min_support=support), embed_fn=embed_fn)
        staging.write_parquet(SLICE_MEMBERS, result.members.astype(schemas.SLICE_MEMBERS.dtypes))
        summary = _commit(staging, result, absent, feature_seconds, time.perf_counter() - start - feature_seconds)
    return _returned(summary, run, result)


def _record(run: Run, params: SliceParams, support: int, meta_cols: list[str], embed_fn) -> dict:
    return {**params.record(), "min_support": support, "metadata_columns": meta_cols,
            "embedder": None if not params.merge else ("all-MiniLM-L6-v2" if embed_fn is None else "custom")}


def _words_on_a_worker(engine, words):
    """The packaged word-embedding model's vectors of `words` (a few hundred), computed in a Ray task."""
    from erroranalysis.engines import blocks

    return blocks.call_on_worker(_embed_words, engine, words=list(words))


def _embed_words(words: list[str]):
    from erroranalysis.slices import default_word_embedder

    return default_word_embedder()(words)


def slices_by_blocks(run: Run, params: SliceParams = SliceParams(), embed_fn=None, engine=None) -> dict[str, Any]:
    """The stage from per-block counts (`erroranalysis.slices.search_blocks`): on a distributed engine's workers,
    which also write the members, or, `engine` None, block after block in this process. `slices_run` calls it for a
    distributed engine; the result is the in-process one."""
    from erroranalysis import slices as sl
    from erroranalysis.engines import blocks

    name = readers.units_artifact(run)
    path = for_workers(run, name, engine)
    names = shards.open_parquet(blocks.files_of(path)[0]).schema_arrow.names  # in the file's order
    missing = [c for c in TABLES[name].required if c not in names]
    if missing:
        raise RunError(f"{path}: no column {missing[0]!r}; run the stage that writes {name} again.")
    n = blocks.n_rows(blocks.plan(path))  # from the footers
    listed = (run.manifest.get("data") or {}).get("metadata_columns") or []
    absent = [c for c in listed if c not in names]
    support = sl.default_min_support(n) if params.min_support is None else int(params.min_support)
    meta_cols = metadata_of(run, names)
    inputs = sl.Inputs(label=run.task in ("classification", "token-classification"), truncated="truncated" in names,
                       metadata=tuple(meta_cols), source=str(path))
    record = {**_record(run, params, support, meta_cols, embed_fn),  # how: docs/scale.md
              "engine": engine.engine if engine is not None else "local", "method": "per-block counts"}

    def run_pass(fn, ordered, **kwargs):
        done = blocks.map_blocks(_block_task, path, engine, columns=inputs.columns(), ordered=ordered,
                                 kwargs={"fn": fn, "inputs": inputs, "kwargs": kwargs},
                                 rows_per_block=blocks.ROWS_PER_BLOCK)
        return (result for _, result in done)

    if embed_fn is None and params.merge and engine is not None and engine.distributed:
        embed_fn = functools.partial(_words_on_a_worker, engine)  # the driver loads no model
    with run.stage(STAGE, record) as staging:
        found = sl.search_blocks(run_pass, n, min_support=support, params=params, embed_fn=embed_fn)
        result = found.result
        if found.slices:
            folder = staging.shards(SLICE_MEMBERS, engine)
            for _ in blocks.map_blocks(_members_task, path, engine, columns=inputs.columns(),
                                       rows_per_block=blocks.ROWS_PER_BLOCK,
                                       kwargs={"inputs": inputs, "spec": found.spec, "slices": found.slices,
                                               "folder": str(folder)}):
                pass
        else:
            staging.write_parquet(SLICE_MEMBERS, result.members.astype(schemas.SLICE_MEMBERS.dtypes))
        summary = _commit(staging, result, absent, found.feature_seconds, found.search_seconds)
    return _returned(summary, run, result)


def _commit(staging, result, absent: list[str], feature_seconds: float, search_seconds: float) -> dict:
    """Stage slices.parquet (slice_members is staged already) and the manifest's facts; the summary."""
    staging.write_parquet(SLICES, result.slices)
    summary = result.summary()
    if absent:
        summary["messages"].insert(0, f"metadata columns {absent} are listed in the manifest but not in "
                                      f"{rundir.PREDICTIONS}; skipped.")
    summary["feature_seconds"] = round(feature_seconds, 3)
    summary["search_seconds"] = round(search_seconds, 3)
    staging.facts.update({k: summary[k] for k in ("n_examples", "n_failures", "base_error_rate", "n_features",
                                                  "n_tested", "n_slices", "messages")})
    return summary


def _returned(summary: dict, run: Run, result) -> dict:
    summary["run"] = str(run.path)
    summary["files"] = [SLICES, SLICE_MEMBERS]
    summary["slices"] = result.slices.drop(columns=["features"]).to_dict("records")
    return summary


def _block_task(table, block, fn, inputs, kwargs):
    """A counting pass on one block (`erroranalysis.slices.search_blocks`): the block's rows checked, then `fn`."""
    from erroranalysis import slices as sl

    return fn(sl.rows_of(table.to_pandas(), inputs, block.start), **kwargs)


def _members_task(table, block, inputs, spec, slices, folder) -> int:
    """Pass 4 on one block: its members of the kept slices, written as the block's shard of slice_members."""
    import pyarrow as pa

    from erroranalysis import slices as sl
    from erroranalysis.engines import blocks

    members = sl.member_rows(sl.rows_of(table.to_pandas(), inputs, block.start), spec, slices)
    blocks.write_shard(folder, block, pa.table({"example_id": pa.array(members["example_id"].tolist(), pa.string()),
                                                "slice_id": pa.array(members["slice_id"], pa.int64())}))
    return len(members)
