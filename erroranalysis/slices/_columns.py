"""Non-text features from value counts, so that both engines decide them by one implementation.

A column (a metadata column, the label, the text length in words) is summarized as its distinct values in order of
first appearance and the rows holding each (`summarize`); summaries of consecutive blocks merge in row order into
the whole column's (`merge`); the features are decided from a summary alone (`column_rules`: categories, quantile
buckets, list values) as `Rule`s, which `rule_rows` applies to any rows. The in-process engine summarizes the whole
column as one block; the distributed one merges its blocks' summaries on the driver, which then holds distinct
values, never rows. Quantiles come from the counts exactly as `np.quantile` (linear) computes them from the rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from erroranalysis.core import counted
from erroranalysis.sources import cells

# A merged summary keeps at most this many distinct values (the driver's memory stays bounded at any row count):
# past it, a numeric column keeps MAX_VALUES values at evenly spaced ranks (its quantile buckets are then within
# n / MAX_VALUES ranks of the exact ones) and another column is skipped as an id or free text. One block of the
# in-process engine is never cut (`merge` alone applies it).
MAX_VALUES = 100_000


@dataclass
class Values:
    """A column's distinct values (`uniques`, object array, first appearance first) and the rows holding each
    (`counts`); `missing` rows hold none. `kind`: "scalar", "list" (values are list items), "unhashable" (lists or
    dicts that are not a list column), "empty" (no value at all). `dtype`: the pandas dtype kind of the column
    (`b`, `i`, `u`, `f`, `O`...). `cut`: the summary exceeded MAX_VALUES when merged (`merge`)."""

    uniques: np.ndarray
    counts: np.ndarray
    missing: int
    n: int
    kind: str
    dtype: str
    cut: bool = False

    @property
    def is_bool(self) -> bool:
        return self.dtype == "b"

    @property
    def is_numeric(self) -> bool:
        return self.dtype in ("i", "u", "f")

    @property
    def n_present(self) -> int:
        return self.n - self.missing


def summarize(values: pd.Series, *, lists: bool = True) -> Values:
    """The summary of one column's rows (`lists`: a column whose cells are lists is summarized by list item)."""
    values = values.reset_index(drop=True)
    n, dtype = len(values), values.dtype.kind
    if lists and cells.is_list_column(values):
        rows, items = cells.explode(values)
        codes, uniques = items.factorize(use_na_sentinel=True)
        counts = np.bincount(codes[codes >= 0], minlength=len(uniques)).astype(np.int64)
        return Values(np.asarray(uniques, dtype=object), counts, int((codes < 0).sum()), n, "list", dtype)
    present = values.notna().to_numpy()
    try:
        codes, uniques = pd.factorize(values.astype(object).where(present, None), use_na_sentinel=True)
    except TypeError:
        return Values(np.zeros(0, object), np.zeros(0, np.int64), 0, n, "unhashable", dtype)
    counts = np.bincount(codes[codes >= 0], minlength=len(uniques)).astype(np.int64)
    kind = "scalar" if len(uniques) else "empty"
    return Values(np.asarray(uniques, dtype=object), counts, int((codes < 0).sum()), n, kind, dtype)


def merge(parts: list[Values]) -> Values:
    """The summary of consecutive blocks given in row order (first appearance stays first)."""
    parts = [p for p in parts if p is not None]
    n = sum(p.n for p in parts)
    kinds = [p.kind for p in parts if p.kind != "empty"]
    kind = kinds[0] if kinds else "empty"
    if any(k != kind for k in kinds):  # lists in some blocks, scalars in others
        kind = "unhashable"
    dtypes = {p.dtype for p in parts}
    dtype = parts[0].dtype if len(dtypes) == 1 else ("f" if dtypes <= set("iuf") else "O")
    if kind in ("unhashable", "empty"):
        return Values(np.zeros(0, object), np.zeros(0, np.int64), sum(p.missing for p in parts), n, kind, dtype)
    uniques = [p.uniques for p in parts]
    if dtype == "f":  # an integer block beside a float one (a missing value elsewhere): pandas reads floats
        uniques = [np.asarray([float(v) for v in u], dtype=object) for u in uniques]
    codes, merged = pd.factorize(np.concatenate(uniques) if uniques else np.zeros(0, object))
    counts = np.bincount(codes, weights=np.concatenate([p.counts for p in parts]),
                         minlength=len(merged)).astype(np.int64)
    out = Values(np.asarray(merged, dtype=object), counts, sum(p.missing for p in parts), n, kind, dtype)
    return _cut(out) if len(merged) > MAX_VALUES else out


