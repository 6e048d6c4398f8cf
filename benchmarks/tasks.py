"""Inference speed of the multi-label and regression heads: erroranalysis' batched inference (`ChunkPredictor`, the
unit `run` streams through; length-sorted batches under a token budget) beside what a user would otherwise write,
transformers' `pipeline("text-classification", top_k=None, function_to_apply="sigmoid")` for multi-label and
`function_to_apply="none"` for regression, over the same checkpoint and texts, in one process, one after the other.

The heads are the sample checkpoint's encoder (6-layer, 384-wide MiniLM fine-tuned on BBC News) with its config's
`problem_type` set to multi_label_classification (its 5-label head read through sigmoids), and with a fresh
one-output regression head. Prints examples/s of each, the ratio, whether the two agree (the same label sets at
0.5; values within 1e-4) and the load average.

    .venv/bin/python benchmarks/tasks.py [--n 2000] [--max-length 128]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from common import SAMPLE, corpus_sentences, load_average, sample_checkpoint, table


def checkpoint() -> Path:
    folder = SAMPLE / "checkpoint"
    return folder if (folder / "config.json").is_file() else sample_checkpoint()


def head(base: Path, folder: Path, task: str) -> Path:
    """A copy of the sample checkpoint read as `task`: multilabel (problem_type only) or regression (a new head)."""
    shutil.copytree(base, folder)
    config = json.loads((folder / "config.json").read_text())
    if task == "multilabel":
        config["problem_type"] = "multi_label_classification"
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        return folder
    import torch
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1, problem_type="regression",
                                                               id2label={0: "score"}, label2id={"score": 0},
                                                               ignore_mismatched_sizes=True)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def ours(model: Path, texts: list[str], max_length: int) -> tuple[float, np.ndarray]:
    from erroranalysis.infer.classifier import ChunkPredictor

    predictor = ChunkPredictor(model, max_length=max_length, precision="fp32", device="cpu")
    start = time.perf_counter()
    out = predictor({"text": texts})
    return time.perf_counter() - start, out["probs"]


def peer(model: Path, texts: list[str], max_length: int, task: str) -> tuple[float, np.ndarray]:
    from transformers import pipeline

    fn = "sigmoid" if task == "multilabel" else "none"
    classify = pipeline("text-classification", model=str(model), device="cpu", top_k=None, function_to_apply=fn)
    labels = [classify.model.config.id2label[i] for i in range(classify.model.config.num_labels)]
    start = time.perf_counter()
    results = classify(texts, batch_size=32, truncation=True, max_length=max_length)
    seconds = time.perf_counter() - start
    scores = np.array([[{r["label"]: r["score"] for r in row}[name] for name in labels] for row in results])
    return seconds, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args()
    import torch

    texts = (corpus_sentences() * 2)[:args.n]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in ("multilabel", "regression"):
            model = head(checkpoint(), Path(tmp) / task, task)
            ours(model, texts[:64], args.max_length)  # warm-up: first-call costs out of both figures
            a_s, a = ours(model, texts, args.max_length)
            b_s, b = peer(model, texts, args.max_length, task)
            agree = ((a >= 0.5) == (b >= 0.5)).all(1).mean() if task == "multilabel" else \
                float(np.mean(np.abs(a[:, 0] - b[:, 0]) < 1e-4))
            rows.append([task, f"{len(texts) / a_s:.0f}", f"{len(texts) / b_s:.0f}", f"{b_s / a_s:.2f}x",
                         f"{agree:.1%}"])
    print(table(rows, ["head", "ours ex/s", "pipeline ex/s", "speed-up", "agreement"]))
    print(f"{args.n} BBC News sentences, max length {args.max_length}, fp32, {torch.get_num_threads()} torch "
          f"threads, {load_average()}")


if __name__ == "__main__":
    main()
