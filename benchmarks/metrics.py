"""Metrics speed: erroranalysis.metrics.compute_metrics beside scikit-learn on the same arrays.

The baseline is what a user would otherwise run: `classification_report` + `confusion_matrix`. compute_metrics
does more (micro/weighted averages, top confusions, 1,000-resample bootstrap intervals), and with
probabilities also ECE and Brier. Run: .venv/bin/python benchmarks/metrics.py [--rows N] [--classes K]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def make_arrays(rows: int, classes: int, seed: int = 0):
    """Labels as strings, predictions ~80% correct, probabilities that favour the prediction."""
    rng = np.random.default_rng(seed)
    labels = np.array([f"class_{i:02d}" for i in range(classes)], dtype=object)
    t = rng.integers(0, classes, rows)
    p = np.where(rng.random(rows) < 0.8, t, rng.integers(0, classes, rows))
    logits = rng.normal(size=(rows, classes)).astype(np.float32)
    logits[np.arange(rows), p] += 3.0
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    return labels[t], labels[p], list(labels), probs


def make_slices(rows: int, seed: int = 0):
    """A categorical and a numeric metadata column, and texts of 5 to 200 words."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    metadata = pd.DataFrame({"source": rng.choice([f"site_{i}" for i in range(50)], rows),
                             "score": rng.normal(size=rows)})
    words = [" ".join(["word"] * k) for k in range(201)]
    texts = [words[k] for k in rng.integers(5, 201, rows)]
    return metadata, texts


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--classes", type=int, default=20)
    args = parser.parse_args()

    from sklearn.metrics import classification_report, confusion_matrix

    from erroranalysis.metrics import compute_metrics

    y_true, y_pred, labels, probs = make_arrays(args.rows, args.classes)
    ours = seconds(lambda: compute_metrics(y_true, y_pred, labels))
    ours_probs = seconds(lambda: compute_metrics(y_true, y_pred, labels, probs))
    metadata, texts = make_slices(args.rows)
    ours_all = seconds(lambda: compute_metrics(y_true, y_pred, labels, probs, metadata, texts))
    sklearn = seconds(lambda: (classification_report(y_true, y_pred, labels=labels, zero_division=0),
                               confusion_matrix(y_true, y_pred, labels=labels)))

    print(f"rows={args.rows:,} classes={args.classes}")
    print(f"sklearn classification_report + confusion_matrix   {sklearn:7.2f} s")
    print(f"compute_metrics (with 1,000-resample bootstrap)    {ours:7.2f} s   "
          f"{sklearn / ours:5.1f}x faster than sklearn")
    print(f"compute_metrics + probs (adds ECE, Brier)          {ours_probs:7.2f} s   "
          f"{sklearn / ours_probs:5.1f}x faster than sklearn")
    print(f"  + slices (2 metadata columns, text_length)       {ours_all:7.2f} s   "
          f"{sklearn / ours_all:5.1f}x faster than sklearn")


if __name__ == "__main__":
    main()
