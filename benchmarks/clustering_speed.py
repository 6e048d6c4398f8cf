"""Speed of `erroranalysis cluster` beside BERTopic on the same vectors: wall time and peak memory.

For each size (failures: 1k, 5k, 20k, 100k by default) the script writes a run directory with synthetic
384-d vectors (40 failure topics plus correct examples, as many as 4x the failures up to 20,000, each with short
pseudo-word texts) and a vectors file in predictions order, then measures, each in its own process:

- `erroranalysis cluster RUN --embedder vectors.npy` as a user runs it, a **cold process** (Python start, imports,
  embeddings from the file, UMAP 5-d + HDBSCAN, naming, the 2-D map of all examples, writing), with numba's
  compiled UMAP kernels in the on-disk cache, the state of every run after the first on a machine;
- the same call made a second time in one process (**warm**);
- BERTopic: `BERTopic().fit_transform(failure texts, embeddings=failure vectors)` in a fresh process (cold:
  imports + fit) and its second fit in that process (warm).

Once, at the smallest size, it also times the **first run on a machine** (`erroranalysis cluster` with an empty
numba cache) and a cold process with `--reducer pca` (nothing to compile).

    .venv/bin/python benchmarks/clustering_speed.py                  # 1k, 5k, 20k, 100k (warm up to 20k)
    .venv/bin/python benchmarks/clustering_speed.py --sizes 1000 5000 --no-warm
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PY = sys.executable
CLI = [str(Path(PY).parent / "erroranalysis")]


def make_data(folder: Path, n_failures: int, seed: int = 0) -> tuple[Path, Path]:
    """A run with n_failures failing examples and min(4n, 20000) correct ones; vectors.npy in predictions order."""
    import pandas as pd

    from erroranalysis import rundir

    rng = np.random.default_rng(seed)
    n_correct = min(4 * n_failures, 20_000)
    n = n_failures + n_correct
    d, n_topics = 384, 60
    centres = rng.normal(size=(n_topics, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    # failures come from topics 0..39, correct examples from all 60 (so failure topics also hold correct ones)
    topic = np.concatenate([rng.integers(0, 40, n_failures), rng.integers(0, n_topics, n_correct)])
    vectors = centres[topic] + rng.normal(scale=0.8 / np.sqrt(d) * 2.5, size=(n, d))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    syllables = np.array(["ka", "lo", "mi", "ne", "su", "ra", "to", "vi", "be", "do", "fu", "gi"])
    words = np.array(["".join(rng.choice(syllables, 3)) for _ in range(3000)])
    topic_words = rng.choice(len(words), size=(n_topics, 15))
    texts = [" ".join(np.concatenate([words[rng.choice(topic_words[t], 8)], words[rng.integers(0, 3000, 6)]]))
             for t in topic]
    labels = ["a", "b", "c", "d", "e"]
    gold = rng.integers(0, 5, n)
    pred = gold.copy()
    pred[:n_failures] = (gold[:n_failures] + rng.integers(1, 5, n_failures)) % 5
    frame = pd.DataFrame({"example_id": [f"x{i}" for i in range(n)], "text": texts,
                          "label": np.array(labels)[gold], "pred": np.array(labels)[pred],
                          "correct": gold == pred, "confidence": np.float32(0.7), "loss": np.float32(0.5),
                          "n_tokens": np.int32(14), "truncated": False})
    run = rundir.Run.create(folder / "run", task="classification", labels=labels, overwrite=True)
    rundir.write_parquet(run.file(rundir.PREDICTIONS), frame)
    with run.stage("infer"):
        pass
    np.save(folder / "vectors.npy", vectors)
    return run.path, folder / "vectors.npy"


def measure(cmd: list[str], env: dict | None = None, timeout: int = 3600) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MiB, stdout) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed ({proc.returncode}):\n{out[-3000:]}")
    return seconds, usage.ru_maxrss / 1024, out


WARM_OURS = """
import json, sys, time
from erroranalysis.stages import cluster_run
run, vec = sys.argv[1], sys.argv[2]
times = []
for _ in range(2):
    t = time.perf_counter(); s = cluster_run(run, embedder=vec); times.append(time.perf_counter() - t)
