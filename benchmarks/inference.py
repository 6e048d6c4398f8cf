"""Inference speed and memory: `erroranalysis run` beside transformers' pipeline, whole processes, one run.

On texts the tool has not seen (each process gets an empty embedding cache), prints examples/s, peak memory, the
speed ratio and prediction agreement of: inference + metrics in fp32 and in bf16 (`--no-checks --no-slices
--no-cluster`), and a default run (checks and slices on, `--no-cluster`, fp32), each against
`transformers.pipeline("text-classification")` on the same checkpoint and texts; whether this CPU has native
bf16; then how time and memory grow with the number of rows. Needs the sample checkpoint (`make sample`).

    .venv/bin/python benchmarks/inference.py [--n 3000] [--scale 1000,4000,16000] [--repeat 3]
    .venv/bin/python benchmarks/inference.py --batching      # rows per batch against the token budget
    .venv/bin/python benchmarks/inference.py --interleaved   # forward passes alone, taking turns
"""

from __future__ import annotations

import argparse
import compileall
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


def ours(model: Path, data: Path, out: Path, precision: str, analysis: bool = False,
         extra: tuple[str, ...] = ()) -> tuple[float, float, float]:
    """One whole `erroranalysis run` process with an empty embedding cache (new texts)."""
    stages = ["--no-cluster"] if analysis else ["--no-cluster", "--no-slices", "--no-checks"]
    return run_process([str(ROOT / ".venv/bin/erroranalysis"), "run", "--model", str(model), "--data", str(data),
                        "--out", str(out), "--max-length", str(MAX_LENGTH), "--precision", precision, *stages,
                        *extra, "--overwrite"], env={"ERRORANALYSIS_CACHE_DIR": str(out) + "-cache"})


def pipeline_process(model: Path, data: Path, out: Path) -> tuple[float, float, float]:
    return run_process([python(), str(ROOT / "benchmarks/pipeline_baseline.py"), str(model), str(data), str(out),
                        str(MAX_LENGTH)])


