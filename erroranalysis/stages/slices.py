"""The slices stage: find error slices in a run's predictions and write them into the run directory.

Reads predictions.parquet (text, label, correct, truncated and the metadata columns), runs
`erroranalysis.slices.extract_features` and `find_slices`, and writes slices.parquet and slice_members.parquet
(see docs/run-directory.md). Inputs and parameters are checked before anything is written, and both files are
written only once everything is computed, so a bad call leaves the previous slices intact.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from erroranalysis import rundir
from erroranalysis.errors import DataError, where
from erroranalysis.rundir import SLICE_MEMBERS, SLICES
from erroranalysis.validation import check_param

STAGE = "slices"


def metadata_columns(run: rundir.Run, columns) -> list[str]:
    """The run's metadata columns: the manifest's `data.metadata_columns`, else every non-core column."""
    listed = (run.manifest.get("data") or {}).get("metadata_columns")
    if listed is None:
        return [c for c in columns if c not in rundir.CORE_COLUMNS]
    return [c for c in listed if c in columns]


def slices_run(
    run_dir: str | Path,
    *,
    min_support: int | None = None,
    max_order: int = 3,
    alpha: float = 0.95,
    top_k: int = 20,
    merge: bool = True,
    correction: str = "holm",
    level: float = 0.05,
    ngram_max: int = 2,
    n_buckets: int = 5,
    max_candidates: int = 100,
    embed_fn=None,
) -> dict[str, Any]:
    """Find a run's error slices and write slices.parquet and slice_members.parquet; return a summary.

    Parameters are those of `extract_features` and `find_slices`; `embed_fn` replaces the packaged word-embedding
    model used to merge near-synonymous word slices (`merge=False` skips merging). The summary holds the counts,
    the base error rate, the messages about skipped columns or an empty result, and the slices found.
    """
    import pandas as pd

    from erroranalysis import slices as sl

    sl.check_search_params(min_support=min_support, max_order=max_order, alpha=alpha, top_k=top_k,
                           max_candidates=max_candidates, correction=correction, level=level)
    check_param("ngram_max", ngram_max, ngram_max in (1, 2, 3), "1, 2 or 3")
    check_param("n_buckets", n_buckets, isinstance(n_buckets, int) and 2 <= n_buckets <= 20,
                "an integer between 2 and 20")

    run = rundir.Run.open(run_dir)
    frame = run.predictions()
    file = run.file(rundir.PREDICTIONS)
    for column in ("example_id", "correct"):
        if column not in frame.columns:
            raise DataError(f"{file}: no {column!r} column; re-create the run with 'erroranalysis run' or 'analyze'.")
    correct = frame["correct"]
    if correct.isna().any():
        raise DataError(f"{where(file, column='correct')}: {int(correct.isna().sum())} missing values; re-run the "
                        "stage that writes predictions.")
    if not (pd.api.types.is_bool_dtype(correct) or set(pd.unique(correct)) <= {0, 1}):
        raise DataError(f"{where(file, column='correct')}: values {list(pd.unique(correct))[:3]} are not booleans; "
                        "re-run the stage that writes predictions.")
    ids = frame["example_id"]
    if ids.isna().any():
        raise DataError(f"{where(file, column='example_id')}: {int(ids.isna().sum())} missing ids; every example "
                        "needs an id.")
    if ids.duplicated().any():
        dupes = ids[ids.duplicated()].unique()[:3].tolist()
        raise DataError(f"{where(file, column='example_id')}: duplicate ids {dupes}; every example needs its own id.")

    listed = (run.manifest.get("data") or {}).get("metadata_columns") or []
    absent = [c for c in listed if c not in frame.columns]
    n = len(frame)
    resolved_support = sl.default_min_support(n) if min_support is None else int(min_support)
    meta_cols = metadata_columns(run, frame.columns)
    params = {"min_support": resolved_support, "max_order": max_order, "alpha": alpha, "top_k": top_k,
              "merge": merge, "correction": correction, "level": level, "ngram_max": ngram_max,
              "n_buckets": n_buckets, "max_candidates": max_candidates,
              "embedder": None if not merge else ("all-MiniLM-L6-v2" if embed_fn is None else "custom"),
              "metadata_columns": meta_cols}

    with run.stage(STAGE, params) as extra:
        start = time.perf_counter()
        features = sl.extract_features(
            frame["text"].tolist() if "text" in frame.columns else None,
            frame[meta_cols] if meta_cols else None,
            labels=frame["label"].tolist() if run.task == "classification" and "label" in frame.columns else None,
            truncated=frame["truncated"].tolist() if "truncated" in frame.columns else None,
            min_support=resolved_support, ngram_max=ngram_max, n_buckets=n_buckets,
        )
        feature_seconds = time.perf_counter() - start
        result = sl.find_slices(
            features, correct.astype(bool).to_numpy(), example_ids=ids.astype(str).to_numpy(dtype=object),
            min_support=resolved_support, max_order=max_order, alpha=alpha, top_k=top_k,
            max_candidates=max_candidates, correction=correction, level=level, merge=merge, embed_fn=embed_fn,
        )
        members = result.members.astype({"example_id": "object", "slice_id": "int64"})
        slices = result.slices
        rundir.write_parquet(run.file(SLICE_MEMBERS), members)
        rundir.write_parquet(run.file(SLICES), slices)
        summary = result.summary()
        if absent:
            summary["messages"].insert(0, f"metadata columns {absent} are listed in the manifest but not in "
                                          f"{rundir.PREDICTIONS}; skipped.")
        summary["feature_seconds"] = round(feature_seconds, 3)
        summary["search_seconds"] = round(time.perf_counter() - start - feature_seconds, 3)
        extra.update({k: summary[k] for k in ("n_examples", "n_failures", "base_error_rate", "n_features",
                                              "n_tested", "n_slices", "messages")})
    summary["run"] = str(run.path)
    summary["files"] = [SLICES, SLICE_MEMBERS]
    summary["slices"] = slices.drop(columns=["features"]).to_dict("records")
    return summary


def read_slices(run: rundir.Run):
    """(slices, members) DataFrames of a run whose slices stage is done."""
    run.require(STAGE, f"run 'erroranalysis slices {run.path}'")
    return run.read_parquet(SLICES, STAGE), run.read_parquet(SLICE_MEMBERS, STAGE)
