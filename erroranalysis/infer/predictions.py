"""The rows of predictions.parquet: the inference input as one Arrow table, and a chunk of it with the outputs of
`classifier.ChunkPredictor` as predictions, with the chunk's confusion counts. Every engine (in-process, Ray) writes
predictions through these.

How a chunk's outputs read as predictions depends on the task (`Reading`): the arg-max class (single-label), the
labels whose sigmoid reaches their threshold (multi-label: the set's names in `label`/`pred`, and list columns of
the gold, predicted, missed and spurious labels), or the predicted value (regression: `label`/`pred` hold the gold's
quantile bin of the gold and of the prediction, beside `target`, `prediction`, `error`, `abs_error`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from erroranalysis.core.schemas import TASK_COLUMNS
from erroranalysis.sources.gold import label_set

MULTILABEL_COLUMNS, REGRESSION_COLUMNS = TASK_COLUMNS["multilabel"], TASK_COLUMNS["regression"]


@dataclass(frozen=True)
class Reading:
    """How a task reads outputs: `thresholds` per label (multi-label); `edges` of the gold's quantile bins and the
    `tolerance` above which |error| fails (regression; None: decided once every error is known, see
    `worst_decile`), `relative` when the tolerance is a share of |gold|."""

    task: str = "classification"
    thresholds: tuple | None = None
    edges: tuple | None = None
    tolerance: float | None = None
    relative: bool = False

    def record(self) -> dict:
        return {"task": self.task, "thresholds": None if self.thresholds is None else list(self.thresholds),
                "edges": None if self.edges is None else list(self.edges), "tolerance": self.tolerance,
                "relative_tolerance": self.relative}


CLASSIFICATION = Reading()


def input_table(frame, gold: np.ndarray, labels: list[str], metadata_columns: list[str],
                reading: Reading = CLASSIFICATION):
    """The inference input as one Arrow table: example_id, text, label (gold as text), the gold for the loss
    (`label_id`, `label_ids` multi-hot rows, or `target`), then metadata, in eval-set order. Engines cut it into
    chunks; `output_table` turns a chunk and its outputs into predictions."""
    import pyarrow as pa

    table = pa.table({"example_id": pa.array(frame["example_id"].astype(str).tolist(), pa.string()),
                      "text": pa.array(frame["text"].tolist(), pa.string()),
                      **_gold_columns(gold, labels, reading),
                      "_cut": pa.array(frame["_cut"].to_numpy(dtype=bool) if "_cut" in frame.columns
                                       else np.zeros(len(frame), dtype=bool))})  # cut at --max-chars when read
    metadata = pa.Table.from_pandas(frame[metadata_columns], preserve_index=False)
    for name in metadata.column_names:
        table = table.append_column(name, metadata.column(name))
    return table


def _gold_columns(gold, labels, reading: Reading) -> dict:
    import pyarrow as pa

    if reading.task == "multilabel":
        names = np.asarray(labels, dtype=object)
        return {"label": pa.array([label_set(row, names) for row in gold], pa.string()),
                "label_ids": pa.array(gold.astype(np.uint8).tolist(), pa.list_(pa.uint8()))}
    if reading.task == "regression":
        return {"label": pa.array(bin_names(gold, reading.edges), pa.string()),
                "target": pa.array(np.asarray(gold, dtype=np.float64))}
    index = {label: i for i, label in enumerate(labels)}
    label_ids = np.fromiter((index[g] for g in gold), dtype=np.int64, count=len(gold))
    return {"label": pa.array([str(g) for g in gold], pa.string()), "label_id": pa.array(label_ids)}


def output_table(inputs, labels: list[str], out: dict[str, np.ndarray], reading: Reading = CLASSIFICATION):
    """A chunk of predictions.parquet from a chunk of `input_table` and its `ChunkPredictor` outputs."""
    import pyarrow as pa

    columns = {"example_id": inputs.column("example_id"), "text": inputs.column("text"),
               "label": inputs.column("label")}
    if reading.task == "multilabel":
        columns.update(_multilabel(inputs, labels, out, reading))
    elif reading.task == "regression":
        columns.update(_regression(inputs, out, reading))
    else:
        names = np.asarray(labels, dtype=object)
        gold = np.asarray(inputs.column("label").to_pylist(), dtype=object)
        pred_idx = out["probs"].argmax(1)
        pred = names[pred_idx]
        columns.update(pred=pa.array(list(pred), pa.string()), correct=pa.array(gold == pred),
                       confidence=pa.array(out["probs"][np.arange(len(pred_idx)), pred_idx].astype(np.float32)))
    columns.update({
        "loss": pa.array(out["loss"].astype(np.float32)),
        "n_tokens": pa.array(out["n_tokens"].astype(np.int32)),
        "truncated": pa.array(np.asarray(out["truncated"], dtype=bool)
                              | inputs.column("_cut").to_numpy(zero_copy_only=False).astype(bool)),
    })
    for name in MULTILABEL_COLUMNS + REGRESSION_COLUMNS:  # the task's own columns after the core ones
        if name in columns:
            columns[name] = columns.pop(name)
    for name in inputs.column_names:
        if name not in columns and name not in ("label_id", "label_ids", "_row", "_cut"):
            columns[name] = inputs.column(name)
    return pa.table(columns)


def multilabel_predictions(probs: np.ndarray, thresholds) -> np.ndarray:
    """Multi-hot predictions [n, k]: a label is predicted when its probability reaches its threshold."""
    return (probs >= np.asarray(thresholds, dtype=np.float32)[None, :]).astype(np.uint8)


def _multilabel(inputs, labels, out, reading: Reading) -> dict:
    import pyarrow as pa

    names = np.asarray(labels, dtype=object)
    gold = np.asarray(inputs.column("label_ids").to_pylist(), dtype=np.uint8).reshape(-1, len(labels))
    probs = out["probs"]
    pred = multilabel_predictions(probs, reading.thresholds)
    # confidence that the whole predicted set is right, the labels taken as independent (as the sigmoid head is)
    sure = np.where(pred == 1, probs, 1 - probs).astype(np.float64)
    as_lists = lambda m: pa.array([list(names[np.flatnonzero(r)]) for r in m], pa.list_(pa.string()))  # noqa: E731
    return {"pred": pa.array([label_set(r, names) for r in pred], pa.string()),
            "correct": pa.array((gold == pred).all(axis=1)),
            "confidence": pa.array(np.exp(np.log(np.clip(sure, 1e-12, 1)).sum(axis=1)).astype(np.float32)),
            "gold_labels": as_lists(gold), "pred_labels": as_lists(pred),
            "missed": as_lists(gold & (1 - pred)), "spurious": as_lists(pred & (1 - gold))}


def _regression(inputs, out, reading: Reading) -> dict:
    import pyarrow as pa

    target = inputs.column("target").to_numpy().astype(np.float64)
    prediction = out["probs"][:, 0].astype(np.float64)
    error = prediction - target
    return {"pred": pa.array(bin_names(prediction, reading.edges), pa.string()),
            "correct": pa.array(within(error, target, reading)),
            "confidence": pa.array(np.full(len(target), np.nan, dtype=np.float32)),
            "target": pa.array(target), "prediction": pa.array(prediction), "error": pa.array(error),
            "abs_error": pa.array(np.abs(error))}


def within(error: np.ndarray, target: np.ndarray, reading: Reading) -> np.ndarray:
    """Regression's correct: |error| at most the tolerance (a share of |gold| when relative); every row passes
    while the tolerance is still to be decided from all errors (`worst_decile`)."""
    if reading.tolerance is None:
        return np.ones(len(error), dtype=bool)
    bound = reading.tolerance * np.abs(target) if reading.relative else reading.tolerance
    return np.abs(error) <= bound


WORST_SHARE = 0.1  # regression's default failures: the worst decile of |error|


def worst_decile(abs_error: np.ndarray) -> tuple[np.ndarray, float]:
    """(correct, tolerance): the examples whose |error| is above the 90th percentile fail (about a tenth; ties at
    the percentile pass)."""
    tolerance = float(np.quantile(abs_error, 1 - WORST_SHARE)) if len(abs_error) else 0.0
    return abs_error <= tolerance, tolerance


N_BINS = 5


def quantile_edges(values: np.ndarray, n_bins: int = N_BINS) -> tuple:
    """Edges of the gold's quantile bins (the label/pred columns of a regression run)."""
    return tuple(float(e) for e in np.unique(np.quantile(np.asarray(values, dtype=np.float64),
                                                         np.linspace(0, 1, n_bins + 1))))


