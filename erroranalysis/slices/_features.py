"""Interpretable features of examples: word and phrase presence, metadata buckets, length, truncation, the label.

`extract_features` builds a sparse binary matrix [n_examples, n_features] with one description per column.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import scipy.sparse as sp

from erroranalysis.core.errors import DataError
from erroranalysis.slices import _columns as columns

if TYPE_CHECKING:
    from erroranalysis.slices._params import FeatureParams

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
KIND_ORDER = {"text": 0, "label": 1, "metadata": 2, "length": 3, "truncated": 4}


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
    min_support: int | None = None,
    params: FeatureParams | None = None,
    max_text_features: int | None = None,
    phrase_stop_words: bool = True,
    **values,
) -> Features:
    """Build the binary feature matrix the slice search runs over.

    texts: words and phrases of up to `ngram_max` words present in at least `min_support` texts (lowercased,
    CountVectorizer's tokenization), and the text length in words in `n_buckets` quantile buckets.
    metadata: one column per metadata field; strings, booleans and numbers with at most `max_categories` distinct
    values are categorical (one feature per value, plus missing), other numbers are bucketed by quantiles.
    labels: the true label of each example (classification), one feature per class. truncated: whether the input
    was cut. Columns that cannot give a useful feature (one value, every value unique) are skipped with a message
    in `Features.messages`, never an error. `params` (a FeatureParams; keyword values override it): `ngram_max`,
    `n_buckets`, `max_categories`. `min_support` None: `default_min_support(n)`, as the search resolves it.
    """
    from erroranalysis.slices._params import FeatureParams, SearchParams

    params = params if params is not None else FeatureParams()
    params = params.replace(**values) if values else params
    ngram_max, n_buckets, max_categories = params.ngram_max, params.n_buckets, params.max_categories
    SearchParams(min_support=min_support)  # the search's rule for a slice's smallest size
    lengths = [len(x) for x in (texts, metadata, labels, truncated) if x is not None]
    if not lengths:
        raise DataError("extract_features: give texts, metadata, labels or truncated; nothing to build features from.")
    n = lengths[0]
    min_support = default_min_support(n) if min_support is None else int(min_support)
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
    clean = None if texts is None else [t if isinstance(t, str) else "" for t in texts]
    if clean is not None:
        matrix, found = count_terms(clean, min_support=min_support, ngram_max=ngram_max,
                                    phrase_stop_words=phrase_stop_words, max_features=max_text_features)
        if matrix.shape[1]:
            blocks.append(matrix.tocsc())
            keys.extend(f"text:{t}" for t in found)
            descriptions.extend(f'text contains "{t}"' for t in found)
            groups.extend(f"text:{t}" for t in found)
            kinds.extend(["text"] * len(found))
            terms.extend(found)
        text_message(n, bool(matrix.shape[1]), any(t.strip() for t in clean), min_support, messages)

    def add(support, key: str, description: str, group: str, kind: str) -> None:
        keys.append(key)
        descriptions.append(description)
        groups.append(group)
        kinds.append(kind)
        terms.append(None)

    # the non-text features are decided from the columns' value counts (`_columns`), as the distributed engine does
    summary = columns.summarize_columns(n, clean, metadata, labels, truncated)
    for plan in columns.plan_columns(summary, min_support, n_buckets, max_categories, add, messages):
        cols.extend(columns.column_rows(plan, clean, metadata, labels, truncated))

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


def stop_phrase(term: str) -> bool:
    """A phrase that starts or ends with a function word: `count_terms` leaves it out."""
    words = term.split(" ")
    return len(words) > 1 and (words[0] in _STOP_WORDS or words[-1] in _STOP_WORDS)


def text_message(n: int, has_terms: bool, any_text: bool, min_support: int, messages: list[str]) -> None:
    """Why there are no word features, when there are none."""
    if has_terms or not n:
        return
    messages.append("every text is empty: no word or length features." if not any_text else
                    f"no word or phrase occurs in at least {min_support} texts: no word features.")


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
    word_ids, lengths, vocab = _token_ids(texts)
    if not len(word_ids):
        return sp.csr_matrix((n, 0), dtype=np.int32), []
    doc = np.repeat(np.arange(n, dtype=np.int32), lengths)

    # unigrams; frequent words re-numbered 0..k-1 so that phrase codes stay small
    word_df = _document_frequency(doc, word_ids, len(vocab))
    frequent = word_df >= min_support
    n_words = int(frequent.sum())
    # per-token arrays stay int32 (ids < 2**31); only pair codes are int64, while they exist
    word_map = np.full(len(vocab), -1, dtype=np.int32)
    word_map[frequent] = np.arange(n_words, dtype=np.int32)
    word_of = word_map[word_ids]  # per token: its frequent-word id, or -1
    del word_ids
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
        codes = prefix[starts].astype(np.int64) * n_words + last[starts]
        uniq, inverse = _unique_inverse(codes)
        del codes
        df = _document_frequency(doc[starts], inverse, len(uniq))
        keep = df >= min_support
        new_id = np.full(len(uniq), -1, dtype=np.int32)
        new_id[keep] = np.arange(int(keep.sum()), dtype=np.int32)
        next_ids = np.full(len(doc), -1, dtype=np.int32)
        next_ids[starts] = new_id[inverse]
        del inverse, starts
        kept_codes = uniq[keep]
        gram_names = np.array([f"{a} {b}" for a, b in zip(prev_names[kept_codes // n_words],
                                                            vocab_frequent[kept_codes % n_words])], dtype=object)
        names.append(gram_names)
        pairs.append((doc[next_ids >= 0], next_ids[next_ids >= 0]))
        gram_ids, prev_names = next_ids, gram_names

    # Assemble: columns in alphabetical order (CountVectorizer's), optional stop-word and size filters.
    all_names = np.concatenate(names) if names else np.zeros(0, dtype=object)
    offsets = np.cumsum([0] + [len(x) for x in names])
    width = max(len(all_names), 1)
    # each (text, term) once, as one sorted int64 key per pair: no COO triplets, no copies of the matrix
    key = _unique_sorted(np.concatenate([p[0].astype(np.int64) * width + (p[1] + offsets[i])
                                         for i, p in enumerate(pairs)]))
    del pairs
    term_of = key % width

    keep = np.ones(len(all_names), dtype=bool)
    if phrase_stop_words and len(all_names):
        for i in range(offsets[1], len(all_names)):
            keep[i] = not stop_phrase(all_names[i])
    if max_features is not None and keep.sum() > max_features:
        support = np.bincount(term_of, minlength=len(all_names))
        order = np.argsort(-np.where(keep, support, -1), kind="stable")[:max_features]
        keep = np.zeros(len(all_names), dtype=bool)
        keep[order] = True
    order = np.argsort(all_names[keep].astype(str), kind="stable")
    chosen = np.flatnonzero(keep)[order]
    column = np.full(len(all_names), -1, dtype=np.int32)
    column[chosen] = np.arange(len(chosen), dtype=np.int32)
    cols = column[term_of]
    del term_of
    kept = cols >= 0
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(key[kept] // width, minlength=n), out=indptr[1:])
    matrix = sp.csr_matrix((np.ones(int(kept.sum()), np.int32), cols[kept], indptr), shape=(n, len(chosen)))
    matrix.sort_indices()
    return matrix, [str(x) for x in all_names[chosen]]


TOKEN_CHUNK = 8192  # texts tokenized at a time: Python's token strings never exist for the whole eval set


def _token_ids(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token ids int32 in text order, tokens per text, vocabulary) with ids in order of first appearance (what
    `pd.factorize` over every token gives), built `TOKEN_CHUNK` texts at a time so that memory holds 4 bytes per
    token, not a Python string."""
    index: dict[str, int] = {}
    ids, lengths = [], []
    for start in range(0, len(texts), TOKEN_CHUNK):
        tokens = [_TOKEN_PATTERN.findall(t.lower()) for t in texts[start:start + TOKEN_CHUNK]]
        lengths.append(np.fromiter(map(len, tokens), dtype=np.int32, count=len(tokens)))
        flat = list(itertools.chain.from_iterable(tokens))
        if not flat:
            continue
        codes, uniques = pd.factorize(pd.Series(flat, dtype=object))
        known = np.fromiter((index.setdefault(w, len(index)) for w in uniques), dtype=np.int32, count=len(uniques))
        ids.append(known[codes])
    vocab = np.empty(len(index), dtype=object)
    vocab[list(index.values())] = list(index.keys())
    return (np.concatenate(ids) if ids else np.zeros(0, np.int32),
            np.concatenate(lengths) if lengths else np.zeros(0, np.int32), vocab)


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
    ids = np.cumsum(first, dtype=np.int64) - 1
    inverse = np.empty(len(values), dtype=np.int32 if len(values) < 2**31 else np.int64)
    inverse[order] = ids
    return s[first], inverse


def _document_frequency(doc: np.ndarray, term: np.ndarray, n_terms: int) -> np.ndarray:
    pairs = _unique_sorted(doc.astype(np.int64) * n_terms + term)
    return np.bincount(pairs % n_terms, minlength=n_terms)
