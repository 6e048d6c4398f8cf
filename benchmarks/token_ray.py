"""The token run's driver at scale: `erroranalysis run --task token-classification`, in-process and `--engine ray`.

What a user with a large NER eval set runs: `erroranalysis run --task token-classification --model CKPT --data
eval.parquet --train train.parquet --id-column id` on the tiny token classifier the tests build
(`tests/token_fixtures.build_tiny_token_classifier`: BERT, 2 layers, 32 wide, random weights, the packaged MiniLM
tokenizer) over N sentences with planted IOB2 tags (`token_fixtures.sentence`: a person, a place, sometimes an
organization), and a training file of N other sentences for `seen_in_train`. Under ray the workers read both files
in blocks (the eval set predicted on actors that write the shards, the training file's surfaces sent back per block)
on a local Ray the command starts over this machine's CPUs. Each run is its own process; printed per size and
engine: wall seconds, the driver's own peak resident memory (VmHWM sampled every 0.1 s; Ray's raylet, GCS and actors
are other processes and not counted) and each stage's seconds from the manifest. One torch thread per process (as
Ray gives each 1-CPU actor; the in-process peer gets the same). `--stages infer` runs the infer and metrics stages
(`--no-slices --no-cluster`), `--stages all` every default stage in the one command, `--stages split` the infer and
metrics stages, then `erroranalysis slices RUN` and `erroranalysis cluster RUN` each alone (with the same engine),
so that each process's peak says which stage holds what.

    .venv/bin/python benchmarks/token_ray.py                                    # 10k and 100k, both engines
    .venv/bin/python benchmarks/token_ray.py --sizes 1000000 --local-up-to 0    # 1M, ray only
    .venv/bin/python benchmarks/token_ray.py --sizes 100000 --stages split        # each stage's own peak
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from common import load_average, ray_env, run_watched, table  # noqa: E402
from scale import EA  # noqa: E402
from token_fixtures import build_tiny_token_classifier, sentence  # noqa: E402

STAGES = ("infer", "metrics", "slices", "cluster")
CHUNK = 100_000


def write_sentences(path: Path, n: int, seed: int, prefix: str) -> Path:
    """n sentences with planted tags (ids `<prefix><row>`, a `source` column), CHUNK rows to a row group."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    writer = None
    try:
        for start in range(0, n, CHUNK):
            rows = [sentence(rng, i) for i in range(start, min(n, start + CHUNK))]
            chunk = pa.table({"id": [f"{prefix}{start + j}" for j in range(len(rows))],
                              "tokens": [r["tokens"] for r in rows], "tags": [r["tags"] for r in rows],
                              "source": [r["source"] for r in rows]})
            writer = writer or pq.ParquetWriter(path, chunk.schema)
            writer.write_table(chunk)
    finally:
        if writer is not None:
            writer.close()
    return path


def run(model: Path, data: Path, train: Path, out: Path, engine: str, stages: str, actors: int) -> dict:
    command = [EA, "run", "--task", "token-classification", "--model", str(model), "--data", str(data),
               "--train", str(train), "--id-column", "id", "--out", str(out), "--device", "cpu", "--overwrite",
               *([] if stages == "all" else ["--no-slices", "--no-cluster"])]
    return timed(command, out, engine, actors, out.with_suffix(".log"))


def stage_alone(name: str, out: Path, engine: str, actors: int) -> dict:
    """`erroranalysis slices RUN` or `erroranalysis cluster RUN` alone on the run the `run` command made."""
    return timed([EA, name, str(out)], out, engine, actors, out.with_name(f"{out.name}.{name}.log"))


