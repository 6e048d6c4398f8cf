"""The slices stage: find error slices in a run's predictions and commit slices.parquet and slice_members.parquet.

Reads predictions (text, label, correct, truncated and the metadata columns), runs
`erroranalysis.slices.extract_features` and `find_slices`. Parameters are checked when `SliceParams` is built and
inputs before the stage starts, so a bad call leaves the previous slices intact. See docs/run-directory.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from erroranalysis import rundir
from erroranalysis.core import schemas
from erroranalysis.rundir import SLICE_MEMBERS, SLICES, readers
from erroranalysis.slices import FeatureParams, SearchParams
from erroranalysis.stages.common import metadata_of

STAGE = "slices"


@dataclass(frozen=True)
class SliceParams(FeatureParams, SearchParams):
    """The slice stage (`erroranalysis slices --help`): the search's and the features' parameters
    (`slices.SearchParams`, `slices.FeatureParams`)."""


def slices_run(run_dir: str | Path, params: SliceParams = SliceParams(), *, embed_fn=None,
               **overrides) -> dict[str, Any]:
    """Find a run's error slices and commit them; return a summary (counts, base error rate, messages, slices).

    `embed_fn` replaces the packaged word-embedding model used to merge near-synonymous word slices
    (`merge=False` skips merging)."""
    from erroranalysis import slices as sl

    params = params.replace(**overrides) if overrides else params
    run = rundir.Run.open(run_dir)
    frame = readers.read_units(run)
    listed = (run.manifest.get("data") or {}).get("metadata_columns") or []
    absent = [c for c in listed if c not in frame.columns]
    support = sl.default_min_support(len(frame)) if params.min_support is None else int(params.min_support)
    meta_cols = metadata_of(run, frame.columns)
    record = {**params.record(), "min_support": support, "metadata_columns": meta_cols,
              "embedder": None if not params.merge else ("all-MiniLM-L6-v2" if embed_fn is None else "custom")}

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
        staging.write_parquet(SLICES, result.slices)
        summary = result.summary()
        if absent:
            summary["messages"].insert(0, f"metadata columns {absent} are listed in the manifest but not in "
                                          f"{rundir.PREDICTIONS}; skipped.")
        summary["feature_seconds"] = round(feature_seconds, 3)
        summary["search_seconds"] = round(time.perf_counter() - start - feature_seconds, 3)
        staging.facts.update({k: summary[k] for k in ("n_examples", "n_failures", "base_error_rate", "n_features",
                                                      "n_tested", "n_slices", "messages")})
    summary["run"] = str(run.path)
    summary["files"] = [SLICES, SLICE_MEMBERS]
    summary["slices"] = result.slices.drop(columns=["features"]).to_dict("records")
    return summary
