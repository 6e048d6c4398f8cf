"""Leakage from a training set into the eval set, from blocks of rows: the pure parts the checks stage runs on Ray
workers (`erroranalysis.stages.check_ray_train`), each equal to what `duplicates.find_leakage` and the stage's label
rule give over every row at once.

- The training labels' rule (integer ids into the run's labels are mapped to names when no value is a name) is
  decided by two votes that merge over any split: some value is a name (any), every value is an id (all).
- Exact leakage: the rows of both sets whose normalized texts share a key land in one hash partition
  (`blockwise.bucket_of`); in each, every eval row is joined to the first training row of its key (`join`).
- The summary's counts add up over blocks; its examples are the first few by the in-process order (label differs
  first, then similarity, then row), so each block's first few merge into the whole's (`leak_part`, `merge_leak`).
"""

from __future__ import annotations

import numpy as np

TOP = 20  # examples in checks.json's leakage section (`report.leakage_summary`'s limit)


def label_votes(values, labels: list[str]) -> tuple[bool, bool]:
    """(some value is one of `labels`, every value is an integer id into them) for a split of the training labels:
    the first merges with any, the second with all."""
    known = set(labels)
    values = [str(v) for v in values]
    return (any(v in known for v in values),
            all(v.isdigit() and int(v) < len(labels) for v in values))


def ids_are_labels(votes: list[tuple[bool, bool]], labels: list[str]) -> bool:
    """Whether the training labels are integer ids into the run's labels (mapped to names): none is a name, all
    are ids."""
    return bool(labels) and not any(v[0] for v in votes) and all(v[1] for v in votes)


def class_names(values, labels: list[str], ids: bool) -> np.ndarray:
    """The training labels as class names (`ids`: by `ids_are_labels`)."""
    values = np.asarray([str(v) for v in values], dtype=object)
    if ids:
        return np.array([labels[int(v)] for v in values], dtype=object)
    return values


def first_rows(keys: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions of each distinct key's first row (by `rows`), in key order: the training row a leaked eval text is
    matched to, as `duplicates.find_leakage` matches it."""
    order = np.lexsort((rows, keys))
    first = np.r_[True, keys[order][1:] != keys[order][:-1]] if len(keys) else np.zeros(0, bool)
    return order[first]


def join(eval_keys: np.ndarray, train_keys: np.ndarray) -> np.ndarray:
    """Each eval key's position in the sorted distinct `train_keys` (`keys[first_rows(keys, rows)]`), -1 where
    training has no such text."""
    if not len(train_keys) or not len(eval_keys):
        return np.full(len(eval_keys), -1, np.int64)
    at = np.minimum(np.searchsorted(train_keys, eval_keys), len(train_keys) - 1)
    return np.where(train_keys[at] == eval_keys, at, -1).astype(np.int64)


def leak_part(rows, example_ids, gold, train_row, train_id, train_label, kind, similarity) -> dict:
    """One eval block's share of `report.leakage_summary`: counts and its first examples."""
    hit = np.asarray(train_row) >= 0
    differs = hit & (np.asarray(gold, dtype=object).astype(str) != np.asarray(train_label, dtype=object).astype(str))
    top = [i for i in np.flatnonzero(hit)]
    top = sorted(top, key=lambda i: (not differs[i], -float(similarity[i]), int(rows[i])))[:TOP]
    return {"n": len(hit), "n_in_train": int(hit.sum()), "n_exact": int((kind == "exact").sum()),
            "n_near": int((kind == "near").sum()), "n_label_differs": int(differs.sum()),
            "top": [((not differs[i], -float(similarity[i]), int(rows[i])),
                     {"example_id": str(example_ids[i]), "label": str(gold[i]), "train_id": str(train_id[i]),
                      "train_label": str(train_label[i]), "kind": str(kind[i]),
                      "similarity": float(similarity[i])}) for i in top]}


def merge_leak(parts: list[dict], train_path: str, n_train: int, near: bool) -> dict:
    """`report.leakage_summary` from the eval blocks' `leak_part`s."""
    n = sum(p["n"] for p in parts)
    hit = sum(p["n_in_train"] for p in parts)
    top = sorted((t for p in parts for t in p["top"]), key=lambda t: t[0])[:TOP]
    return {"train_path": train_path, "n_train": n_train, "near": near, "n_in_train": hit,
            "share_in_train": hit / n if n else 0.0, "n_exact": sum(p["n_exact"] for p in parts),
            "n_near": sum(p["n_near"] for p in parts), "n_label_differs": sum(p["n_label_differs"] for p in parts),
            "examples": [t[1] for t in top]}