def timed(command: list[str], out: Path, engine: str, actors: int, log: Path) -> dict:
    """Run `command` (with the engine's flags) as its own process: its wall seconds, its own peak VmHWM, the run's
    stage seconds from the manifest."""
    command = [*command, *(["--engine", "ray", "--ray-actors", str(actors)] if engine == "ray" else [])]
    seconds, peak = run_watched(command, log, {**ray_env(), "OMP_NUM_THREADS": "1"})
    manifest = json.loads((out / "manifest.json").read_text())
    infer = manifest["stages"]["infer"]
    return {"seconds": seconds, "peak": peak, "read_by": infer.get("read_by", "driver"),
            "stages": {name: manifest["stages"].get(name, {}).get("seconds") for name in STAGES}}


def same(a: Path, b: Path) -> str:
    """Whether the two engines' runs agree: metrics.json, and the spans' kinds and seen_in_train marks."""
    import pandas as pd

    from erroranalysis.rundir import Run, readers

    ra, rb = Run.open(a), Run.open(b)
    sa, sb = readers.read_spans(ra), readers.read_spans(rb)
    cols = ["example_id", "kind", "seen_in_train"]
    spans = sa[cols].reset_index(drop=True).equals(sb[cols].reset_index(drop=True))
    overall = ra.metrics()["overall"] == rb.metrics()["overall"]
    seen = pd.Series(sa["seen_in_train"]).value_counts().to_dict()
    return f"spans (kind, seen_in_train) {'same' if spans else 'DIFFER'}, metrics {'same' if overall else 'DIFFER'}; " \
           f"{len(sa):,} spans, seen_in_train {seen}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--local-up-to", type=int, default=100_000, help="run the in-process engine up to here")
    parser.add_argument("--stages", choices=("infer", "all", "split"), default="infer")
    parser.add_argument("--actors", type=int, default=1, help="--ray-actors (default 1: the machine is shared)")
    args = parser.parse_args()
    rows = []
    work = Path(tempfile.mkdtemp(prefix="ea_token_ray_"))
    try:
        model = build_tiny_token_classifier(work / "model")
        for n in sorted(args.sizes):
            data = write_sentences(work / f"eval_{n}.parquet", n, seed=0, prefix="s")
            train = write_sentences(work / f"train_{n}.parquet", n, seed=1, prefix="t")
            done = {}
            for engine in ("ray", "local") if n <= args.local_up_to else ("ray",):
                print(f"{n:,} sentences, {engine} ({load_average()})", file=sys.stderr, flush=True)
                out = work / f"run_{n}_{engine}"
                r = done[engine] = run(model, data, train, out, engine, args.stages, args.actors)
                label = f"ray, {args.actors} actor(s)" if engine == "ray" else "in-process"
                rows.append([f"{n:,}", label, f"{r['seconds']:.1f}", f"{r['peak']:,.0f}", r["read_by"],
                             *("-" if r["stages"][s] is None else f"{r['stages'][s]:.1f}" for s in STAGES)])
                print("  " + "  ".join(rows[-1]), file=sys.stderr, flush=True)
                for name in ("slices", "cluster") if args.stages == "split" else ():
                    a = stage_alone(name, out, engine, args.actors)
                    rows.append([f"{n:,}", f"{label}: {name} alone", f"{a['seconds']:.1f}", f"{a['peak']:,.0f}", "",
                                 *("" if s != name else f"{a['stages'][s]:.1f}" for s in STAGES)])
                    print("  " + "  ".join(rows[-1]), file=sys.stderr, flush=True)
            if len(done) == 2:
                rows.append(["", "ray / in-process", f"{done['ray']['seconds'] / done['local']['seconds']:.2f}x",
                             f"{done['ray']['peak'] / done['local']['peak']:.2f}x", "", "", "", "", ""])
                print(f"  {n:,}: {same(work / f'run_{n}_local', work / f'run_{n}_ray')}", flush=True)
            for path in (data, train, *work.glob(f"run_{n}_*")):
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(table(rows, ["sentences", "engine", "wall s", "driver peak MB", "rows read by",
                       *(f"{s} s" for s in STAGES)]))
    print(f"\n{load_average()}; {os.cpu_count()} CPUs; "
          f"{subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
