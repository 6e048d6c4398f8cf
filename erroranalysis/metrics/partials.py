"""Classification metrics from per-block partial aggregates: `block_partial` over one block of rows, `merge` of two
partials, `finish` into the dict `compute_metrics` returns for all rows at once, equal to it exactly.

A partial holds counts only: the confusion counts, the calibration bins' counts with exact (fraction) confidence
sums and the exact Brier sum, and per metadata column the count and first row of each value with the confusion
counts of each (value, true, predicted) triple. The buckets of `bucket_values` need all rows (the most frequent
values, the quantile edges), so they are chosen in `finish`, from the merged counts: the quantiles from the sorted
distinct values and their cumulative counts, interpolated as numpy's "linear" method does.

A column with more than MAX_DISTINCT distinct values is not merged further (its counts would be as large as the
rows): it is left out of `by_metadata` and named in `set_aside`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import pandas as pd

from erroranalysis.core import counted
from erroranalysis.core.errors import DataError, preview
from erroranalysis.metrics import classification as cl
from erroranalysis.sources import cells

MAX_DISTINCT = 1_000_000  # distinct values of one metadata column that a partial keeps counts for
SCALAR, LIST, WORDS = "scalar", "list", "words"  # how a metadata column's rows become values
ROW_SHIFT = 20  # first appearance = global row << ROW_SHIFT | position of the value in the row's list


@dataclass
class ColumnPartial:
    """One metadata column's counts over some rows. `values`: value, n, first (its first appearance); `triples`:
    value, t, p, n; `missing`: [k * k] confusion counts of the rows without a value; the dtype flags of the
    rows' pandas values (a whole column's dtype is numeric, boolean or float only when every block's is)."""

    kind: str
    values: pd.DataFrame | None
    triples: pd.DataFrame | None
    missing: np.ndarray
    numeric: bool
    boolean: bool
    floating: bool
    distinct: int = 0  # > MAX_DISTINCT: set aside, `values` and `triples` dropped


@dataclass
class Partial:
    """Every count `finish` needs, over some rows; `unknown` holds label values not in labels (value: first row)."""

    k: int
    n: int = 0
    cm: np.ndarray | None = None
    bins: np.ndarray | None = None  # [n_bins] rows per calibration bin
    correct: np.ndarray | None = None  # [n_bins] rows whose arg-max is the true class
    conf_sums: list | None = None  # [n_bins] exact sums of the confidence
    brier: Fraction | None = None
    bad_probs_row: int | None = None
    columns: dict[str, ColumnPartial] = field(default_factory=dict)
    unknown: dict[str, dict] = field(default_factory=lambda: {"y_true": {}, "y_pred": {}})


def encode_block(values, labels: Sequence[str], name: str, offset: int, unknown: dict) -> np.ndarray | None:
    """Codes of a block's label values in `labels` order, or None when some are not in labels (recorded in
    `unknown` with their first row, so the merged error names them all, as `encode_labels` does)."""
    codes, uniques = pd.factorize(np.asarray(values, dtype=object).ravel())
    position = {label: i for i, label in enumerate(labels)}
    names = [str(u) for u in uniques]
    if (codes < 0).any():
        raise DataError(f"{name} has a missing label at index {offset + int(np.flatnonzero(codes < 0)[0])}; "
                        "every example needs a label.")
    missing = [i for i, u in enumerate(names) if u not in position]
    if missing:
        first = np.full(len(names), -1)
        first[codes[::-1]] = np.arange(len(codes))[::-1]
        unknown.update({names[i]: offset + int(first[i]) for i in missing if names[i] not in unknown})
        return None
    return np.array([position[u] for u in names], dtype=np.int64)[codes]


def block_partial(y_true, y_pred, labels: Sequence[str], probs=None, metadata: pd.DataFrame | None = None,
                  texts=None, *, kinds: dict[str, str] | None = None, offset: int = 0, n_bins: int = 15) -> Partial:
    """The counts of one block of rows (rows `offset`.. of the whole). `kinds` says which metadata columns are list
    columns (LIST) as the whole column's type says; any other is SCALAR."""
    labels = [str(label) for label in labels]
    k = len(labels)
    out = Partial(k)
    t = encode_block(y_true, labels, "y_true", offset, out.unknown["y_true"])
    p = encode_block(y_pred, labels, "y_pred", offset, out.unknown["y_pred"])
    if t is None or p is None:
        return out
    out.n, out.cm = len(t), cl.confusion_counts(t, p, k)
    if probs is not None:
        _calibration_counts(out, t, np.asarray(probs), n_bins, offset)
    for column in [] if metadata is None else metadata.columns:
        kind = (kinds or {}).get(column, SCALAR)
        key = f"meta_{column}" if str(column) == "text_length" and texts is not None else str(column)
        out.columns[key] = column_partial(metadata[column], t, p, k, offset, kind)
    if texts is not None:
        out.columns["text_length"] = column_partial(cl.word_counts(texts), t, p, k, offset, WORDS)
    return out


