"""The metrics stage on a 1,000,000-row run: driver peak memory (VmHWM) and seconds, all rows at once (the stage as
it was: `read_predictions` + `read_probs` + `compute_metrics`) beside the block path in process and under Ray.

The run is written directly (no inference): 3 labels, float32 probabilities, short texts, and metadata for every
bucket rule (a 5-valued source, a price with ~20k distinct values and missing cells, an integer with missing cells,
tags as lists). Each way runs in its own driver process, which prints its VmHWM before the stage (imports done, run
open) and after it; Ray's own processes (raylet, workers) are not the driver's and are not counted. No bootstrap
(its cost does not depend on the rows).

`--task regression` or `--task multilabel` writes such a run of that task instead (the same metadata; a regression
run's target, prediction and five gold bins; a multi-label run's 4 labels, gold and predicted lists, float32
sigmoids).

    .venv/bin/python benchmarks/metrics_blocks.py                 # 1,000,000 rows
    .venv/bin/python benchmarks/metrics_blocks.py --task regression
    .venv/bin/python benchmarks/metrics_blocks.py --rows 200000
    .venv/bin/python benchmarks/metrics_blocks.py --row-group 65536  # a block reads its own row group only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import in_driver, load_average, measured, own_ray, table  # noqa: E402

LABELS = ["negative", "neutral", "positive"]
WORDS = ["awful", "broken", "refund", "delivered", "package", "order", "great", "love", "perfect", "item", "the"]
WAYS = ("all rows at once", "blocks, in process", "blocks, ray (2 CPUs)")


def write_run(out: Path, n: int, row_group: int | None = None, seed: int = 0) -> None:
    """A classification run of n predictions written as the stages write one (pandas' to_parquet: one row group
    per 1,048,576 rows), or in row groups of `row_group` rows."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    label = rng.integers(0, 3, n)
    pred = np.where(rng.random(n) < 0.7, label, rng.integers(0, 3, n))
    logits = rng.normal(size=(n, 3)).astype(np.float32)
    logits[np.arange(n), pred] += 2
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    words = np.asarray(WORDS, dtype=object)
    texts = [" ".join(row) for row in words[rng.integers(0, len(words), size=(n, 6))]]
    price = np.round(rng.gamma(2, 50, n), 2)
    price[rng.random(n) < 0.05] = np.nan
    stars = pd.array(rng.integers(1, 6, n), dtype="Int64")
    stars[rng.random(n) < 0.05] = pd.NA
    tag_sets = [["x"], ["y"], ["x", "y"], [], ["z", "x"]]
    frame = pd.DataFrame({"example_id": [f"r{i}" for i in range(n)], "text": texts,
                          "label": np.asarray(LABELS)[label], "pred": np.asarray(LABELS)[pred],
                          "correct": label == pred, "confidence": probs.max(1),
                          "source": np.asarray(["web", "app", "mail", "phone", "shop"])[rng.integers(0, 5, n)],
                          "price": price, "stars": stars,
                          "tags": [tag_sets[i] for i in rng.integers(0, len(tag_sets), n)]})
    manifest = {"task": "classification", "labels": LABELS, "seed": 0,
                "data": {"rows": n, "metadata_columns": ["source", "price", "stars", "tags"]}}
    commit_predictions(out, manifest, frame, probs.astype(np.float32), row_group)


ML_LABELS = ["billing", "bug", "feature", "praise"]


def write_task_run(out: Path, n: int, task: str, row_group: int | None = None, seed: int = 0) -> None:
    """A regression or multi-label run of n predictions, with the classification run's metadata."""
    import numpy as np

    from erroranalysis.infer.predictions import bin_names, quantile_edges
    from erroranalysis.rundir import Run, readers

    write_run(out, n, row_group, seed)  # the texts and metadata
    frame = readers.read_predictions(Run(out))
    rng = np.random.default_rng(seed + 1)
    frame = frame.drop(columns=["label", "pred", "correct", "confidence"])
    if task == "regression":
        target = rng.normal(3, 2, n)
        prediction = target + rng.normal(0, 0.5, n) + (rng.random(n) < 0.1) * 2
        edges = quantile_edges(target, 5)
        bound = float(np.quantile(np.abs(prediction - target), 0.9))
        frame = frame.assign(label=bin_names(target, edges), pred=bin_names(prediction, edges),
                             correct=np.abs(prediction - target) <= bound, target=target, prediction=prediction)
        manifest = {"task": "regression", "labels": ["value"],
                    "task_params": {"tolerance": bound, "relative_tolerance": False, "edges": list(edges)}}
        probs = None
    else:
        k = len(ML_LABELS)
        gold = rng.random((n, k)) < 0.3
        probs = np.clip(gold * 0.5 + rng.random((n, k)) * 0.6, 0, 1).astype(np.float32)
        pred = probs >= 0.5
        names = np.asarray(ML_LABELS, dtype=object)
        frame = frame.assign(gold_labels=[list(names[r]) for r in gold], pred_labels=[list(names[r]) for r in pred],
                             label=["|".join(names[r]) for r in gold], pred=["|".join(names[r]) for r in pred],
                             correct=(gold == pred).all(1))
        manifest = {"task": "multilabel", "labels": ML_LABELS, "task_params": {"thresholds": [0.5] * k}}
    manifest.update(seed=0, data={"rows": n, "metadata_columns": ["source", "price", "stars", "tags"]})
    commit_predictions(out, manifest, frame, probs, row_group)


