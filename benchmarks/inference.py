"""Inference speed and memory: `erroranalysis run` beside transformers' pipeline, whole processes, one run.

Prints examples/s, peak memory, the speed ratio and prediction agreement for fp32 and bf16, then how time and
memory grow with the number of rows. Needs the sample checkpoint (`make sample`).

    .venv/bin/python benchmarks/inference.py [--n 3000] [--scale 1000,4000,16000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import pandas as pd
from common import ROOT, corpus_sentences, load_average, python, run_process, sample_checkpoint, table

MAX_LENGTH = 128


def write_eval(texts: list[str], folder: Path, n: int) -> Path:
    path = folder / f"eval_{n}.jsonl"
    reps = -(-n // len(texts))
    rows = (texts * reps)[:n]
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(rows):
            f.write(json.dumps({"text": t, "label": "business"}) + "\n")
    return path


def ours(model: Path, data: Path, out: Path, precision: str) -> tuple[float, float, float]:
    return run_process([str(ROOT / ".venv/bin/erroranalysis"), "run", "--model", str(model), "--data", str(data),
                        "--out", str(out), "--max-length", str(MAX_LENGTH), "--precision", precision,
                        "--no-cluster", "--no-slices", "--no-checks", "--overwrite"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--scale", default="1000,4000,16000")
    args = parser.parse_args()
    model = sample_checkpoint()
    texts = corpus_sentences()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = write_eval(texts, tmp, args.n)
        base_out = tmp / "pipeline.jsonl"
        base_s, base_cpu, base_mem = run_process([python(), str(ROOT / "benchmarks/pipeline_baseline.py"), str(model),
                                        str(data), str(base_out), str(MAX_LENGTH)])
        base_pred = pd.read_json(base_out, lines=True)["pred"].to_numpy()
        rows = [["transformers pipeline (batch 32)", f"{args.n / base_s:.0f}", f"{base_s:.1f}", f"{base_cpu:.1f}",
                 f"{base_mem:.0f}", "1.00x", "1.00x", "-"]]
        for precision in ("fp32", "bf16"):
            s, cpu, mem = ours(model, data, tmp / f"run_{precision}", precision)
            pred = pd.read_parquet(tmp / f"run_{precision}" / "predictions.parquet")["pred"].to_numpy()
            rows.append([f"erroranalysis run --precision {precision}", f"{args.n / s:.0f}", f"{s:.1f}", f"{cpu:.1f}",
                         f"{mem:.0f}", f"{base_s / s:.2f}x", f"{base_cpu / cpu:.2f}x", f"{(pred == base_pred).mean():.2%}"])
        print(f"{args.n} short texts, sample checkpoint (MiniLM-L6), max_length {MAX_LENGTH}, whole processes, "
              f"{load_average()}")
        print(table(rows, ["", "examples/s", "wall s", "CPU s", "peak MiB", "wall vs pipeline", "CPU vs pipeline",
                           "same preds"]))
        print()
        scale = []
        for n in [int(x) for x in args.scale.split(",")]:
            s, cpu, mem = ours(model, write_eval(texts, tmp, n), tmp / f"scale_{n}", "fp32")
            scale.append([n, f"{s:.1f}", f"{cpu:.1f}", f"{n / cpu:.0f}", f"{mem:.0f}"])
        print(f"erroranalysis run --precision fp32 as rows grow, {load_average()}")
        print(table(scale, ["rows", "wall s", "CPU s", "rows per CPU s", "peak MiB"]))


if __name__ == "__main__":
    main()
