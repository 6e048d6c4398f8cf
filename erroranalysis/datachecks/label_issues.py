"""Label issues: examples whose given label is probably wrong, by confident learning (cleanlab).

The core is one function over arrays: given labels and out-of-sample predicted probabilities (a run's
`probs.npy`, class order = the run's labels; the model never trained on the eval set, so they are out of
sample), `find_label_issues` returns one row per example with

- `label_issue_score`: 1 - cleanlab's label quality score (`rank.get_label_quality_scores`), in [0, 1];
  higher = the given label is more likely wrong. With the default `self_confidence` method it is
  1 - p(given label).
- `label_issue`: cleanlab's flag (`filter.find_label_issues`, confident joint pruned by noise rate): the
  examples it estimates are mislabeled, as many as it estimates the noise rate to be.
- `suggested_label`: the class the model finds most likely (what to relabel to, if the flag is right).

A high score is a reason to look at the example, not proof: a confidently wrong model scores the same way.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from erroranalysis.errors import DataError, preview
from erroranalysis.validation import check_param

METHODS = ("self_confidence", "normalized_margin", "confidence_weighted_entropy")
FILTERS = ("prune_by_noise_rate", "prune_by_class", "both", "confident_learning", "predicted_neq_given")
COLUMNS = ["label_issue_score", "label_issue", "suggested_label"]


def find_label_issues(labels, probs, classes, *, method: str = "self_confidence",
                      filter_by: str = "prune_by_noise_rate", source: str = "probabilities") -> pd.DataFrame:
    """Score and flag every example; rows in input order, columns `COLUMNS`.

    `labels`: given labels, names in `classes` (or integer ids into `classes`); `probs`: float [n, len(classes)],
    rows are probability distributions over `classes` in that order. `source` names the probabilities in errors.
    """
    check_param("method", method, method in METHODS, f"one of {', '.join(METHODS)}")
    check_param("filter_by", filter_by, filter_by in FILTERS, f"one of {', '.join(FILTERS)}")
    ids, probs = validate(labels, probs, classes, source=source)
    from cleanlab.filter import find_label_issues as _find
    from cleanlab.rank import get_label_quality_scores

    with warnings.catch_warnings():  # cleanlab warns about classes without examples; that is not our user's error
        warnings.simplefilter("ignore")
        quality = get_label_quality_scores(ids, probs, method=method)
        if len(np.unique(ids)) < 2:
            flags = np.zeros(len(ids), dtype=bool)  # confident learning needs two classes to compare
        else:
            flags = np.asarray(_find(ids, probs, filter_by=filter_by, n_jobs=1), dtype=bool)
    names = np.asarray([str(c) for c in classes], dtype=object)
    return pd.DataFrame({
        "label_issue_score": (1.0 - np.asarray(quality, dtype=np.float64)).clip(0, 1).astype(np.float32),
        "label_issue": flags,
        "suggested_label": names[probs.argmax(1)],
    })


def validate(labels, probs, classes, *, source: str = "probabilities") -> tuple[np.ndarray, np.ndarray]:
    """(integer label ids, row-normalized float64 probabilities), or a one-line DataError."""
    classes = [str(c) for c in classes]
    if len(classes) < 2:
        raise DataError(f"{source}: {len(classes)} class(es); label-issue detection needs at least 2.")
    probs = np.asarray(probs, dtype=np.float64)
    labels = np.array([str(v) for v in np.asarray(labels, dtype=object).reshape(-1)], dtype=object)
    if probs.ndim != 2 or probs.shape[1] != len(classes):
        raise DataError(f"{source}: shape {tuple(probs.shape)} does not match {len(classes)} classes; "
                        "give one probability column per class, in the run's label order.")
    if probs.shape[0] != len(labels):
        raise DataError(f"{source}: {probs.shape[0]} rows for {len(labels)} labels; give one row per example.")
    if len(labels) == 0:
        raise DataError(f"{source}: no examples; label-issue detection needs at least one.")
    bad = ~np.isfinite(probs) | (probs < 0)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise DataError(f"{source}: row {row}, class {classes[col]!r}: probability {float(probs[row, col])!r} is not a "
                        "finite number >= 0; re-run inference.")
    sums = probs.sum(1)
    if (sums <= 0).any():
        row = int(np.argmax(sums <= 0))
        raise DataError(f"{source}: row {row}: probabilities sum to 0; re-run inference.")
    index = {c: i for i, c in enumerate(classes)}
    ids = np.fromiter((index.get(v, -1) for v in labels), dtype=np.int64, count=len(labels))
    unknown = ids < 0
    if unknown.any():
        as_ids = np.array([v.isdigit() and int(v) < len(classes) for v in labels[unknown]], dtype=bool)
        if as_ids.all():
            ids[unknown] = [int(v) for v in labels[unknown]]
        else:
            bad_labels = list(dict.fromkeys(str(v) for v in labels[unknown]))
            raise DataError(f"{source}: label {bad_labels[0]!r} is not one of the classes "
                            f"(unknown: {preview(bad_labels, 3)}; classes: {preview(classes, 8)}).")
    return ids, probs / sums[:, None]


def precision_at_k(scores: np.ndarray, truth: np.ndarray, k: int) -> float:
    """Share of the k highest-scored examples that are truly mislabeled (`truth` is a boolean mask)."""
    top = np.argsort(-np.asarray(scores), kind="stable")[:k]
    return float(np.asarray(truth, dtype=bool)[top].mean()) if k else float("nan")
