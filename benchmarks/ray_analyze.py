"""The driver holds no rows: `erroranalysis analyze` with every default stage, in-process and `--engine ray`.

What a user with a large predictions file runs: `erroranalysis analyze --predictions FILE --out RUN --id-column id`
(every default stage: metrics, checks, slices, cluster) on Parquet predictions of short BBC News sentences (five
topics, ~80% right, prob_<label> columns, a metadata column, 1% exact and 1% edited duplicates planted:
`scale.predictions`; and an error slice, errors from source "email" at 46% against 20%), once in-process and once
with `--engine ray` (a local Ray the driver starts, one task per CPU).
Each run is its own process; printed per size and engine: wall seconds, the driver's own peak resident memory
(VmHWM, read from /proc every 0.1 s; Ray's raylet, GCS and workers are other processes and not counted), each
stage's seconds from the manifest, and, where both engines ran, what differs between their outputs (metrics exactly;
label issues and duplicate kinds by counts: above 100,000 rows Ray searches near duplicates among a seeded sample
of 100,000, and above 200,000 the in-process label-issue rule is cleanlab's batched estimate, Ray's the exact rule).

    .venv/bin/python benchmarks/ray_analyze.py                                  # 100k: both engines
    .venv/bin/python benchmarks/ray_analyze.py --sizes 100000 1000000 5000000 --local-up-to 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_average, ray_env, run_watched, table  # noqa: E402
from scale import EA, predictions  # noqa: E402

STAGES = ("load_predictions", "metrics", "checks", "slices", "cluster")
CHUNK = 250_000


def write_predictions(path: Path, n: int) -> Path:
    """n rows of `scale.predictions`, made and written CHUNK rows at a time (ids unique across chunks)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    try:
        for i, start in enumerate(range(0, n, CHUNK)):
            frame = plant_slice(predictions(min(CHUNK, n - start), seed=i), seed=i)
            frame["id"] = [f"r{start + j}" for j in range(len(frame))]
            chunk = pa.Table.from_pandas(frame, preserve_index=False)
            writer = writer or pq.ParquetWriter(path, chunk.schema)
            writer.write_table(chunk, row_group_size=65_536)
    finally:
        if writer is not None:
            writer.close()
    return path


def plant_slice(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    """An error slice for the slices stage to find: a third of the rows from source "email" that were right become
    wrong (the next topic), their prob_<label> columns swapped to stay consistent with the prediction."""
    rng = np.random.default_rng(seed + 1000)
    names = sorted(c[len("prob_"):] for c in frame.columns if c.startswith("prob_"))
    right = (frame["label"] == frame["pred"]).to_numpy()
    flip = (frame["source"] == "email").to_numpy() & right & (rng.random(len(frame)) < 0.33)
    rows = flip.nonzero()[0]
    old = np.array([names.index(p) for p in frame["pred"].to_numpy()[rows]])
    new = (old + 1) % len(names)
    probs = frame[[f"prob_{name}" for name in names]].to_numpy()
    probs[rows, old], probs[rows, new] = probs[rows, new], probs[rows, old].copy()
    for j, name in enumerate(names):
        frame[f"prob_{name}"] = probs[:, j]
    frame.loc[flip, "pred"] = np.array(names, dtype=object)[new]
    return frame


def analyze(data: Path, out: Path, engine: str) -> dict:
    command = [EA, "analyze", "--predictions", str(data), "--out", str(out), "--id-column", "id", "--overwrite",
               *(["--engine", "ray"] if engine == "ray" else [])]
    seconds, peak = run_watched(command, out.with_suffix(".log"), ray_env())
    manifest = json.loads((out / "manifest.json").read_text())
    stages = {name: manifest["stages"].get(name, {}).get("seconds") for name in STAGES}
    return {"seconds": seconds, "peak": peak, "stages": stages, "manifest": manifest}


def differences(a: Path, b: Path) -> str:
    """What differs between the two engines' runs: metrics exactly; checks, slices and clusters by agreement."""
    out = []
    ma, mb = (json.loads((p / "metrics.json").read_text()) for p in (a, b))
    out.append("metrics same" if ma == mb else "metrics DIFFER: " + ", ".join(k for k in ma if ma.get(k) != mb.get(k)))
    ca, cb = (pd.read_parquet(p / "checks.parquet") for p in (a, b))
    same = (ca["label_issue"].to_numpy() == cb["label_issue"].to_numpy()).mean()
    out.append(f"label issues {int(ca['label_issue'].sum()):,} vs {int(cb['label_issue'].sum()):,} ({same:.1%} of rows "
               "flagged alike)")
    kinds = [c["duplicate_kind"].replace("", "none").value_counts().to_dict() for c in (ca, cb)]
    out.append(f"duplicate rows by kind {kinds[0]} vs {kinds[1]}")
    sa, sb = (pd.read_parquet(p / "slices.parquet") for p in (a, b))
    shared = len(set(sa["description"]) & set(sb["description"]))
    out.append(f"slices {len(sa)} vs {len(sb)} ({shared} shared)")
    xa, xb = (pd.read_parquet(p / "assignments.parquet", columns=["example_id", "cluster_id"]) for p in (a, b))
    joined = xa.merge(xb, on="example_id", suffixes=("_a", "_b"))
    if len(joined):
        from sklearn.metrics import adjusted_rand_score

        out.append(f"clusters ARI {adjusted_rand_score(joined['cluster_id_a'], joined['cluster_id_b']):.3f}")
    return "; ".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--local-up-to", type=int, default=1_000_000, help="run the in-process engine up to here")
    parser.add_argument("--workdir", type=Path, default=None, help="keep inputs and runs here (default: a temp dir)")
    args = parser.parse_args()
    rows = []
    work = args.workdir or Path(tempfile.mkdtemp(prefix="ea_ray_analyze_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        for n in sorted(args.sizes):
            data = work / f"predictions_{n}.parquet"
            if not data.exists():
                write_predictions(data, n)
            runs = {}
            for engine in ("ray", "local") if n <= args.local_up_to else ("ray",):
                print(f"{n:,} rows, {engine} ({load_average()})", file=sys.stderr, flush=True)
                runs[engine] = analyze(data, work / f"run_{n}_{engine}", engine)
                r = runs[engine]
                rows.append([f"{n:,}", engine, f"{r['seconds']:.0f}", f"{r['peak']:,.0f}",
                             *("-" if r["stages"][s] is None else f"{r['stages'][s]:.0f}" for s in STAGES)])
                print("  " + "  ".join(rows[-1]), file=sys.stderr, flush=True)
            if len(runs) == 2:
                ratio = runs["ray"]["seconds"] / runs["local"]["seconds"]
                rows.append(["", "ray / local", f"{ratio:.2f}x",
                             f"{runs['ray']['peak'] / runs['local']['peak']:.2f}x", "", "", "", "", ""])
                print(f"  {n:,}: {differences(work / f'run_{n}_local', work / f'run_{n}_ray')}", flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(table(rows, ["rows", "engine", "wall s", "driver peak MB", *(f"{s} s" for s in STAGES)]))
    print(f"\n{load_average()}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
