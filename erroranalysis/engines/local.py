"""The in-process engine: chunks one after another, in row order."""

from __future__ import annotations

from typing import Callable

import numpy as np


def predict(inputs, predictor, labels: list[str], sink, *, chunk_size: int = 4096,
            progress: Callable[[int], None] | None = None, reading=None) -> np.ndarray:
    """Run `predictor` (a `ChunkPredictor`) over `inputs` (an `input_table`) chunk by chunk into `sink`; return the
    summed confusion counts [k, k]. `reading` (`predictions.Reading`): how the task reads outputs."""
    from erroranalysis.infer.predictions import CLASSIFICATION, confusion, output_table

    reading = reading or CLASSIFICATION
    k = len(labels)
    counts = np.zeros((k, k), dtype=np.int64)
    try:
        for start in range(0, inputs.num_rows, chunk_size):
            chunk = inputs.slice(start, chunk_size)
            out = predictor(chunk, progress)
            sink.write(start, output_table(chunk, labels, out, reading), out)
            counts += confusion(chunk, out, k, reading)
    finally:
        sink.close()
    return counts


def embed(texts: list[str], embedder) -> np.ndarray:
    return embedder.embed_texts(texts)
