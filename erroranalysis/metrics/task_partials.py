"""Multi-label and regression metrics from per-block partial aggregates, in two passes over the blocks, and the
merge that adds them up: the metrics.json `compute_multilabel_metrics` / `compute_regression_metrics` give for all
rows at once, exactly (their means are of exact sums, their bootstrap draws counts of distinct cells; see those
modules).

A multi-label block's pass-1 counts and the assembly of metrics.json from them are `multilabel.multilabel_first` and
`multilabel.finish_multilabel` (`compute_multilabel_metrics` is one block of them). Pass 1 (`first_pass`) counts each
metadata column's values (`partials.column_partial`) and every number that needs
no bucket: per-label counts, the samples' (tp, predicted, gold) triples, the (gold, predicted) patterns the
bootstrap resamples, calibration counts and exact sums, a regression run's confusion over its bins with exact sums.
The driver merges them (`merge`) and chooses each column's buckets (`partials.bucket_rule`: the top values or
quantile edges, not the values). Pass 2 (`second_pass`) puts each block's rows in those buckets and sums their
per-row statistics; `finish_by_metadata` turns the merged sums into `metadata_rows`' rows.

What needs every row's value in order (a regression run's Spearman, residual quantiles, bootstrap and by-decile
residuals; a multi-label run's ROC-AUC and average precision) is not here: the stage computes it from the one or
two numeric columns it needs, on a worker.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
import pandas as pd

from erroranalysis.core import counted
from erroranalysis.core.errors import DataError
from erroranalysis.metrics import classification as cl
from erroranalysis.metrics import multilabel as ml
from erroranalysis.metrics import partials
from erroranalysis.sources import cells


def merge(a, b):
    """Two blocks' partials together: counts and exact sums add, Counters add, metadata columns merge."""
    if a is None:
        return b
    if isinstance(a, dict) and not isinstance(a, Counter):
        return {key: merge(a[key], b[key]) for key in a}
    if isinstance(a, partials.ColumnPartial):
        return partials.merge_column(a, b)
    if isinstance(a, list):
        return [merge(x, y) for x, y in zip(a, b)]
    if isinstance(a, tuple):
        return tuple(merge(x, y) for x, y in zip(a, b))
    return a + b


# ------------------------------------------------------------------------------------------------ metadata

def metadata_values(metadata: pd.DataFrame | None, texts, kinds: dict[str, str], offset: int) -> dict:
    """Pass 1 of by_metadata: each column's value counts (and text length in words), keyed as `metadata_groups`."""
    out = {}
    for _, key, values, kind in _columns(metadata, texts, kinds):
        zeros = np.zeros(len(values), dtype=np.int64)
        out[key] = partials.column_partial(values, zeros, zeros, 1, offset, kind)
    return out


def _columns(metadata, texts, kinds):
    for column in [] if metadata is None else metadata.columns:
        key = f"meta_{column}" if str(column) == "text_length" and texts is not None else str(column)
        yield column, key, metadata[column], kinds.get(column, partials.SCALAR)
    if texts is not None:
        yield "text_length", "text_length", cl.word_counts(texts), partials.WORDS


def bucket_rules(columns: dict, max_values: int) -> tuple[dict, list[str]]:
    """Each merged column's `partials.bucket_rule` and names, and the keys set aside (too many distinct values)."""
    rules, aside = {}, []
    for key, column in columns.items():
        if column.values is None:
            aside.append(key)
        else:
            rules[key] = partials.bucket_rule(column, max_values)
    return rules, aside


def metadata_sums(metadata, texts, kinds: dict[str, str], rules: dict, ints: np.ndarray, floats: np.ndarray) -> dict:
    """Pass 2 of by_metadata: per column, per bucket the rows and the sums of the rows' statistics (`ints` [n, a]
    exactly; `floats` [n, b] as exact sums). A row of a list column counts once per bucket it holds values of."""
    out = {}
    for _, key, values, kind in _columns(metadata, texts, kinds):
        if key not in rules:
            continue
        rule, names = rules[key]
        m = len(names)
        if kind == partials.LIST:
            rows, exploded = cells.explode(values)
            cell = np.unique(rows * m + partials.rule_codes(rule, exploded, m))
            rows, codes = cell // m, cell % m
        else:
            rows, codes = np.arange(len(values)), partials.rule_codes(rule, values, m)
        n = np.bincount(codes, minlength=m)
        summed = np.zeros((m, ints.shape[1]), dtype=np.int64)
        np.add.at(summed, codes, ints[rows])
        exact = [counted.binned_exact_sums(codes, floats[rows, j], m) for j in range(floats.shape[1])]
        out[key] = (n, summed, exact)
    return out