def _cut(values: Values) -> Values:
    """At most MAX_VALUES values: a numeric column's values at evenly spaced ranks (each carrying the rows up to
    the next), another column's none (it is then skipped)."""
    if not values.is_numeric:
        return Values(np.zeros(0, object), np.zeros(0, np.int64), values.missing, values.n, values.kind,
                      values.dtype, cut=True)
    x = np.asarray(values.uniques, dtype=float)
    order = np.argsort(x, kind="stable")
    x, c = x[order], values.counts[order]
    ends = np.cumsum(c)
    picks = np.unique(np.searchsorted(ends, np.linspace(0, ends[-1] - 1, MAX_VALUES), side="right"))
    kept = np.diff(np.concatenate([[0], ends[picks]]))
    return Values(x[picks].astype(object), kept.astype(np.int64), values.missing, values.n, values.kind,
                  values.dtype, cut=True)


@dataclass(frozen=True)
class Rule:
    """Which rows a non-text feature holds: `op` over the column's value (`lt`, `ge`, `range` [lo, hi) over
    finite numbers; `missing` (numeric: not finite); `eq` value; `absent` (categorical: missing); `has` a list item;
    `none` (no list item); `true`)."""

    op: str
    args: tuple = ()


def _fmt(value: float) -> str:
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.4g}"


def _show(value) -> str:
    if isinstance(value, np.generic):
        value = value.item()
    return repr(value)


def numeric_rules(values: Values, key: str, label: str, group: str, kind: str, n_buckets: int, emit,
                  messages: list[str], unit: str = "") -> None:
    """Quantile buckets and thresholds of a numeric column; `emit(support, rule, key, description, group, kind)`."""
    x = np.asarray(values.uniques, dtype=float)
    finite = np.isfinite(x)  # NaN and +-inf count as missing
    x, c = x[finite], values.counts[finite]
    if not len(x) or np.all(x == x[0]):
        messages.append(f"{label} skipped: it has one value.")
        return
    order = np.argsort(x, kind="stable")
    x, c = x[order], c[order]
    edges = np.unique(counted.quantiles(x, c, np.linspace(0, 1, n_buckets + 1)))
    cuts = edges[1:-1] if len(edges) > 2 else edges[1:]  # interior cut points
    cuts = cuts[cuts > x.min()]
    below = lambda v: int(c[x < v].sum())  # noqa: E731
    for cut in cuts:
        emit(below(cut), Rule("lt", (float(cut),)), f"{key}:<{_fmt(cut)}", f"{label} < {_fmt(cut)}{unit}", group,
             kind)
        emit(int(c.sum()) - below(cut), Rule("ge", (float(cut),)), f"{key}:>={_fmt(cut)}",
             f"{label} >= {_fmt(cut)}{unit}", group, kind)
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        emit(below(hi) - below(lo), Rule("range", (float(lo), float(hi))), f"{key}:[{_fmt(lo)},{_fmt(hi)})",
             f"{label} in [{_fmt(lo)}, {_fmt(hi)}){unit}", group, kind)
    missing = values.n - int(c.sum())
    if missing:
        emit(missing, Rule("missing"), f"{key}:missing", f"{label} is missing", group, kind)


def categorical_rules(values: Values, key: str, label: str, group: str, kind: str, min_support: int, emit,
                      messages: list[str]) -> None:
    """One feature per value held by at least `min_support` rows, and one for the missing ones."""
    uniques, counts = values.uniques, values.counts
    if len(uniques) + int(values.missing > 0) <= 1:
        shown = _show(uniques[0]) if len(uniques) else "missing"
        messages.append(f"{label} skipped: it has one value ({shown}).")
        return
    for value, count in zip(uniques, counts):
        if count < min_support:
            continue
        shown = f'"{value}"' if isinstance(value, str) else str(value)
        emit(int(count), Rule("eq", (value,)), f"{key}={value}", f"{label} == {shown}", group, kind)
    if values.missing >= min_support:
        emit(values.missing, Rule("absent"), f"{key}=<missing>", f"{label} is missing", group, kind)
    if counts.max(initial=0) < min_support and values.missing < min_support:
        messages.append(f"{label}: no value occurs in at least {min_support} examples; no feature from it.")


