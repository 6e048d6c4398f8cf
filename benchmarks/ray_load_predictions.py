"""The driver's peak memory while `analyze --task classification` reads a predictions file: in-process against
`--engine ray`, where the workers read the blocks and write the shards and the driver keeps per-block counts.

A Parquet file of n predictions (short texts, label, pred, id and three prob_<label> columns, row groups of 65,536
rows; `--format jsonl|csv` writes the same rows as JSONL or CSV, which a worker copies to Parquet first). Each engine
runs in its own driver process, which runs the load_predictions stage alone (the stages after it are skipped) and
prints its peak resident memory (VmHWM, /proc/self/status) before the stage (imports, and Ray's start for ray) and
after it, and the stage's wall seconds. Ray's own processes (raylet, GCS, workers) are not the driver's and are not
counted.

    .venv/bin/python benchmarks/ray_load_predictions.py                     # 1,000,000 rows of Parquet
    .venv/bin/python benchmarks/ray_load_predictions.py --rows 100000 --format jsonl
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import in_driver, load_average, measured, table  # noqa: E402
from ray_driver import LABELS, WORDS  # noqa: E402


def write_predictions(path: Path, n: int, seed: int = 0) -> Path:
    """n predictions in row groups of 65,536 rows (Parquet), or as JSONL or CSV by the path's suffix."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    words, labels = np.asarray(WORDS, dtype=object), np.asarray(LABELS, dtype=object)
    writer = None
    for start in range(0, n, 1 << 16):
        m = min(1 << 16, n - start)
        probs = rng.dirichlet(np.ones(3), size=m)
        block = pa.table({"id": [f"r{i}" for i in range(start, start + m)],
                          "text": [" ".join(row) for row in words[rng.integers(0, len(words), size=(m, 6))]],
                          "label": list(labels[rng.integers(0, 3, m)]), "pred": list(labels[probs.argmax(1)]),
                          **{f"prob_{label}": probs[:, j] for j, label in enumerate(LABELS)}})
        if path.suffix == ".parquet":
            writer = writer or pq.ParquetWriter(path, block.schema)
            writer.write_table(block)
        else:
            frame = block.to_pandas()
            with open(path, "a", encoding="utf-8") as f:
                if path.suffix == ".csv":
                    frame.to_csv(f, index=False, header=start == 0)
                else:
                    frame.to_json(f, orient="records", lines=True)
    if writer:
        writer.close()
    return path


def driver(data: str, out: str, engine: str) -> None:
    """One driver: the load_predictions stage alone; prints JSON (seconds, peaks)."""
    import erroranalysis.stages.load_predictions as load
    from erroranalysis import stages
    from erroranalysis.engines import Engine
    from erroranalysis.sources.table import DataOptions

    engine_ = Engine(engine)
    if engine_.distributed:
        from erroranalysis.engines import ray_data

        ray_data.connect(engine_)
    load.after_predictions = lambda *args, **kwargs: None  # the stage alone: metrics and the rest are others' work
    after = stages.AfterParams.with_seed(0, checks=False, slices=False, cluster=False)
    figures, run = measured(lambda: stages.analyze("classification", data, out,
                                                   stages.Reading(data=DataOptions(id_column="id")), after=after,
                                                   engine=engine_))
    print(json.dumps({**figures, "rows": run.manifest["data"]["rows"],
                      "read_by": run.manifest["stages"]["load_predictions"].get("read_by", "driver")}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--format", choices=("parquet", "jsonl", "csv"), default="parquet")
    parser.add_argument("--driver", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        driver(*args.driver)
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="ea_ray_load_") as tmp:
        tmp = Path(tmp)
        data = write_predictions(tmp / f"predictions.{args.format}", args.rows)
        size = data.stat().st_size / 2**20
        for engine in ("local", "ray"):
            print(f"{args.rows:,} rows of {args.format} ({size:.0f} MB), {engine} ({load_average()})",
                  file=sys.stderr, flush=True)
            r, _ = in_driver(__file__, data, tmp / f"run_{engine}", engine)
            rows.append([f"{r['rows']:,}", args.format, engine, f"{r['seconds']:.1f}", f"{r['before']:.0f}",
                         f"{r['peak']:.0f}", r["read_by"]])
            print("  " + "  ".join(rows[-1]), file=sys.stderr, flush=True)
    print(table(rows, ["rows", "format", "engine", "load_predictions s", "driver MB before the stage",
                       "driver peak MB", "rows read by"]))
    print(f"\n{load_average()}; uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
