"""Label issues: examples whose given label is probably wrong, by confident learning (cleanlab), with the labels of
an example's neighbours in an embedding space beside the model's own probabilities.

The core is one function over arrays: given labels and out-of-sample predicted probabilities (a run's
`probs.npy`, class order = the run's labels; the model never trained on the eval set, so they are out of
sample) and, optionally, one vector per example, `find_label_issues` returns one row per example with

- `label_issue_score`: 1 - cleanlab's label quality score (`rank.get_label_quality_scores`), in [0, 1];
  higher = the given label is more likely wrong. With the default `self_confidence` method and no vectors it is
  1 - p(given label).
- `label_issue`: cleanlab's flag (`filter.find_label_issues`, confident joint pruned by noise rate): the
  examples it estimates are mislabeled, as many as it estimates the noise rate to be.
- `suggested_label`: the class other than the given label that the model finds most likely (what to relabel to,
  if the flag is right; never the label the example already has).

A model's softmax alone ranks its own confident mistakes as label issues: a 73%-accurate model's errors look
like mislabeled examples. With `vectors`, each example's label is also compared with its neighbours' labels
(`neighbor_label_probs`: the k most similar examples, weighted so that a near-duplicate outweighs the rest, as
cleanlab's Datalab does with features), and cleanlab scores and flags the mixture
`(1 - knn_weight) * probs + knn_weight * neighbour labels`: a label its neighbours share is not an issue because
the model disagrees, and a near-duplicate with another label is the strongest case. The weight and the number of
neighbours were chosen on `benchmarks/label_issues.py` (planted flips on three corpora, several model accuracies).

Above `batch_rows` examples, scores are computed per batch and flags come from cleanlab's
`find_label_issues_batched`, and neighbours are searched among a seeded sample of `max_reference` examples, so
memory stays bounded (about `block_size`^2 similarities plus the arrays themselves) at a million rows.

A high score is a reason to look at the example, not proof: a confidently wrong model still scores the same way
where the neighbours are few or mislabeled themselves.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from erroranalysis.core.errors import DataError, preview
from erroranalysis.core.params import is_int, is_number
from erroranalysis.core.sampling import seeded_rows
from erroranalysis.core.validation import check_param

METHODS = ("self_confidence", "normalized_margin", "confidence_weighted_entropy")
FILTERS = ("prune_by_noise_rate", "prune_by_class", "both", "confident_learning", "predicted_neq_given")
COLUMNS = ["label_issue_score", "label_issue", "suggested_label"]
KNN_WEIGHT = 0.5  # share of the neighbours' labels in the mixture (benchmarks/label_issues.py)
KNN_K = 20
TEMPERATURE = 0.05  # of the similarity weights: a neighbour 0.05 closer counts e times more
PRIOR_SIMILARITY = 0.3  # the class frequencies weigh as much as one neighbour at this cosine similarity
BATCH_ROWS = 200_000


def find_label_issues(labels, probs, classes, *, method: str = "self_confidence",
                      filter_by: str = "prune_by_noise_rate", source: str = "probabilities", vectors=None,
                      knn_weight: float = KNN_WEIGHT, k: int = KNN_K, max_reference: int = 20_000,
                      batch_rows: int = BATCH_ROWS, seed: int = 0) -> pd.DataFrame:
    """Score and flag every example; rows in input order, columns `COLUMNS`.

    `labels`: given labels, names in `classes` (or integer ids into `classes`); `probs`: float [n, len(classes)],
    rows are probability distributions over `classes` in that order. `source` names the probabilities in errors.
    `vectors` (optional): float [n, d], one per example (the eval set's embeddings): neighbours' labels join the
    probabilities with `knn_weight` (0 ignores them). `suggested_label` is the model's most likely class other than
    the given one.
    """
    check_param("method", method, method in METHODS, f"one of {', '.join(METHODS)}")
    check_param("filter_by", filter_by, filter_by in FILTERS, f"one of {', '.join(FILTERS)}")
    check_param("knn_weight", knn_weight, is_number(knn_weight) and 0 <= knn_weight <= 1, "a number in [0, 1]")
    check_param("k", k, is_int(k) and k >= 1, "an integer >= 1")
    check_param("max_reference", max_reference, is_int(max_reference) and max_reference >= 1, "an integer >= 1")
    check_param("batch_rows", batch_rows, is_int(batch_rows) and batch_rows >= 1, "an integer >= 1")
    ids, probs = validate(labels, probs, classes, source=source)
    mixed = probs
    if vectors is not None and knn_weight > 0:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(ids):
            raise DataError(f"vectors: shape {tuple(vectors.shape)} for {len(ids)} examples; give one row per "
                            "example, in order.")
        if not np.isfinite(vectors).all():
            raise DataError("vectors: contain NaN or infinite values; fix the embedder that produced them.")
        neighbours = neighbor_label_probs(vectors, ids, len(classes), k=k, max_reference=max_reference, seed=seed)
        mixed = (1 - knn_weight) * probs + knn_weight * neighbours
    quality, flags = _score_and_flag(ids, mixed, method, filter_by, batch_rows)
    names = np.asarray([str(c) for c in classes], dtype=object)
    others = np.array(probs, dtype=np.float32, copy=True)
    others[np.arange(len(ids)), ids] = -np.inf  # a relabelling suggestion is another label, even where the model agrees
    return pd.DataFrame({
        "label_issue_score": (1.0 - np.asarray(quality, dtype=np.float64)).clip(0, 1).astype(np.float32),
        "label_issue": flags,
        "suggested_label": names[others.argmax(1)],
    })


def _score_and_flag(ids, probs, method, filter_by, batch_rows) -> tuple[np.ndarray, np.ndarray]:
    """cleanlab's label quality scores and flags; batched above `batch_rows` rows (scores per batch, flags by
    `find_label_issues_batched`, which streams its confident-joint estimate) so memory stays bounded."""
    from cleanlab.filter import find_label_issues as _find
    from cleanlab.rank import get_label_quality_scores

    n = len(ids)
    with warnings.catch_warnings():  # cleanlab warns about classes without examples; that is not our user's error
        warnings.simplefilter("ignore")
        quality = np.concatenate([get_label_quality_scores(ids[a:a + batch_rows], probs[a:a + batch_rows],
                                                           method=method) for a in range(0, n, batch_rows)])
        if len(np.unique(ids)) < 2:
            flags = np.zeros(n, dtype=bool)  # confident learning needs two classes to compare
        elif n > batch_rows and filter_by == "prune_by_noise_rate":
            from cleanlab.experimental.label_issues_batched import find_label_issues_batched

            flags = np.asarray(find_label_issues_batched(ids, probs, batch_size=min(batch_rows, 100_000), n_jobs=1,
                                                         verbose=False, return_mask=True), dtype=bool)
        else:
            flags = np.asarray(_find(ids, probs, filter_by=filter_by, n_jobs=1), dtype=bool)
    return quality, flags


def neighbor_label_probs(vectors: np.ndarray, label_ids: np.ndarray, n_classes: int, *, k: int = KNN_K,
                         temperature: float = TEMPERATURE, max_reference: int = 20_000, seed: int = 0,
                         block_size: int = 4096, chunk_rows: int = 65_536) -> np.ndarray:
    """float32 [n, n_classes]: the labels of each example's k most cosine-similar other examples, weighted by
    exp(similarity / temperature) (a near-duplicate at 0.98 outweighs ten neighbours at 0.8) and normalized.

    Above `max_reference` examples the neighbours are searched among a seeded sample of that many (exact search,
    `duplicates.top_k_neighbors`, blocks of `block_size`), `chunk_rows` queries at a time, so time grows linearly
    and memory beyond the output stays bounded. An example without neighbours gets the class frequencies."""
    from erroranalysis.datachecks.duplicates import top_k_neighbors

    n = len(vectors)
    label_ids = np.asarray(label_ids, dtype=np.int64)
    prior = np.bincount(label_ids, minlength=n_classes).astype(np.float32) / max(n, 1)
    out = np.zeros((n, n_classes), dtype=np.float32)
    if n < 2:
        return out + prior
    if n > max_reference:  # a fixed sample as the reference (the rule `--engine ray` shares, block by block)
        ref = reference_rows(n, max_reference, seed)
        reference, ref_labels = vectors[ref], label_ids[ref]
        for a in range(0, n, chunk_rows):
            b = min(a + chunk_rows, n)
            out[a:b] = reference_label_probs(vectors[a:b], np.arange(a, b), reference, ref, ref_labels, prior, k=k,
                                             temperature=temperature, block_size=block_size)
        return out
    index, sims = top_k_neighbors(vectors, k=min(k, n - 1), block_size=block_size)
    rows = np.arange(n)
    for j in range(index.shape[1]):  # one neighbour per row at a time: no (row, class) cell twice
        found = index[:, j] >= 0
        weight = np.exp((sims[found, j] - 1.0) / temperature).astype(np.float32)
        out[rows[found], label_ids[index[found, j]]] += weight
    out += np.exp((PRIOR_SIMILARITY - 1.0) / temperature) * prior  # as much as one neighbour this alike
    out /= out.sum(axis=1, keepdims=True)
    return out


def reference_label_probs(queries, rows, reference, ref_rows, ref_labels, prior, *, k: int = KNN_K,
                          temperature: float = TEMPERATURE, block_size: int = 4096) -> np.ndarray:
    """`neighbor_label_probs` for the queries alone (global row numbers `rows`) against a reference sample (its
    vectors, global rows and label ids) and the whole set's class frequencies `prior`: what each block computes
    under `--engine ray`, with the sample `neighbor_label_probs` draws (every row up to `max_reference`)."""
    from erroranalysis.datachecks.duplicates import top_k_neighbors

    out = np.zeros((len(queries), len(prior)), dtype=np.float32)
    if len(reference):
        index, sims = top_k_neighbors(queries, reference, k=min(k + 1, len(reference)), block_size=block_size)
        found_rows = np.where(index >= 0, ref_rows[np.maximum(index, 0)], -1)
        keep = np.argsort(found_rows == np.asarray(rows)[:, None], axis=1, kind="stable")[:, :k]  # others first
        index, sims = np.take_along_axis(index, keep, 1), np.take_along_axis(sims, keep, 1)
        for j in range(index.shape[1]):
            found = index[:, j] >= 0
            weight = np.exp((sims[found, j] - 1.0) / temperature).astype(np.float32)
            out[np.flatnonzero(found), ref_labels[index[found, j]]] += weight
    out += np.exp((PRIOR_SIMILARITY - 1.0) / temperature) * prior
    out /= out.sum(axis=1, keepdims=True)
    return out


def reference_rows(n: int, max_reference: int, seed: int) -> np.ndarray:
    """The rows `neighbor_label_probs` searches among: all up to `max_reference`, else a seeded sample."""
    return seeded_rows(n, max_reference, seed)


def validate(labels, probs, classes, *, source: str = "probabilities", first_row: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(integer label ids, row-normalized float64 probabilities), or a one-line DataError; rows are numbered from
    `first_row` (a block's first row)."""
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
        raise DataError(f"{source}: row {row + first_row}, class {classes[col]!r}: probability {float(probs[row, col])!r} is not a "
                        "finite number >= 0; re-run inference.")
    sums = probs.sum(1)
    if (sums <= 0).any():
        row = int(np.argmax(sums <= 0))
        raise DataError(f"{source}: row {row + first_row}: probabilities sum to 0; re-run inference.")
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
