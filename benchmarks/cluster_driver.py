"""The cluster stage's driver at 1M rows: peak memory (VmHWM) and seconds, in process vs `--engine ray`.

A predictions file of `--rows` short texts with planted failure groups (`--failure-share` of the rows fail, each
group as its own confusion pair) is analyzed once (`analyze`, metrics without the bootstrap, no checks, slices or
clustering); then the cluster stage runs with its defaults (`auto` embedder: the static model at this size, UMAP,
HDBSCAN, max_fit 20,000) on a copy of the run, once per engine, each in its own driver process, which prints its
peak resident memory after the stage (VmHWM, with the imports and the Ray client; Ray's own processes, the raylet
and the workers, are not the driver's) and the stage's seconds (Ray's start included). In process, the stage reads
every prediction and embeds every failure on the driver; under ray the driver holds the fit sample's rows
(a worker embeds and fits it).

    .venv/bin/python benchmarks/cluster_driver.py                       # 1,000,000 rows, 30% failing
    .venv/bin/python benchmarks/cluster_driver.py --rows 200000 --engines ray

`--vectors`: the stage clusters a vectors file (`--embedder FILE.npy`, 64-d, each planted group around a direction
of its own; the path `--embedder hidden` takes too: the rows are read where they are embedded). `--generation`: a
generation run (`analyze` of prompts, outputs and JSON references: the real checks give each failure its reason)
with four planted failure modes over five topics, clustered by failure mode.

    .venv/bin/python benchmarks/cluster_driver.py --rows 350000 --vectors
    .venv/bin/python benchmarks/cluster_driver.py --rows 125000 --failure-share 0.8 --generation
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import in_driver, load_average, measured, table  # noqa: E402

LABELS = ["billing", "account", "shipping"]
GROUPS = [  # (gold, pred, words) of the planted failure groups
    ("billing", "account", ["refund", "charged", "twice", "invoice", "card"]),
    ("account", "shipping", ["password", "login", "locked", "reset", "email"]),
    ("shipping", "billing", ["parcel", "courier", "late", "tracking", "damaged"]),
    ("billing", "shipping", ["discount", "coupon", "expired", "promo", "code"]),
    ("account", "billing", ["profile", "photo", "upload", "avatar", "crop"]),
    ("shipping", "account", ["address", "postcode", "wrong", "street", "flat"]),
]
EVERYDAY = ["price", "plan", "upgrade", "weekend", "store", "colour", "size", "gift", "menu", "thanks", "hello",
            "please", "today", "order", "help", "team", "again", "soon", "week", "great"]


def write_predictions(path: Path, n: int, failure_share: float, seed: int = 0, vectors: Path | None = None) -> Path:
    """The predictions file; with `vectors`, also a 64-d vectors file in row order (each group around its own
    direction, the correct rows around none)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("label", pa.string()), ("pred", pa.string())])
    everyday = np.asarray(EVERYDAY, dtype=object)
    centres = rng.normal(size=(len(GROUPS), 64)) * 3
    out = np.lib.format.open_memmap(vectors, mode="w+", dtype=np.float32, shape=(n, 64)) if vectors else None
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, n, 1 << 16):
            m = min(1 << 16, n - start)
            fail = rng.random(m) < failure_share
            group = rng.integers(0, len(GROUPS), m)
            filler = everyday[rng.integers(0, len(everyday), (m, 4))]
            label = np.asarray(LABELS, dtype=object)[rng.integers(0, 3, m)]
            texts, golds, preds = [], [], []
            for i in range(m):
                if fail[i]:
                    gold, pred, words = GROUPS[group[i]]
                    picks = rng.choice(words, 3, replace=False)
                    texts.append(" ".join([*picks, *filler[i, :2]]))
                    golds.append(gold)
                    preds.append(pred)
                else:
                    texts.append(" ".join(filler[i]))
                    golds.append(label[i])
                    preds.append(label[i])
            writer.write_table(pa.table({"id": [f"r{i}" for i in range(start, start + m)], "text": texts,
                                         "label": golds, "pred": preds}, schema=schema))
            if out is not None:
                out[start:start + m] = np.where(fail[:, None], centres[group], 0) + rng.normal(size=(m, 64))
    if out is not None:
        out.flush()
    return path


TOPICS = ["invoice", "bug report", "recipe", "flight", "job ad"]
FIELDS = ["name", "total", "city", "date", "code"]