def commit_predictions(out, manifest: dict, frame, probs, row_group: int | None) -> None:
    """A run holding `frame` as predictions.parquet (in row groups of `row_group` rows, else pandas' default) and
    `probs` (None: none), as the load stage commits them."""
    from erroranalysis import rundir
    from erroranalysis.rundir import create_run

    with create_run(out, overwrite=True, **manifest) as run:
        with run.stage("load_predictions", {}) as staging:
            if row_group is None:
                staging.write_parquet(rundir.PREDICTIONS, frame)
            else:
                import pyarrow as pa
                import pyarrow.parquet as pq

                pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), staging.file(rundir.PREDICTIONS),
                               row_group_size=row_group)
            if probs is not None:
                staging.write_npy(rundir.PROBS, probs)


def whole_table(run, preds, probs, metadata: list[str]) -> dict:
    """A regression or multi-label run's metrics.json as the stage computed it before it counted blocks."""
    import numpy as np

    from erroranalysis.infer.predictions import bin_labels
    from erroranalysis.stages.metrics import _tolerance, gold_matrix

    params = run.manifest.get("task_params") or {}
    texts = preds["text"].to_numpy()
    if run.task == "regression":
        from erroranalysis.metrics.regression import compute_regression_metrics

        return compute_regression_metrics(preds["target"].to_numpy(), preds["prediction"].to_numpy(),
                                          preds["correct"].to_numpy(), preds["label"].to_numpy(),
                                          preds["pred"].to_numpy(), bin_labels(params["edges"]),
                                          metadata=preds[metadata], texts=texts, tolerance=_tolerance(run, params),
                                          n_resamples=0)
    from erroranalysis.metrics.multilabel import compute_multilabel_metrics

    return compute_multilabel_metrics(gold_matrix(preds, "gold_labels", run.labels),
                                      gold_matrix(preds, "pred_labels", run.labels), run.labels,
                                      probs=np.asarray(probs), metadata=preds[metadata], texts=texts,
                                      thresholds=params.get("thresholds"), n_resamples=0)


def driver(out: str, way: str) -> None:
    """One driver process: the metrics stage one way; prints JSON (seconds, VmHWM before and after)."""
    import numpy as np

    from erroranalysis.engines import Engine
    from erroranalysis.metrics import compute_metrics
    from erroranalysis.rundir import Run, readers
    from erroranalysis.stages import MetricsParams, compute_run_metrics
    from erroranalysis.stages.common import metadata_of

    run = Run(out)
    engine = Engine("ray") if way == WAYS[2] else None
    own_ray(engine)

    def whole() -> dict:  # the stage before the block path, less the commit
        preds, probs = readers.read_predictions(run), readers.read_probs(run)
        metadata = metadata_of(run, preds.columns)
        if run.task != "classification":
            return whole_table(run, preds, probs, metadata)
        return compute_metrics(preds["label"].to_numpy(), preds["pred"].to_numpy(), run.labels,
                               probs=np.asarray(probs), metadata=preds[metadata], texts=preds["text"].to_numpy(),
                               n_resamples=0)

    figures, result = measured(whole if way == WAYS[0] else
                               lambda: compute_run_metrics(run, MetricsParams(n_resamples=0), engine=engine))
    digest = hashlib.sha256(json.dumps(result, sort_keys=True).encode()).hexdigest()[:12]
    print(json.dumps({**figures, "digest": digest, "by_metadata": sorted(result["by_metadata"])}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--row-group", type=int, default=None,
                        help="write predictions.parquet in row groups of this many rows (default: as the stages do)")
    parser.add_argument("--task", choices=["classification", "regression", "multilabel"], default="classification")
    parser.add_argument("--driver", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        driver(*args.driver)
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="ea_metrics_blocks_") as tmp:
        out = Path(tmp) / "run"
        start = time.perf_counter()
        if args.task == "classification":
            write_run(out, args.rows, args.row_group)
        else:
            write_task_run(out, args.rows, args.task, args.row_group)
        print(f"wrote {args.rows:,} rows in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
        for way in WAYS:
            print(f"{way} ({load_average()})", file=sys.stderr, flush=True)
            r, _ = in_driver(__file__, out, way)
            rows.append([way, f"{r['seconds']:.1f}", f"{r['before']:.0f}", f"{r['peak']:.0f}",
                         r["digest"], len(r["by_metadata"])])
    groups = f"row groups of {args.row_group:,}" if args.row_group else "row groups as the stages write them"
    print(f"metrics stage, {args.task} run, {args.rows:,} rows, {groups} ({load_average()})")
    print(table(rows, ["way", "seconds", "VmHWM before MB", "VmHWM after MB", "metrics sha256", "by_metadata keys"]))


if __name__ == "__main__":
    main()
