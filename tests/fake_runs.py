"""Runs as the real stages leave them, from tables a test builds: only inference (the slow part) is faked.

`inferred_run` commits a predictions table (and probabilities, hidden states) through the real infer-stage
protocol, so every later stage and reader sees exactly what it would after `erroranalysis run`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from erroranalysis import rundir
from erroranalysis.rundir import Run, create_run

CORE_DEFAULTS = {"confidence": np.float32(0.8), "loss": np.float32(0.3), "n_tokens": np.int32(5), "truncated": False}


def inferred_run(path: Path, frame, *, labels, probs=None, hidden=None, task: str = "classification",
                 stage: str = "infer", **manifest) -> Run:
    """A run whose source stage committed `frame` as predictions.parquet (missing core columns get defaults)."""
    frame = frame.copy()
    if "correct" not in frame.columns:
        frame["correct"] = frame["label"].astype(str) == frame["pred"].astype(str)
    for column, value in CORE_DEFAULTS.items():
        if column not in frame.columns:
            frame[column] = value
    manifest.setdefault("data", {"path": "eval.jsonl", "rows": len(frame), "metadata_columns": [
        c for c in frame.columns if c not in rundir.CORE_COLUMNS]})
    with create_run(path, overwrite=True, task=task, labels=list(labels), **manifest) as run:
        with run.stage(stage) as staging:
            staging.write_parquet(rundir.PREDICTIONS, frame)
            if probs is not None:
                staging.write_npy(rundir.PROBS, np.asarray(probs, dtype=np.float32))
            if hidden is not None:
                staging.write_npy(rundir.HIDDEN, np.asarray(hidden, dtype=np.float32))
    return Run.open(path)


def commit(run: Run, stage: str, **artifacts) -> Run:
    """Commit artifacts (name -> DataFrame, array or JSON-able object) as stage `stage` did; names use `_` for `.`
    (clusters_parquet=...)."""
    with run.stage(stage) as staging:
        for key, value in artifacts.items():
            name = key.replace("_parquet", ".parquet").replace("_npy", ".npy").replace("_json", ".json").replace(
                "_md", ".md")
            if name.endswith(".parquet"):
                staging.write_parquet(name, value)
            elif name.endswith(".npy"):
                staging.write_npy(name, value)
            elif name.endswith(".md"):
                staging.write_text(name, value)
            else:
                staging.write_json(name, value)
    return run