def _calibration_counts(out: Partial, t: np.ndarray, probs: np.ndarray, n_bins: int, offset: int) -> None:
    if probs.ndim != 2 or probs.shape != (len(t), out.k):
        raise DataError(f"probs has shape {probs.shape} in rows {offset}..{offset + len(t)}; expected "
                        f"({len(t)}, {out.k}): one row per example, one column per label in labels order.")
    finite = np.isfinite(probs).all(axis=1)
    if not finite.all():
        out.bad_probs_row = offset + int(np.flatnonzero(~finite)[0])
        return
    confidence, correct = probs.max(axis=1).astype(np.float64), probs.argmax(axis=1) == t
    bin_of = cl.calibration_bin(confidence, n_bins)
    out.bins = np.bincount(bin_of, minlength=n_bins)
    out.correct = np.bincount(bin_of, weights=correct, minlength=n_bins)
    out.conf_sums = counted.binned_exact_sums(bin_of, confidence, n_bins)
    out.brier = cl.brier_sum(t, probs)


def column_partial(values, t: np.ndarray, p: np.ndarray, k: int, offset: int, kind: str) -> ColumnPartial:
    """A column's counts over a block: each value's count and first appearance, each (value, t, p) triple's count,
    the rows without a value by (t, p). A list column counts a row once per distinct value (`cells.explode`)."""
    if kind == LIST:
        rows, series = cells.explode(values)
        position = pd.Series(rows).groupby(rows).cumcount().to_numpy()
    else:
        series = pd.Series(np.asarray(values) if not isinstance(values, pd.Series) else values).reset_index(drop=True)
        rows, position = np.arange(len(series)), np.zeros(len(series), dtype=np.int64)
    codes, uniques = pd.factorize(series)
    pair = t[rows] * k + p[rows]
    absent = codes < 0
    missing = np.bincount(pair[absent], minlength=k * k)
    dtype = series.dtype
    flags = dict(numeric=pd.api.types.is_numeric_dtype(dtype), boolean=pd.api.types.is_bool_dtype(dtype),
                 floating=pd.api.types.is_float_dtype(dtype))
    if len(uniques) > MAX_DISTINCT:
        return ColumnPartial(kind, None, None, missing, distinct=len(uniques), **flags)
    objects = np.asarray(uniques)  # native dtype where there is one: a float is 8 bytes, not a boxed object
    codes, pair, rows, position = codes[~absent], pair[~absent], rows[~absent], position[~absent]
    _, first = np.unique(codes, return_index=True)  # codes number values in order of first appearance
    counts = np.bincount(codes, minlength=len(objects))
    values = pd.DataFrame({"value": objects, "n": counts,
                           "first": ((offset + rows[first]) << ROW_SHIFT) | position[first]})
    cell, n = np.unique(codes * (k * k) + pair, return_counts=True)
    triples = pd.DataFrame({"value": objects[cell // (k * k)], "t": cell // k % k, "p": cell % k, "n": n})
    return ColumnPartial(kind, values, triples, missing, distinct=len(objects), **flags)


def merge(a: Partial, b: Partial) -> Partial:
    """The counts of the rows of `a` and `b` together."""
    out = Partial(a.k, a.n + b.n)
    for name in ("y_true", "y_pred"):
        out.unknown[name] = {**b.unknown[name], **a.unknown[name]}
        out.unknown[name] = {v: min(r for r in (a.unknown[name].get(v), b.unknown[name].get(v)) if r is not None)
                             for v in out.unknown[name]}
    if a.cm is None or b.cm is None:
        out.cm = a.cm if b.cm is None else b.cm
        out.bins, out.correct, out.conf_sums, out.brier = (a.bins, a.correct, a.conf_sums, a.brier) \
            if a.cm is not None else (b.bins, b.correct, b.conf_sums, b.brier)
        out.columns = a.columns if a.cm is not None else b.columns
        out.bad_probs_row = _first(a.bad_probs_row, b.bad_probs_row)
        return out
    out.cm = a.cm + b.cm
    out.bad_probs_row = _first(a.bad_probs_row, b.bad_probs_row)
    if a.bins is not None and b.bins is not None:
        out.bins, out.correct = a.bins + b.bins, a.correct + b.correct
        out.conf_sums = [x + y for x, y in zip(a.conf_sums, b.conf_sums)]
        out.brier = a.brier + b.brier
    out.columns = {key: merge_column(a.columns[key], b.columns[key]) for key in a.columns}
    return out


def _first(*rows):
    present = [r for r in rows if r is not None]
    return min(present) if present else None


def merge_column(a: ColumnPartial, b: ColumnPartial) -> ColumnPartial:
    flags = dict(numeric=a.numeric and b.numeric, boolean=a.boolean and b.boolean, floating=a.floating or b.floating)
    missing = a.missing + b.missing
    if a.values is None or b.values is None:
        return ColumnPartial(a.kind, None, None, missing, distinct=max(a.distinct, b.distinct), **flags)
    values = _regroup(pd.concat([a.values, b.values], ignore_index=True))
    if len(values) > MAX_DISTINCT:
        return ColumnPartial(a.kind, None, None, missing, distinct=len(values), **flags)
    triples = pd.concat([a.triples, b.triples], ignore_index=True)
    triples = triples.groupby(["value", "t", "p"], sort=False, as_index=False)["n"].sum()
    return ColumnPartial(a.kind, values, triples, missing, distinct=len(values), **flags)


def _regroup(values: pd.DataFrame) -> pd.DataFrame:
    return values.groupby("value", sort=False, as_index=False).agg(n=("n", "sum"), first=("first", "min"))


def finish(partial: Partial, labels: Sequence[str], *, n_resamples: int = 1000, seed: int = 0,
           max_metadata_values: int = 20) -> tuple[dict, list[str]]:
    """(metrics.json as `compute_metrics` gives it for all the rows, the metadata columns set aside)."""
    labels = cl.check_labels(labels)
    for name, found in partial.unknown.items():
        if found:
            unknown = sorted(found, key=found.get)
            raise DataError(f"{name} has labels not in labels: {preview(unknown)} (known: {preview(labels)}); "
                            "add them to labels or fix the data.")
    if partial.n == 0:
        raise DataError("y_true is empty: metrics need at least one example.")
    if partial.bad_probs_row is not None:
        raise DataError(f"probs row {partial.bad_probs_row} has NaN or inf; expected probabilities in [0, 1].")
    cm = partial.cm
    acc_ci, f1_ci = cl.bootstrap_intervals(cm, n_resamples, seed) if n_resamples else (None, None)
    result = cl.confusion_summary(cm, labels, acc_ci, f1_ci)
    if partial.bins is not None:
        result["calibration"] = cl.calibration_from_sums(partial.bins, partial.conf_sums, partial.correct,
                                                         partial.brier, partial.n)
        result["overall"]["ece"] = result["calibration"]["ece"]
        result["overall"]["brier"] = result["calibration"]["brier"]
    by_metadata, set_aside = {}, []
    for key, column in partial.columns.items():
        if column.values is None:
            set_aside.append(key)
            continue
        by_metadata[key] = cl.group_rows(*column_cms(column, partial.k, max_metadata_values))
    result["by_metadata"] = by_metadata
    result["bootstrap"] = {"n_resamples": n_resamples, "seed": seed, "level": cl.CI_LEVEL}
    return result, set_aside


def column_cms(column: ColumnPartial, k: int, max_values: int) -> tuple[np.ndarray, list[str]]:
    """The confusion counts [m, k, k] of each bucket of a merged column, and the buckets' names, as
    `bucket_values` chooses them over all rows."""
    values, triples, code_of, names = _buckets(column, max_values)
    m = len(names) + (column.missing.sum() > 0)
    cms = np.zeros((m, k * k), dtype=np.int64)
    codes = pd.Series(code_of, index=pd.Index(values["value"].to_numpy(dtype=object))).reindex(
        triples["value"].to_numpy(dtype=object)).to_numpy(dtype=np.int64)
    np.add.at(cms, (codes, (triples["t"].to_numpy() * k + triples["p"].to_numpy())), triples["n"].to_numpy())
    if column.missing.sum() > 0:
        cms[-1] += column.missing
        names = names + [cl.MISSING]
    return cms.reshape(m, k, k), names


def _buckets(column: ColumnPartial, max_values: int):
    """(values, triples, the bucket of each value, the buckets' names) of a merged column, as `bucket_values`
    chooses them over all rows."""
    values, triples = column.values, column.triples
    if column.numeric and not column.boolean and column.floating and column.kind == SCALAR:
        # int blocks beside float ones: pandas reads the whole column as floats (an int column with missing cells)
        values = _regroup(values.assign(value=values["value"].astype(np.float64)))
        triples = triples.assign(value=triples["value"].astype(np.float64))
    code_of, names = _quantile_codes(values) if _quantiles(column, values) else _top_codes(values, max_values,
                                                                                           column.numeric)
    return values, triples, code_of, names


def _quantiles(column: ColumnPartial, values: pd.DataFrame) -> bool:
    return column.kind == WORDS or (column.kind == SCALAR and column.numeric and not column.boolean
                                    and len(values) > 2 * cl.QUANTILE_BUCKETS)


def bucket_rule(column: ColumnPartial, max_values: int) -> tuple[tuple, list[str]]:
    """How a block puts its rows' values of a merged column in buckets, without the values: ("edges", quantile
    edges) or ("top", the kept values in bucket order; any other value is "(other)"); and the buckets' names,
    "(missing)" last where the column has missing cells (the bucket after the others)."""
    values, _, code_of, names = _buckets(column, max_values)
    if _quantiles(column, values):
        x = np.sort(values["value"].to_numpy(dtype=np.float64))
        counts = values["n"].to_numpy()[np.argsort(values["value"].to_numpy(dtype=np.float64), kind="stable")]
        edges = np.unique(counted.quantiles(x, counts, np.linspace(0, 1, cl.QUANTILE_BUCKETS + 1))) if x.size \
            else np.zeros(0)
        rule = ("edges", edges)
    else:
        kept = np.flatnonzero(code_of < len(names) - (len(values) > max_values))
        rule = ("top", values["value"].to_numpy(dtype=object)[kept[np.argsort(code_of[kept], kind="stable")]])
    return rule, names + ([cl.MISSING] if column.missing.sum() > 0 else [])


def rule_codes(rule: tuple, values, n_names: int) -> np.ndarray:
    """The bucket of each value under `bucket_rule` (a missing value: the last, "(missing)")."""
    series = pd.Series(values).reset_index(drop=True)
    missing = series.isna().to_numpy()
    if rule[0] == "edges":
        edges = rule[1]
        x = series.to_numpy(dtype=np.float64, na_value=np.nan)
        codes = np.clip(np.searchsorted(edges, x, side="left") - 1, 0, max(len(edges) - 2, 0))
    else:
        kept = rule[1]
        codes = pd.Index(kept, dtype=object).get_indexer(series.astype(object))
        codes = np.where(codes < 0, len(kept), codes)
    return np.where(missing, n_names - 1, codes).astype(np.int64)


def _top_codes(values: pd.DataFrame, max_values: int, numeric: bool) -> tuple[np.ndarray, list[str]]:
    """`_top_values` over counts: the most frequent values, ties in order of first appearance, numbers in their
    order; the rest as "(other)"."""
    counts, first = values["n"].to_numpy(), values["first"].to_numpy()
    kept = np.lexsort((first, -counts))[:max_values]
    if numeric:
        kept = kept[np.argsort(values["value"].to_numpy()[kept], kind="stable")]
    code_of = np.full(len(values), len(kept), dtype=np.int64)
    code_of[kept] = np.arange(len(kept))
    objects = values["value"].to_numpy(dtype=object)
    names = [str(objects[i]) for i in kept] + ([cl.OTHER] if len(values) > max_values else [])
    return code_of, names


def _quantile_codes(values: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """`_quantile_buckets` over counts: the edges are np.quantile of the rows' values, computed from the sorted
    distinct values and their cumulative counts."""
    x = values["value"].to_numpy(dtype=np.float64)
    if x.size == 0:
        return np.zeros(0, dtype=np.int64), []
    order = np.argsort(x, kind="stable")
    edges = np.unique(counted.quantiles(x[order], values["n"].to_numpy()[order],
                                        np.linspace(0, 1, cl.QUANTILE_BUCKETS + 1)))
    codes = np.clip(np.searchsorted(edges, x, side="left") - 1, 0, max(len(edges) - 2, 0))
    if len(edges) == 1:
        return codes, [cl.format_edge(edges[0])]
    names = [f"{'[' if i == 0 else '('}{cl.format_edge(edges[i])}, {cl.format_edge(edges[i + 1])}]" for i in range(len(edges) - 1)]
    return codes, names