print(json.dumps({"times": times, "n_clusters": s["n_clusters"], "noise": s["noise_share"]}))
"""

BERTOPIC = """
import json, sys, time, warnings
warnings.filterwarnings("ignore")
import numpy as np, pandas as pd
from bertopic import BERTopic
pred = pd.read_parquet(sys.argv[1] + "/predictions.parquet")
fail = ~pred["correct"].to_numpy()
vectors = np.load(sys.argv[2])[fail]
texts = pred.loc[fail, "text"].tolist()
times = []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter(); topics, _ = BERTopic().fit_transform(texts, embeddings=vectors)
    times.append(time.perf_counter() - t)
topics = np.asarray(topics)
print(json.dumps({"times": times,
                  "n_clusters": int(len(set(topics.tolist()) - {-1})), "noise": float((topics < 0).mean())}))
"""


def last_json(out: str) -> dict:
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(out[-2000:])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 20_000, 100_000])
    parser.add_argument("--no-warm", action="store_true", help="skip the warm (second call) measurements")
    parser.add_argument("--warm-up-to", type=int, default=20_000,
                        help="measure warm (second call) only up to this many failures (default 20,000)")
    parser.add_argument("--no-bertopic", action="store_true")
    parser.add_argument("--no-first-run", action="store_true", help="skip the empty-numba-cache measurement")
    args = parser.parse_args(argv)
    from importlib.util import find_spec

    has_bertopic = find_spec("bertopic") is not None and not args.no_bertopic
    work = Path(tempfile.mkdtemp(prefix="ea-speed-"))
    rows = []
    try:
        for i, n in enumerate(sorted(args.sizes)):
            run, vectors = make_data(work / f"n{n}", n)
            print(f"\n== {n:,} failures ({min(4 * n, 20_000):,} correct examples), 384-d synthetic vectors", flush=True)
            if i == 0 and not args.no_first_run:
                empty = work / "empty-numba"
                seconds, mib, _ = measure(CLI + ["cluster", str(run), "--embedder", str(vectors)],
                                          env={"NUMBA_CACHE_DIR": str(empty)})
                rows.append((n, "erroranalysis cluster, first run on a machine (empty numba cache)", seconds, mib))
                print(f"  first run (compiles UMAP):      {seconds:7.1f} s  {mib:7.0f} MiB", flush=True)
                seconds, mib, _ = measure(CLI + ["cluster", str(run), "--embedder", str(vectors), "--reducer", "pca",
                                                 "--layout", "pca"])
                rows.append((n, "erroranalysis cluster --reducer pca --layout pca, cold process", seconds, mib))
                print(f"  cold, --reducer/--layout pca:   {seconds:7.1f} s  {mib:7.0f} MiB", flush=True)
            seconds, mib, out = measure(CLI + ["cluster", str(run), "--embedder", str(vectors)])
            rows.append((n, "erroranalysis cluster, cold process", seconds, mib))
            print(f"  erroranalysis cluster, cold:    {seconds:7.1f} s  {mib:7.0f} MiB", flush=True)
            ours_cold = seconds
            warm_here = not args.no_warm and n <= args.warm_up_to
            if warm_here:
                seconds, mib, out = measure([PY, "-c", WARM_OURS, str(run), str(vectors)])
                warm = last_json(out)["times"][1]
                rows.append((n, "cluster_run, warm process (2nd call)", warm, mib))
                print(f"  cluster_run, warm (2nd call):   {warm:7.1f} s  {mib:7.0f} MiB", flush=True)
            if has_bertopic:
                fits = 2 if warm_here else 1
                seconds, mib, out = measure([PY, "-c", BERTOPIC, str(run), str(vectors), str(fits)])
                info = last_json(out)
                cold = seconds - (sum(info["times"][1:]) if fits > 1 else 0)
                rows.append((n, "BERTopic, cold process (imports + fit)", cold, mib))
                print(f"  BERTopic, cold (imports + fit): {cold:7.1f} s  {mib:7.0f} MiB   "
                      f"({info['n_clusters']} topics, noise {info['noise']:.1%})", flush=True)
                if fits > 1:
                    rows.append((n, "BERTopic, warm process (2nd fit)", info["times"][1], mib))
                    print(f"  BERTopic, warm (2nd fit):       {info['times'][1]:7.1f} s", flush=True)
                print(f"  cold erroranalysis / cold BERTopic = {ours_cold / cold:.2f}", flush=True)
            shutil.rmtree(work / f"n{n}", ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| failures | what | seconds | peak MiB |\n| ---: | --- | ---: | ---: |")
    for n, what, seconds, mib in rows:
        print(f"| {n:,} | {what} | {seconds:.1f} | {mib:.0f} |")


if __name__ == "__main__":
    main()