def bin_labels(edges) -> list[str]:
    """The bins' names in order, "[a, b]" for the first and "(a, b]" after: the classes of a regression run's
    confusion view."""
    edges = np.asarray(edges, dtype=np.float64)
    if len(edges) < 2:
        return [_fmt(edges[0])]
    return [f"{'[' if i == 0 else '('}{_fmt(edges[i])}, {_fmt(edges[i + 1])}]" for i in range(len(edges) - 1)]


def bin_names(values, edges) -> list[str]:
    """Each value's bin among `edges` (`bin_labels`); a value beyond the gold's range reads "< a" or "> b"."""
    values = np.asarray(values, dtype=np.float64)
    edges = np.asarray(edges, dtype=np.float64)
    names = bin_labels(edges)
    codes = np.clip(np.searchsorted(edges, values, side="left") - 1, 0, len(names) - 1)
    low, high = _fmt(edges[0]), _fmt(edges[-1])
    return [f"< {low}" if v < edges[0] else f"> {high}" if v > edges[-1] else names[c] for v, c in zip(values, codes)]


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.3g}"


def confusion(inputs, out: dict[str, np.ndarray], k: int, reading: Reading = CLASSIFICATION) -> np.ndarray:
    """Counts [k, k] of a chunk, what a distributed run sums to check its shards and metrics: (true, predicted)
    classes; for multi-label (gold label i, predicted label j) co-occurrences; for regression [[rows]]."""
    if reading.task == "multilabel":
        gold = np.asarray(inputs.column("label_ids").to_pylist(), dtype=np.int64).reshape(-1, k)
        return gold.T @ multilabel_predictions(out["probs"], reading.thresholds).astype(np.int64)
    if reading.task == "regression":
        return np.full((k, k), inputs.num_rows, dtype=np.int64)
    gold = np.asarray(inputs.column("label_id").to_numpy(), dtype=np.int64)
    return np.bincount(gold * k + out["probs"].argmax(1), minlength=k * k).reshape(k, k)
