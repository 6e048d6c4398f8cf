"""The driver's peak on a fresh machine: the first `--engine ray` checks stage distills the static embedder.

`erroranalysis analyze --predictions FILE --out RUN --id-column id --engine ray --no-slices --no-cluster` (the
checks embed texts with the static embedder, distilled from the packaged MiniLM on first use and cached) on
`ray_analyze.write_predictions`'s rows, twice: with an empty cache (`ERRORANALYSIS_CACHE_DIR` a new folder: the
model is distilled, on a worker under Ray) and with the machine's cache (built). Printed: wall seconds and the
driver's own peak (VmHWM), each run its own process.

    .venv/bin/python benchmarks/static_distill_driver.py            # 100,000 rows
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_average, ray_env, run_watched, table  # noqa: E402
from ray_analyze import write_predictions  # noqa: E402
from scale import EA  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ea-bench-distill-") as tmp:
        data = write_predictions(Path(tmp) / "predictions.parquet", args.rows)
        for name, cache in (("empty cache (distilled)", Path(tmp) / "fresh-cache"), ("model cached", None)):
            env = {**ray_env(), **({"ERRORANALYSIS_CACHE_DIR": str(cache)} if cache else {})}
            seconds, peak = run_watched([EA, "analyze", "--predictions", str(data), "--out", str(Path(tmp) / "run"),
                                         "--id-column", "id", "--engine", "ray", "--no-slices", "--no-cluster",
                                         "--overwrite"], Path(tmp) / "log", env)
            rows.append([f"{args.rows:,}", name, f"{seconds:.0f}", f"{peak:,.0f}"])
    print(table(rows, ["rows", "static embedder", "seconds", "driver peak MB"]))
    print(load_average())


if __name__ == "__main__":
    main()