def write_outputs(path: Path, n: int, failure_share: float, seed: int = 0) -> Path:
    """A generation run's outputs (JSONL: id, prompt, output, JSON reference, stop reason): four failure modes
    (text before the JSON, cut off, refusal, a wrong value) planted over five topics."""
    import json
    import random

    r = random.Random(seed)
    with path.open("w") as out:
        for i in range(n):
            topic = r.choice(TOPICS)
            fields = {f: f"{f}-{r.randint(0, 999)}" for f in r.sample(FIELDS, 3)}
            good = json.dumps(fields)
            prompt = f"Extract the fields of this {topic} as JSON: " + "; ".join(
                f"{k} is {v}" for k, v in fields.items())
            output, stop = good, "stop"
            if r.random() < failure_share:
                mode = r.randrange(4)
                output, stop = [(r.choice(["Sure! Here is the JSON:", "Here's the data:"]) + "\n" + good, "stop"),
                                (good[: r.randint(6, len(good) - 6)], "length"),
                                (r.choice(["I'm sorry, but I can't help with that request.",
                                           "I am unable to assist with this."]), "stop"),
                                (good.replace(next(iter(fields.values())), "unknown", 1), "stop")][mode]
            out.write(json.dumps({"id": f"g{i}", "prompt": prompt, "output": output, "reference": good,
                                  "stop_reason": stop}) + "\n")
    return path


def driver(run: str, engine: str, embedder: str = "auto") -> None:
    """One driver: the cluster stage on `run`; prints JSON (seconds, peak MB, the stage's facts)."""
    from erroranalysis.engines import Engine
    from erroranalysis.rundir import Run
    from erroranalysis.stages.cluster import ClusterParams, cluster_run

    figures, summary = measured(lambda: cluster_run(run, ClusterParams(embedder=embedder),
                                                    engine=None if engine == "local" else Engine("ray")))
    facts = Run.open(run).manifest["stages"]["cluster"]
    print(json.dumps({**figures, "n_failures": summary["n_failures"],
                      "n_clusters": summary["n_clusters"], "noise": summary["noise_share"],
                      "timings": facts.get("timings"), "engine": facts.get("engine")}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--failure-share", type=float, default=0.3)
    parser.add_argument("--engines", nargs="+", default=["local", "ray"], choices=["local", "ray"])
    parser.add_argument("--vectors", action="store_true", help="cluster a planted 64-d vectors file (by row)")
    parser.add_argument("--generation", action="store_true", help="a generation run, clustered by failure mode")
    parser.add_argument("--driver", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        driver(*args.driver)
        return
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages import AfterParams, MetricsParams
    from erroranalysis.stages.analyze import Reading, analyze

    rows = []
    with tempfile.TemporaryDirectory(prefix="ea_cluster_driver_") as tmp:
        tmp = Path(tmp)
        embedder = str(tmp / "vectors.npy") if args.vectors else "auto"
        if args.generation:
            data = write_outputs(tmp / "outputs.jsonl", args.rows, args.failure_share)
        else:
            data = write_predictions(tmp / "predictions.parquet", args.rows, args.failure_share,
                                     vectors=tmp / "vectors.npy" if args.vectors else None)
        t = time.perf_counter()
        base = analyze("generation" if args.generation else "classification", data, tmp / "run",
                       Reading(data=DataOptions(id_column="id")),
                       after=AfterParams(metrics=MetricsParams(n_resamples=0), checks=None, slices=None,
                                         cluster=None)).path
        print(f"analyzed {args.rows:,} rows in {time.perf_counter() - t:.0f} s ({load_average()})", file=sys.stderr)
        for engine in args.engines:
            run = tmp / f"run_{engine}"
            shutil.copytree(base, run)
            print(f"cluster, {engine} ({load_average()})", file=sys.stderr, flush=True)
            r, _ = in_driver(__file__, run, engine, embedder)
            print(f"  {json.dumps(r)}", file=sys.stderr, flush=True)
            rows.append([f"{args.rows:,}", f"{r['n_failures']:,}", "generation" if args.generation else
                         "vectors file" if args.vectors else "auto", engine, f"{r['seconds']:.0f}",
                         f"{r['peak']:.0f}", f"{r['before']:.0f}", str(r["n_clusters"]), f"{r['noise']:.3f}",
                         " ".join(f"{k} {v:.0f}" for k, v in (r["timings"] or {}).items())])
            shutil.rmtree(run)
    print(table(rows, ["rows", "failures", "embedder / run", "engine", "stage s", "driver peak MB",
                       "MB before the stage", "clusters",
                       "noise", "stage timings (s)"]))
    print(f"\n{load_average()}")


if __name__ == "__main__":
    main()