def median_of(repeat: int, measure) -> tuple[float, float, float]:
    """(wall s, CPU s, peak MiB) of the run with the median wall time of `repeat` runs."""
    runs = sorted((measure() for _ in range(max(1, repeat))), key=lambda r: r[0])
    return runs[len(runs) // 2]


def native_bf16() -> str:
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    found = sorted({"amx_bf16", "avx512_bf16"} & flags)
    return ("yes: " + ", ".join(found)) if found else "no (bf16 is emulated)"


def interleaved(model: Path, texts: list[str], rounds: int = 3) -> None:
    """Forward passes alone, in one process, ours and the pipeline's taking turns `rounds` times: CPU seconds
    (time.process_time, all threads) are comparable even when other jobs load the machine, since both sides see
    the same load. Ours as `run` calls it (weights loaded for the precision, 4,096-row chunks)."""
    import time

    import torch
    from transformers import pipeline

    from erroranalysis.infer.classifier import infer, load_classifier

    sides = {"pipeline fp32": pipeline("text-classification", model=str(model), device="cpu"),
             "ours fp32": load_classifier(model, device="cpu", precision="fp32"),
             "pipeline bf16": pipeline("text-classification", model=str(model), device="cpu", dtype=torch.bfloat16),
             "ours bf16": load_classifier(model, device="cpu", precision="bf16")}

    def once(name: str, side) -> float:
        start = time.process_time()
        if name.startswith("pipeline"):
            side(texts, batch_size=32, truncation=True, max_length=MAX_LENGTH)
        else:
            for _ in infer(side, texts, None, batch_size=32, max_length=MAX_LENGTH, precision=side.precision):
                pass
        return time.process_time() - start

    for name, side in sides.items():
        side(texts[:64]) if name.startswith("pipeline") else list(infer(side, texts[:64], None))  # warm-up
    cpu = {name: [] for name in sides}
    for _ in range(rounds):
        for name, side in sides.items():
            cpu[name].append(once(name, side))
    best = {name: min(values) for name, values in cpu.items()}
    rows = [[name, f"{best[name]:.1f}", f"{len(texts) / best[name]:.0f}",
             f"{best['pipeline ' + name.split()[1]] / best[name]:.2f}x", f"{best['pipeline fp32'] / best[name]:.2f}x"]
            for name in sides]
    print(f"forward passes only, {len(texts)} texts, one process, {rounds} interleaved rounds (best of each), "
          f"{load_average()}; native bf16: {native_bf16()}")
    print(table(rows, ["", "CPU s", "texts per CPU s", "vs pipeline same precision", "vs pipeline fp32"]))


def batching_grid(model: Path, short: list[str], rounds: int = 2) -> None:
    """Forward passes alone (as `run` feeds them) in fp32 and bf16 over short texts and over long documents (the
    sample's eval set, max_length 256): fixed rows per batch beside the CPU default (a token budget), best of
    `rounds`. What chose infer.classifier.CPU_BATCH_TOKENS."""
    import time

    from erroranalysis.infer.classifier import CPU_BATCH_ROWS, CPU_BATCH_TOKENS, infer, load_classifier

    docs = [json.loads(line)["text"] for line in open(sample_checkpoint().parent / "eval.jsonl", encoding="utf-8")]
    sets = {"short texts (600, max_length 128)": (short[:600], 128), "documents (200, max_length 256)": (docs[:200], 256)}
    sides = [(f"{n} rows", n, 0) for n in (8, 16, 32, 64, 128)]
    rows = []
    for precision in ("fp32", "bf16"):
        default = f"default: {CPU_BATCH_TOKENS[precision]:,} tokens, <= {CPU_BATCH_ROWS} rows"
        clf = load_classifier(model, device="cpu", precision=precision)
        list(infer(clf, short[:64], None, precision=precision))  # warm-up
        for name, (texts, max_length) in sets.items():
            best = {}
            for label, batch_size, max_tokens in [*sides, (default, None, None)]:
                times = []
                for _ in range(rounds):
                    start = time.perf_counter()
                    for _ in infer(clf, texts, None, batch_size=batch_size, max_tokens=max_tokens,
                                   max_length=max_length, precision=precision):
                        pass
                    times.append(time.perf_counter() - start)
                best[label] = min(times)
            ref = best["32 rows"]
            rows += [[precision, name, label, f"{t:.2f}", f"{ref / t:.2f}x"] for label, t in best.items()]
    print(f"batching, forward passes only, best of {rounds}, {load_average()}")
    print(table(rows, ["", "texts", "batches", "wall s", "vs 32 rows"]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--scale", default="1000,4000,16000")
    parser.add_argument("--interleaved", action="store_true", help="forward passes only, in one process, taking turns")
    parser.add_argument("--batching", action="store_true", help="forward passes only: rows per batch vs tokens")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each whole process (the median is shown)")
    args = parser.parse_args()
    model = sample_checkpoint()
    texts = corpus_sentences()
    if args.interleaved:
        interleaved(model, texts[:args.n])
        return
    if args.batching:
        batching_grid(model, texts)
        return
    # Bytecode for our modules, as `pip install` writes it: an editable install run with PYTHONDONTWRITEBYTECODE
    # (as here) would compile them again in every process (0.1 s), which the pipeline's installed packages never do.
    compileall.compile_dir(ROOT / "erroranalysis", quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = write_eval(texts, tmp, args.n)
        base_out = tmp / "pipeline.jsonl"
        base_s, base_cpu, base_mem = median_of(args.repeat, lambda: pipeline_process(model, data, base_out))
        base_pred = pd.read_json(base_out, lines=True)["pred"].to_numpy()
        rows = [["transformers pipeline (batch 32)", f"{args.n / base_s:.0f}", f"{base_s:.1f}", f"{base_cpu:.1f}",
                 f"{base_mem:.0f}", "1.00x", "1.00x", "-"]]
        for name, precision, analysis, extra in (
                ("inference + metrics, fp32", "fp32", False, ()),
                ("inference + metrics, fp32, 32 rows a batch", "fp32", False, ("--batch-size", "32")),
                ("inference + metrics, bf16", "bf16", False, ()),
                ("inference + metrics, bf16, 32 rows a batch", "bf16", False, ("--batch-size", "32")),
                ("default run (checks, slices), fp32", "fp32", True, ())):
            out = tmp / f"run_{precision}_{analysis}_{len(extra)}"
            s, cpu, mem = median_of(args.repeat, lambda: ours(model, data, out, precision, analysis, extra))
            pred = pd.read_parquet(out / "predictions.parquet")["pred"].to_numpy()
            rows.append([f"erroranalysis run: {name}", f"{args.n / s:.0f}", f"{s:.1f}", f"{cpu:.1f}",
                         f"{mem:.0f}", f"{base_s / s:.2f}x", f"{base_cpu / cpu:.2f}x", f"{(pred == base_pred).mean():.2%}"])
        print(f"{args.n} short texts new to the tool, sample checkpoint (MiniLM-L6), max_length {MAX_LENGTH}, whole "
              f"processes, median of {args.repeat}, {load_average()}; native bf16 on this CPU: {native_bf16()}")
        print(table(rows, ["", "examples/s", "wall s", "CPU s", "peak MiB", "wall vs pipeline", "CPU vs pipeline",
                           "same preds"]))
        print()
        few = write_eval(texts, tmp, 10)  # start-up: the fixed cost of each process, on 10 texts
        start = [median_of(args.repeat, lambda: pipeline_process(model, few, tmp / "few.jsonl")),
                 median_of(args.repeat, lambda: ours(model, few, tmp / "few_run", "fp32"))]
        print(f"start-up, the same processes over 10 texts, median of {args.repeat}: pipeline {start[0][0]:.1f} s wall "
              f"({start[0][1]:.1f} CPU s), erroranalysis run fp32 {start[1][0]:.1f} s wall ({start[1][1]:.1f} CPU s)")
        print()
        scale = []
        for n in [int(x) for x in args.scale.split(",")]:
            s, cpu, mem = ours(model, write_eval(texts, tmp, n), tmp / f"scale_{n}", "fp32")
            scale.append([n, f"{s:.1f}", f"{cpu:.1f}", f"{n / cpu:.0f}", f"{mem:.0f}"])
        print(f"erroranalysis run --precision fp32 as rows grow, {load_average()}")
        print(table(scale, ["rows", "wall s", "CPU s", "rows per CPU s", "peak MiB"]))


if __name__ == "__main__":
    main()
