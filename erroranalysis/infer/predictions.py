"""The rows of predictions.parquet: the inference input as one Arrow table, and a chunk of it with the outputs of
`classifier.ChunkPredictor` as predictions, with the chunk's confusion counts. Every engine (in-process, Ray) writes
predictions through these."""

from __future__ import annotations

import numpy as np


def input_table(frame, gold: np.ndarray, labels: list[str], metadata_columns: list[str]):
    """The inference input as one Arrow table: example_id, text, label (gold names), label_id, then metadata, in
    eval-set order. Engines cut it into chunks; `output_table` turns a chunk and its outputs into predictions."""
    import pyarrow as pa

    index = {label: i for i, label in enumerate(labels)}
    label_ids = np.fromiter((index[g] for g in gold), dtype=np.int64, count=len(gold))
    table = pa.table({"example_id": pa.array(frame["example_id"].astype(str).tolist(), pa.string()),
                      "text": pa.array(frame["text"].tolist(), pa.string()),
                      "label": pa.array([str(g) for g in gold], pa.string()),
                      "label_id": pa.array(label_ids),
                      "_cut": pa.array(frame["_cut"].to_numpy(dtype=bool) if "_cut" in frame.columns
                                       else np.zeros(len(frame), dtype=bool))})  # cut at --max-chars when read
    metadata = pa.Table.from_pandas(frame[metadata_columns], preserve_index=False)
    for name in metadata.column_names:
        table = table.append_column(name, metadata.column(name))
    return table


def output_table(inputs, labels: list[str], out: dict[str, np.ndarray]):
    """A chunk of predictions.parquet from a chunk of `input_table` and its `ChunkPredictor` outputs."""
    import pyarrow as pa

    names = np.asarray(labels, dtype=object)
    gold = np.asarray(inputs.column("label").to_pylist(), dtype=object)
    pred_idx = out["probs"].argmax(1)
    pred = names[pred_idx]
    columns = {
        "example_id": inputs.column("example_id"),
        "text": inputs.column("text"),
        "label": inputs.column("label"),
        "pred": pa.array(list(pred), pa.string()),
        "correct": pa.array(gold == pred),
        "confidence": pa.array(out["probs"][np.arange(len(pred_idx)), pred_idx].astype(np.float32)),
        "loss": pa.array(out["loss"].astype(np.float32)),
        "n_tokens": pa.array(out["n_tokens"].astype(np.int32)),
        "truncated": pa.array(np.asarray(out["truncated"], dtype=bool)
                              | inputs.column("_cut").to_numpy(zero_copy_only=False).astype(bool)),
    }
    for name in inputs.column_names:
        if name not in columns and name not in ("label_id", "_row", "_cut"):
            columns[name] = inputs.column(name)
    return pa.table(columns)


def confusion(inputs, out: dict[str, np.ndarray], k: int) -> np.ndarray:
    """Counts [k, k] (true, predicted) of a chunk: what a distributed run sums to check its shards and metrics."""
    gold = np.asarray(inputs.column("label_id").to_numpy(), dtype=np.int64)
    return np.bincount(gold * k + out["probs"].argmax(1), minlength=k * k).reshape(k, k)
