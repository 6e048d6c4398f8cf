"""The one number a run is summed up by, as people already read it for its task (pure): a token classifier's is
seqeval's entity-level micro F1 (sentence accuracy counts a sentence with one wrong tag as wholly wrong), a
regression's the mean absolute error, a multi-label classifier's subset accuracy, any other run's accuracy."""

from __future__ import annotations

HEADLINES = {"token-classification": ("micro_f1", "entity micro F1"), "regression": ("mae", "MAE"),
             "multilabel": ("subset_accuracy", "subset accuracy")}
DEFAULT = ("accuracy", "accuracy")


def headline(task: str, overall: dict) -> dict:
    """{"metric": key in `overall`, "name": what people call it, "value": its value (None when absent)}."""
    metric, name = HEADLINES.get(task, DEFAULT)
    return {"metric": metric, "name": name, "value": overall.get(metric)}
