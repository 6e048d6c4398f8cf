"""The slices stage's driver: in process (every row in the driver) beside `--engine ray` (per-block counts).

One run of N synthetic predictions (default 1,000,000; 6 to 20 words from a 5,000-word Zipf vocabulary, five
labels, a five-valued `source` and a numeric `score` metadata column, truncation; ~10% random failures plus two
planted error slices: texts with the rare word "storm" and source == "c"), written as predictions.parquet in row
groups of 65,536 rows (as the Ray inference shards are). The slices stage (default parameters, word merging
included) then runs once in process and once on a local Ray (`num_cpus` = this machine's CPUs), each in its own
driver process on its own copy of the run. Printed per engine: the stage's wall seconds, the driver's peak resident
memory (VmHWM, after the stage; Ray's own processes are not the driver's and are not counted), and whether the two
engines' slices.parquet and slice_members.parquet are equal and hold the planted slices.

    .venv/bin/python benchmarks/slices_blocks.py                 # 1,000,000 rows
    .venv/bin/python benchmarks/slices_blocks.py --rows 200000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import hwm_mb, load_average, table  # noqa: E402

LABELS = ["business", "entertainment", "politics", "sport", "tech"]
GROUP = 65_536


def make_run(path: Path, n: int, seed: int = 0) -> None:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from erroranalysis import rundir
    from erroranalysis.rundir import create_run

    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(5000)], dtype=object)
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.07
    p /= p.sum()
    with create_run(path, task="classification", labels=LABELS,
                    data={"path": "synthetic", "rows": n, "metadata_columns": ["source", "score"]}) as run:
        with run.stage("infer") as staging:
            with pq.ParquetWriter(staging.file(rundir.PREDICTIONS), schema=_schema()) as writer:
                for start in range(0, n, GROUP):
                    m = min(GROUP, n - start)
                    lengths = rng.integers(6, 21, m)
                    tokens = vocab[rng.choice(len(vocab), size=int(lengths.sum()), p=p)]
                    storm = rng.random(m) < 0.01
                    texts, at = [], 0
                    for i, k in enumerate(lengths):
                        words = list(tokens[at:at + k])
                        at += k
                        if storm[i]:
                            words.insert(2, "storm")
                        texts.append(" ".join(words))
                    source = rng.choice(["a", "b", "c", "d", "e"], m)
                    fail = (rng.random(m) < 0.1) | (storm & (rng.random(m) < 0.6)) | \
                        ((source == "c") & (rng.random(m) < 0.2))
                    names = np.asarray(LABELS, dtype=object)
                    label_id = rng.integers(0, len(LABELS), m)
                    label, pred = names[label_id], names[np.where(fail, (label_id + 1) % len(LABELS), label_id)]
                    frame = pd.DataFrame({
                        "example_id": [f"r{i}" for i in range(start, start + m)], "text": texts, "label": label,
                        "pred": pred, "correct": pred == label, "confidence": np.float32(0.9),
                        "loss": np.float32(0.1), "n_tokens": lengths.astype(np.int32),
                        "truncated": rng.random(m) < 0.02, "source": source,
                        "score": rng.normal(size=m).round(3)})
                    writer.write_table(pa.Table.from_pandas(frame, schema=_schema(), preserve_index=False))


def _schema():
    import pyarrow as pa

    return pa.schema([("example_id", pa.string()), ("text", pa.string()), ("label", pa.string()),
                      ("pred", pa.string()), ("correct", pa.bool_()), ("confidence", pa.float32()),
                      ("loss", pa.float32()), ("n_tokens", pa.int32()), ("truncated", pa.bool_()),
                      ("source", pa.string()), ("score", pa.float64())])


def child(run: str, engine: str) -> None:
    """One driver: the slices stage on `run`; prints JSON (seconds, the driver's peak before and after)."""
    from erroranalysis.engines import Engine
    from erroranalysis.stages.slices import slices_run

    eng = None
    if engine == "ray":
        import ray

        ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        eng = Engine(engine="ray")
    before = hwm_mb()
    start = time.perf_counter()
    summary = slices_run(run, engine=eng)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "hwm_before_mb": before, "hwm_mb": hwm_mb(),
                      "n_slices": summary["n_slices"], "features": summary["n_features"]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--child", nargs=2, metavar=("RUN", "ENGINE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    import pandas as pd

    from erroranalysis.rundir import Run
    from erroranalysis.rundir.readers import read_slices

    print(f"{load_average()}; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        start = time.perf_counter()
        make_run(base, args.rows)
        print(f"{args.rows:,} rows made in {time.perf_counter() - start:.0f} s")
        rows, outputs = [], {}
        for engine in ("local", "ray"):
            run = Path(tmp) / engine
            shutil.copytree(base, run)
            done = subprocess.run([sys.executable, __file__, "--child", str(run), engine], capture_output=True,
                                  text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path[:2])})
            if done.returncode:
                sys.exit(f"{engine}: {done.stderr[-3000:]}")
            out = json.loads(done.stdout.strip().splitlines()[-1])
            slices, members = read_slices(Run.open(run))
            outputs[engine] = (slices, members.reset_index(drop=True))
            rows.append([engine, f"{out['seconds']:.1f}", f"{out['hwm_mb']:.0f}", f"{out['hwm_before_mb']:.0f}",
                         out["n_slices"], out["features"]])
        print(table([[str(c) for c in r] for r in rows],
                    ["engine", "slices stage s", "driver VmHWM MB", "before the stage MB", "slices", "features"]))
        (a, ma), (b, mb) = outputs["local"], outputs["ray"]
        same = a.equals(b) and ma["example_id"].astype(str).equals(mb["example_id"].astype(str)) and \
            ma["slice_id"].equals(mb["slice_id"])
        print(f"slices.parquet and slice_members.parquet equal: {same}")
        print("planted found:", {"storm": any("storm" in d for d in a["description"]),
                                 "source c": any('source == "c"' in d for d in a["description"])})
        print(pd.DataFrame(a)[["description", "support", "failures"]].head(8).to_string())


if __name__ == "__main__":
    main()