def list_rules(values: Values, name: str, min_support: int, emit, messages: list[str]) -> None:
    """A list column (tags, sources): one feature per value held by at least `min_support` rows (and not by all),
    most held first, and one for the rows holding none. The values of a row are not exclusive, so each value is its
    own group: "tags contains x and tags contains y" is a conjunction the search may find."""
    counts = values.counts
    useful = (counts >= min_support) & (counts < values.n)
    for i in np.argsort(-counts, kind="stable"):
        if useful[i]:
            key = f"meta:{name}={values.uniques[i]}"
            emit(int(counts[i]), Rule("has", (values.uniques[i],)), key, f'{name} contains "{values.uniques[i]}"',
                 key, "metadata")
    if values.missing >= min_support:
        emit(values.missing, Rule("none"), f"meta:{name}=<none>", f"{name} is empty", f"meta:{name}=<none>",
             "metadata")
    if not useful.any():
        why = "every row holds the same values" if values.n and counts.max(initial=0) == values.n else \
            f"no value occurs in at least {min_support} examples"
        messages.append(f"metadata column {name!r} skipped: {why}.")


def metadata_rules(values: Values, name: str, n_buckets: int, max_categories: int, min_support: int, emit,
                   messages: list[str]) -> None:
    """A metadata column's features: list values, numeric buckets (more than `max_categories` numbers), or
    categories; none, with a message, for one value, every value unique, or lists of lists and dicts."""
    label = f"metadata column {name!r}"
    if values.kind == "list":
        list_rules(values, name, min_support, emit, messages)
        return
    if values.kind == "unhashable":
        messages.append(f"{label} skipped: its values are lists or dicts, not categories or numbers.")
        return
    if values.cut and not values.is_numeric:
        messages.append(f"{label} skipped: more than {MAX_VALUES} distinct values (an id or free text?).")
        return
    n_unique, n_present = len(values.uniques), values.n_present
    if n_unique + int(n_present < values.n) <= 1:
        shown = _show(values.uniques[0]) if n_present else "missing"
        messages.append(f"{label} skipped: it has one value ({shown}).")
        return
    if values.is_numeric and not values.is_bool and (n_unique > max_categories or values.cut):
        if values.cut:
            messages.append(f"{label}: more than {MAX_VALUES} distinct values; its buckets are cut at quantiles "
                            f"of {MAX_VALUES} values at evenly spaced ranks.")
        numeric_rules(values, f"meta:{name}", name, f"meta:{name}", "metadata", n_buckets, emit, messages)
        return
    if not values.is_numeric and n_unique == n_present > 1:
        messages.append(f"{label} skipped: every value is unique (an id or free text?).")
        return
    categorical_rules(values, f"meta:{name}", name, f"meta:{name}", "metadata", min_support, emit, messages)


def rule_rows(rules: list[Rule], values: pd.Series, *, numeric: bool) -> list[np.ndarray]:
    """The row indices (int32) each rule holds in `values` (a column's rows; `numeric`: read as numbers).
    Values are matched as `summarize` counted them (pandas' factorize)."""
    values = values.reset_index(drop=True)
    out = []
    x = present = codes = index = rows = None
    for rule in rules:
        if rule.op in ("has", "none", "eq", "absent") and codes is None:
            if rule.op in ("has", "none"):
                rows, items = cells.explode(values)
                codes, uniques = items.factorize(use_na_sentinel=True)
            else:
                codes, uniques = pd.factorize(values.astype(object).where(values.notna(), None),
                                              use_na_sentinel=True)
            index = pd.Index(uniques, dtype=object)
        if rule.op in ("lt", "ge", "range", "missing") and x is None:
            x = values.to_numpy(dtype=float, na_value=np.nan)
            present = np.isfinite(x)
        if rule.op in ("eq", "has"):
            code = int(index.get_indexer([rule.args[0]])[0])
            mask = codes == code if code >= 0 else np.zeros(len(codes), bool)
        elif rule.op in ("absent", "none"):
            mask = codes < 0
        elif rule.op == "lt":
            mask = present & (x < rule.args[0])
        elif rule.op == "ge":
            mask = present & (x >= rule.args[0])
        elif rule.op == "range":
            mask = present & (x >= rule.args[0]) & (x < rule.args[1])
        elif rule.op == "missing":
            mask = ~present
        elif rule.op == "true":
            mask = values.fillna(False).astype(bool).to_numpy()
        else:
            raise ValueError(f"unknown rule {rule.op!r}")
        hit = rows[mask] if rule.op in ("has", "none") else np.flatnonzero(mask)
        out.append(np.asarray(hit, dtype=np.int32))
    return out


