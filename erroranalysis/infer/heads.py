"""How a sequence-classification head's logits become outputs, per task: one function per head, all taking a batch
of logits (a float tensor [n, k]) and the gold (a tensor, or None) and returning `probs` [n, k] and, with gold, the
per-example `loss`. The registry (`erroranalysis.tasks`) names which one a task uses.

- single-label: a softmax over the classes, the loss the cross-entropy of the gold class;
- multi-label: a sigmoid per label (as transformers' BCEWithLogitsLoss trains it), the loss the binary cross-entropy
  averaged over the labels; the gold is multi-hot [n, k];
- regression: the one output itself (`probs` [n, 1] holds the predicted value, no squashing), the loss the squared
  error.
"""

from __future__ import annotations

import numpy as np


def softmax_outputs(logits, gold=None) -> dict[str, np.ndarray]:
    import torch

    log_probs = torch.log_softmax(logits, dim=-1)
    out = {"probs": log_probs.exp().cpu().numpy()}
    if gold is not None:
        gold = torch.as_tensor(gold, device=logits.device, dtype=torch.long)
        out["loss"] = (-log_probs.gather(1, gold[:, None]).squeeze(1)).cpu().numpy()
    return out


def sigmoid_outputs(logits, gold=None) -> dict[str, np.ndarray]:
    import torch

    out = {"probs": torch.sigmoid(logits).cpu().numpy()}
    if gold is not None:
        gold = torch.as_tensor(gold, device=logits.device, dtype=logits.dtype)
        bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, gold, reduction="none")
        out["loss"] = bce.mean(dim=1).cpu().numpy()
    return out


def regression_outputs(logits, gold=None) -> dict[str, np.ndarray]:
    import torch

    value = logits[:, :1]
    out = {"probs": value.cpu().numpy()}
    if gold is not None:
        gold = torch.as_tensor(gold, device=logits.device, dtype=logits.dtype)
        out["loss"] = ((value[:, 0] - gold) ** 2).cpu().numpy()
    return out


# The input column that carries each task's gold into a chunk (see `erroranalysis.infer.predictions.input_table`).
GOLD_COLUMNS = {"classification": "label_id", "multilabel": "label_ids", "regression": "target"}


def gold_array(task: str, column) -> np.ndarray:
    """A chunk's gold column as the array its head's loss takes: class ids, multi-hot rows, or target values."""
    values = column.to_pylist() if hasattr(column, "to_pylist") else list(column)
    if task == "multilabel":
        return np.asarray(values, dtype=np.float32)
    if task == "regression":
        return np.asarray(values, dtype=np.float32)
    return np.asarray(values, dtype=np.int64)