def finish_by_metadata(rules: dict, sums: dict, describe) -> dict:
    """`metadata_rows`' rows from merged `metadata_sums`: {"value", "n", **describe(ints, exact sums, n)} for each
    bucket with rows."""
    out = {}
    for key, (_, names) in rules.items():
        n, summed, exact = sums[key]
        out[key] = [{"value": name, "n": int(n[i]), **describe(summed[i], [s[i] for s in exact], int(n[i]))}
                    for i, name in enumerate(names) if n[i]]
    return out


# ------------------------------------------------------------------------------------------------ multi-label

def multilabel_row_stats(t: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Per row: exact match, then per label tp, fp, fn (what a bucket's subset accuracy and F1s need)."""
    return np.concatenate([(t == p).all(axis=1, keepdims=True), t & p, (1 - t) & p, t & (1 - p)],
                          axis=1).astype(np.int64)


def multilabel_describe(k: int):
    def describe(ints, _, n):
        exact = float(ints[0]) / n
        tp, fp, fn = (ints[1 + i * k:1 + (i + 1) * k].astype(np.float64) for i in range(3))
        c = {"tp": tp, "fp": fp, "fn": fn}
        return {"accuracy": exact, "error_rate": 1 - exact,
                "micro_f1": float(ml.scores({key: v.sum() for key, v in c.items()})["f1"]),
                "macro_f1": float(ml.scores(c)["f1"].mean())}
    return describe


# ------------------------------------------------------------------------------------------------ regression

def regression_first(t: np.ndarray, p: np.ndarray, ok: np.ndarray, bins_true, bins_pred, labels: list[str],
                     values: dict, offset: int = 0) -> dict:
    """Pass 1 of a regression block (rows `offset`..): rows, failures, and over the gold's bins the confusion counts
    with each gold bin's failures and exact sums of the error and its absolute value."""
    for name, x in (("target", t), ("prediction", p)):
        if not np.isfinite(x).all():
            row = int(np.flatnonzero(~np.isfinite(x))[0])
            raise DataError(f"{name} row {offset + row} is {x[row]}; target and prediction must be finite numbers.")
    out = {"n": len(t), "failures": int((~ok).sum()), "values": values, "bins": None}
    if bins_true is not None and labels:
        from erroranalysis.metrics.regression import bin_codes

        ct, cp = bin_codes(bins_true, labels), bin_codes(bins_pred, labels)
        k, error = len(labels), p - t
        out["bins"] = {"cm": cl.confusion_counts(ct, cp, k), "failures": np.bincount(ct[~ok], minlength=k),
                       "abs": counted.binned_exact_sums(ct, np.abs(error), k),
                       "error": counted.binned_exact_sums(ct, error, k)}
    return out


def regression_row_stats(t: np.ndarray, p: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: (failure) as ints, (error, |error|) as floats: what a bucket's failure rate, bias and MAE need."""
    error = p - t
    return (~ok).astype(np.int64)[:, None], np.stack([error, np.abs(error)], axis=1)


def regression_describe(ints, exact: list[Fraction], n: int) -> dict:
    rate = float(ints[0]) / n
    return {"accuracy": 1 - rate, "error_rate": rate, "mae": float(exact[1] / n), "bias": float(exact[0] / n)}


def finish_regression_bins(bins: dict | None, labels: list[str]) -> dict:
    """`regression.binned` from the merged bin counts (the empty views without bins)."""
    if bins is None:
        return {"per_class": [], "confusion": {"labels": [], "matrix": []}, "top_confusions": []}
    from erroranalysis.metrics.regression import binned_from_counts

    return binned_from_counts(bins["cm"], labels, bins["failures"], bins["abs"], bins["error"])