@dataclass
class Summary:
    """What the non-text features of a set of rows are decided from: `n` rows; `any_text` whether a text is not
    blank (None: no texts); the texts' length in words, the label and each metadata column as `Values`;
    `truncated` the rows truncated (None: not known)."""

    n: int
    any_text: bool | None
    length: Values | None
    truncated: int | None
    label: Values | None
    metadata: dict


def word_counts(texts: list[str]) -> pd.Series:
    return pd.Series(np.fromiter((len(t.split()) for t in texts), dtype=float, count=len(texts)))


def summarize_columns(n: int, texts: list[str] | None, metadata: pd.DataFrame | None, labels, truncated) -> Summary:
    """The summary of these rows (texts already cleaned: a string per row)."""
    any_text = None if texts is None else any(t.strip() for t in texts)
    return Summary(
        n, any_text, summarize(word_counts(texts)) if any_text else None,
        None if truncated is None else int(pd.Series(truncated).fillna(False).astype(bool).sum()),
        None if labels is None else summarize(pd.Series(list(labels), dtype=object), lists=False),
        {} if metadata is None else {str(c): summarize(metadata[c]) for c in metadata.columns})


def merge_summaries(parts: list[Summary]) -> Summary:
    """The summary of consecutive blocks of rows given in row order."""
    first = parts[0]
    texts = [p.any_text for p in parts if p.any_text is not None]
    return Summary(
        sum(p.n for p in parts), any(texts) if texts else None,
        merge([p.length for p in parts if p.length is not None]) if any(p.length is not None for p in parts)
        else None,
        None if first.truncated is None else sum(p.truncated for p in parts),
        None if first.label is None else merge([p.label for p in parts]),
        {c: merge([p.metadata[c] for p in parts]) for c in first.metadata})


@dataclass
class Column:
    """The features of one column: where its values come from (`source` "length", "truncated", "label" or
    "metadata" and its `name`), whether they are read as numbers, and one rule per feature."""

    source: str
    name: str
    numeric: bool
    rules: list


def plan_columns(summary: Summary, min_support: int, n_buckets: int, max_categories: int, add,
                 messages: list[str]) -> list[Column]:
    """The non-text features, in extract_features' order (length, truncation, label, metadata): `add(support,
    key, description, group, kind)` is called for each feature kept (held by `min_support` rows to all but one)."""
    n, plans = summary.n, []

    def column(source: str, name: str, numeric: bool, build) -> None:
        plan = Column(source, name, numeric, [])

        def emit(support, rule, key, description, group, kind) -> None:
            if min_support <= support < n:  # too small to report, or every example: no contrast
                plan.rules.append(rule)
                add(support, key, description, group, kind)

        build(emit)
        if plan.rules:
            plans.append(plan)

    if summary.length is not None:
        column("length", "length", True, lambda emit: numeric_rules(
            summary.length, "length", "text length", "length", "length", n_buckets, emit, messages, unit=" words"))
    if summary.truncated is not None:
        count = summary.truncated
        if 0 < count < n:
            column("truncated", "truncated", False,
                   lambda emit: emit(count, Rule("true"), "truncated", "truncated", "truncated", "truncated"))
        elif n:
            messages.append(f"truncation skipped: {'every' if count else 'no'} input was truncated.")
    if summary.label is not None:
        column("label", "label", False, lambda emit: categorical_rules(
            summary.label, "label", "label", "label", "label", min_support, emit, messages))
    for name, values in summary.metadata.items():
        numeric = values.kind == "scalar" and values.is_numeric and (len(values.uniques) > max_categories or values.cut)
        column("metadata", name, numeric, lambda emit, v=values, c=name: metadata_rules(
            v, c, n_buckets, max_categories, min_support, emit, messages))
    return plans


def column_rows(plan: Column, texts, metadata, labels, truncated) -> list[np.ndarray]:
    """The rows each feature of `plan` holds among these rows (the inputs of `summarize_columns`)."""
    if plan.source == "length":
        values = word_counts(texts)
    elif plan.source == "truncated":
        values = pd.Series(truncated)
    elif plan.source == "label":
        values = pd.Series(list(labels), dtype=object)
    else:
        values = metadata[plan.name]
    return rule_rows(plan.rules, values, numeric=plan.numeric)
