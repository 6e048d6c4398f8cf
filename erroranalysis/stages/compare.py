"""Read runs for a comparison (predictions, clusters, labels) and compare a baseline with candidates.

    report = compare_runs("runs/base", ["runs/cand"])      # examples matched by example id
    write_report(report, "out/")                            # compare.json, compare.md, compare_examples.parquet
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from erroranalysis import __version__, rundir
from erroranalysis import compare as cmp
from erroranalysis.compare import (
    FORMAT,
    REPORT_FILES,
    SCHEMA_VERSION,
    CompareParams,
    Report,
    RunView,
    compare_pair,
    finite,
    labels_union,
    series,
)
from erroranalysis.core import files
from erroranalysis.core.errors import UserError
from erroranalysis.labels.workspace import shown_key
from erroranalysis.report import compare_markdown as compare_report
from erroranalysis.rundir import readers


def read_run(path: str | Path, store=None) -> RunView:
    """A run's predictions, clusters and labels for comparing."""
    run = rundir.Run.open(path)
    frame = readers.read_predictions(run, columns=["confidence", "prompt"])
    out = frame[["example_id", "label", "pred", "correct", "text"]].copy()
    if run.task == "generation" and "prompt" in frame.columns:  # the same prompt is the same example; the text
        out["text"] = frame["prompt"].fillna("").astype(str)   # holds the output too, which is what changed
    out["confidence"] = frame["confidence"].astype(np.float64) if "confidence" in frame.columns else np.nan
    key = store.run_key(run) if store is not None else run.name
    view = RunView(name=shown_key(key), path=run.path, manifest=run.manifest, frame=out, labels=run.labels, key=key)
    assign = readers.read_assignments(run, optional=True)
    if assign is not None:
        failing = set(out.loc[~out["correct"], "example_id"])
        a = assign[(assign["cluster_id"] >= 0) & assign["example_id"].isin(failing)]
        view.clusters = {int(c): set(g["example_id"]) for c, g in a.groupby("cluster_id")}
        names = readers.read_clusters(run, optional=True)
        if names is not None:
            view.cluster_names = {int(c): str(n) for c, n in zip(names["cluster_id"], names["name"])}
    if store is not None:
        a = store.assignments(key, include_rejected=False)
        view.types = a[["example_id", "error_type", "severity", "status"]].copy()
        view.types["example_id"] = view.types["example_id"].astype(str)
    return view


def compare_runs(base: str | Path, candidates: Sequence[str | Path], *, labels_db: str | Path | None = None,
                 store=None, params: CompareParams = CompareParams(), **values) -> Report:
    """Compare each candidate run with the baseline run (same eval set, matched by example id).

    Error types come from the labels store: `labels_db`, or `store`, or the database base's labels live in
    (erroranalysis.labels.labels_db_for) when it exists (without one the report has no error-type section).
    `params` (keyword values override it): see `compare.CompareParams`."""
    import pandas as pd

    from erroranalysis.stages.export import open_store

    params = params.replace(**values) if values else params
    n_resamples, seed, level, min_overlap = params.n_resamples, params.seed, params.level, params.min_overlap
    candidates = list(candidates)
    if not candidates:
        raise UserError("compare needs a candidate run besides the baseline: compare BASE CANDIDATE [CANDIDATE ...].")
    paths = [Path(base)] + [Path(c) for c in candidates]
    resolved = [p.resolve() for p in paths]
    for i, p in enumerate(resolved):
        if p in resolved[:i]:
            raise UserError(f"{paths[i]}: given twice (runs must be distinct); list each run once, baseline first.")
    if store is None:
        store = open_store(paths[0], labels_db)
    views = [read_run(p, store) for p in paths]
    names = [v.name for v in views]
    if len(set(names)) < len(names):  # same folder name in two places: tell them apart by path
        for v in views:
            v.name = str(v.path)
    labels = labels_union(*views)
    comparisons, frames = [], []
    for cand in views[1:]:
        result, examples = compare_pair(views[0], cand, n_resamples=n_resamples, seed=seed, level=level,
                                        min_overlap=min_overlap, labels=labels)
        comparisons.append(result)
        frames.append(examples)
    doc = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "tool": {"name": "erroranalysis", "version": __version__},
        "baseline": views[0].name,
        "runs": [_run_info(v, i == 0) for i, v in enumerate(views)],
        "labels_db": str(store.path) if store is not None else None,
        "bootstrap": {"n_resamples": n_resamples, "seed": seed, "level": level, "paired": True},
        "comparisons": comparisons,
    }
    doc["series"] = series(doc)
    return Report(doc=doc, examples=pd.concat(frames, ignore_index=True))


def _run_info(v: RunView, baseline: bool) -> dict:
    model = v.manifest.get("model") or {}
    data = v.manifest.get("data") or {}
    n = len(v.frame)
    n_fail = int((~v.frame["correct"]).sum())
    return {"name": v.name, "path": str(v.path), "baseline": baseline, "model": model.get("path"),
            "data": data.get("path"), "n": n, "n_failures": n_fail, "accuracy": finite(1 - n_fail / n) if n else None,
            "clustered": bool(v.clusters)}


def write_report(report: Report, out: str | Path) -> list[Path]:
    """compare.json, compare.md and compare_examples.parquet in folder `out` (each written atomically)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a folder; pass a folder to --out.")
    if (out / rundir.MANIFEST).is_file():
        raise UserError(f"{out}: is a run directory; write the comparison to another folder.")
    text_json = cmp.to_json(report.doc)
    text_md = compare_report.to_markdown(report.doc)
    paths = [out / name for name in REPORT_FILES]
    files.write_text(paths[0], text_json)
    files.write_text(paths[1], text_md)
    files.write_parquet(paths[2], report.examples)
    return paths
