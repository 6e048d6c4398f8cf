"""The memory of reading a `save_to_disk` folder under `--engine ray`: the Parquet copy one worker streams from the
folder's Arrow files (`sources.blocks.to_parquet`) against the whole read the driver made before (the in-process
reader and its validation, `sources.table.read_eval_set`, what `run --engine ray` did with a folder until this
change).

A folder of n rows (short texts, a label, an id, two metadata columns) saved by `datasets` in 8 Arrow files. Each way
runs in its own process and prints its peak resident memory (VmHWM, /proc/self/status) after the imports and after
the read, and its wall seconds. The copy's rows are checked equal to the whole read's (order, `_line`).

    .venv/bin/python benchmarks/datasets_folder_copy.py                  # 1,000,000 rows
    .venv/bin/python benchmarks/datasets_folder_copy.py --rows 200000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import in_driver, load_average, measured, table  # noqa: E402

WORDS = "the a market team phone price match goal profit chip game shares player network film vote".split()


def build(folder: Path, n: int, seed: int = 0) -> None:
    import datasets
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    words = np.asarray(WORDS, dtype=object)
    data = pa.table({"id": [f"r{i}" for i in range(n)],
                     "text": [" ".join(row) for row in words[rng.integers(0, len(words), size=(n, 12))]],
                     "label": rng.choice(["business", "sport", "tech"], n).tolist(),
                     "source": rng.choice(["web", "app", "email"], n).tolist(), "stars": rng.integers(1, 6, n)})
    datasets.Dataset(data).save_to_disk(str(folder), num_shards=8)


def driver(way: str, folder: str, target: str) -> None:
    """One way, in this process: prints {way, seconds, before, peak, rows} as JSON."""
    from erroranalysis.sources import blocks
    from erroranalysis.sources.table import DataOptions, read_eval_set

    figures, rows = measured(lambda: blocks.to_parquet(Path(folder), Path(target)) if way == "copy (workers)" else
                             len(read_eval_set(Path(folder), DataOptions(id_column="id"))))
    print(json.dumps({**figures, "way": way, "rows": rows}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--driver", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        return driver(*args.driver)
    with tempfile.TemporaryDirectory() as tmp:
        folder, target = Path(tmp) / "ds", Path(tmp) / "copy.parquet"
        build(folder, args.rows)
        size = sum(f.stat().st_size for f in folder.glob("data-*.arrow")) / 2**20
        found = []
        for way in ("whole read + validation (driver, before)", "copy (workers)"):
            found.append(in_driver(__file__, way, folder, target)[0])
        import pandas as pd
        import pyarrow.parquet as pq

        from erroranalysis.sources.table import read_table

        same = bool(pd.read_parquet(target).equals(read_table(folder)[0]))
        print(f"{args.rows:,} rows, {size:.0f} MiB of Arrow files in 8 files; copy row groups: "
              f"{pq.ParquetFile(target).metadata.num_row_groups}; copy equals the whole read: {same}; "
              f"{load_average()}")
        print(table([[f["way"], f"{f['seconds']:.1f}", f"{f['before']:.0f}", f"{f['peak']:.0f}",
                      f"{f['peak'] - f['before']:.0f}"] for f in found],
                    ["way", "seconds", "VmHWM after imports MB", "VmHWM after MB", "growth MB"]))


if __name__ == "__main__":
    main()
