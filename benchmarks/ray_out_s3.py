"""A run on object storage under Ray: the workers write the shards there, against building it locally and uploading.

What a user with predictions and an S3 bucket runs: `erroranalysis analyze --predictions FILE --out s3://BUCKET/run
--id-column id --engine ray` (every default stage), against what they would otherwise do: write the run to a local
folder with `--engine ray` and copy it to the bucket (s3fs `put`, as `aws s3 cp --recursive` would). The bucket is
a local S3 server (moto in server mode on 127.0.0.1: the test extra `moto`), so the figures measure the bytes each
way moves through the driver, not a network. Predictions: `ray_analyze.write_predictions` (short BBC News sentences,
five topics, planted duplicates and an error slice).

Both run with `--no-cache` (each embeds its own texts) on the machine's built static embedder. Printed per size:
wall seconds, the driver's own peak (VmHWM), the bytes the driver's disk holds at the end (the
mirror, or the local run), and the bytes the driver uploads (the small files; in the baseline, every file).

    .venv/bin/python benchmarks/ray_out_s3.py                  # 100,000 rows
    .venv/bin/python benchmarks/ray_out_s3.py --sizes 100000 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from common import load_average, ray_env, run_watched, table  # noqa: E402
from object_store import make_bucket, moto_server  # noqa: E402
from ray_analyze import write_predictions  # noqa: E402
from scale import EA  # noqa: E402

BUCKET = "bench"


def disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def analyze(data: Path, out: str, log: Path) -> tuple[float, float]:
    """`analyze` under Ray with every default stage; `--no-cache`: each run embeds its texts (the second run would
    find the first's vectors in the embedding cache)."""
    return run_watched([EA, "analyze", "--predictions", str(data), "--out", out, "--id-column", "id", "--engine",
                        "ray", "--no-cache", "--overwrite"], log, ray_env())


def to_s3(data: Path, url: str, log: Path) -> dict:
    """`analyze --out s3://...` under Ray: the workers write the shards there."""
    seconds, peak = analyze(data, url, log)
    from erroranalysis.core.storage import ObjectPath
    from erroranalysis.rundir import remote

    listed = remote.remote_manifest(ObjectPath.parse(url))["objects"]["files"]
    small = {rel: e["bytes"] for rel, e in listed.items() if "key" not in e}
    mirror = remote.mirror_of(ObjectPath.parse(url))
    found = {"seconds": seconds, "peak": peak, "disk": disk_bytes(mirror), "uploaded": sum(small.values()),
             "run": sum(e["bytes"] for e in listed.values()), "largest_uploads": sorted(small.items(),
                                                                                       key=lambda kv: -kv[1])[:3]}
    shutil.rmtree(mirror, ignore_errors=True)
    return found


def local_then_copy(data: Path, out: Path, url: str, log: Path) -> dict:
    """The baseline: the run written to a local folder under Ray, then copied to the bucket."""
    from erroranalysis.core.storage import fsspec_filesystem

    seconds, peak = analyze(data, str(out), log)
    start = time.perf_counter()
    fsspec_filesystem("s3").put(str(out), url, recursive=True)
    copy = time.perf_counter() - start
    size = disk_bytes(out)
    return {"seconds": seconds + copy, "copy": copy, "peak": peak, "disk": size, "uploaded": size, "run": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ea-bench-s3-") as tmp, moto_server() as env:
        os.environ.update(env)
        make_bucket(BUCKET)
        for n in args.sizes:
            data = write_predictions(Path(tmp) / f"predictions-{n}.parquet", n)
            ours = to_s3(data, f"s3://{BUCKET}/runs/ours-{n}", Path(tmp) / f"ours-{n}.log")
            base = local_then_copy(data, Path(tmp) / f"local-{n}", f"s3://{BUCKET}/runs/copied-{n}",
                                   Path(tmp) / f"base-{n}.log")
            print(json.dumps({"rows": n, "workers_write_s3": ours, "local_then_copy": base}), flush=True)
            for name, r in (("workers write to S3", ours), ("local run, then copied", base)):
                rows.append([f"{n:,}", name, f"{r['seconds']:.0f}", f"{r['peak']:,.0f}", f"{r['disk'] / 1e6:,.1f}",
                             f"{r['uploaded'] / 1e6:,.1f}", f"{r['run'] / 1e6:,.1f}"])
    print(table(rows, ["rows", "how", "seconds", "driver peak MB", "driver disk MB", "driver uploads MB",
                       "run MB"]))
    print(load_average())


if __name__ == "__main__":
    main()
