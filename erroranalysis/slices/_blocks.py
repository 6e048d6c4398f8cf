"""The slice search over blocks of rows, for the distributed engine: workers count, the driver merges counts.

The driver never holds a row. Four passes over the blocks (each a pure function of one block's rows and small
arguments; `erroranalysis.stages.slices` schedules them with `engines.blocks.map_blocks`):

1. `summarize_block`: the block's column summaries (`_columns.Summary`: each column's distinct values with their
   counts, the texts' lengths in words) and its locally frequent words and phrases. A term held by `min_support` of
   the n texts is held, in at least one block of r rows, by `ceil(min_support * r / n)` of them (else the blocks'
   counts would sum to less), so the union of each block's terms at that local threshold holds every frequent term
   (Savasere, Omiecinski and Navathe's partition method). The driver merges the summaries in row order and decides
   the non-text features from them by the in-process code (`_columns.plan_columns`: exact quantiles from counts).
2. `count_block`: each candidate term's and each non-text feature's examples and failures in the block. The driver
   keeps the terms held by `min_support` texts (and drops phrases with a function word at an end, as
   `count_terms`): the features, their order and their single-feature statistics equal `extract_features`'.
3. `pattern_block`: over the bounded set of features the search reads row by row (`_search.features_read`: the
   conjunctions' candidates, the words considered for merging, the singles pruning weighs), the block's distinct
   rows with the examples and failures each stands for. Merged on the driver, they are the rows the search runs
   over with weights (`_search.search_rows`): the same slices as over every row.
4. `member_rows`: each kept slice's members in the block, row by row, which the worker writes as a shard.

The driver holds per-feature counts, the distinct values of each column (at most `_columns.MAX_VALUES`), the
candidate terms, and the distinct rows of at most a few hundred features: bounded by the data's variety, not its
row count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp

from erroranalysis.core.errors import RunError, preview
from erroranalysis.slices import _columns as columns
from erroranalysis.slices._features import count_terms, stop_phrase


@dataclass(frozen=True)
class Inputs:
    """What a block's rows give the features: texts always; the label, truncation and these metadata columns when
    present. `source` names the file in errors."""

    label: bool
    truncated: bool
    metadata: tuple[str, ...]
    source: str = "predictions.parquet"  # the file, as errors name it

    def columns(self) -> list[str]:
        return ["example_id", "text", "correct", *(["label"] if self.label else []),
                *(["truncated"] if self.truncated else []), *self.metadata]


@dataclass
class Rows:
    """One block's inputs as the features read them."""

    ids: np.ndarray
    texts: list[str]
    failed: np.ndarray
    labels: list | None
    truncated: list | None
    metadata: pd.DataFrame | None


def rows_of(frame: pd.DataFrame, inputs: Inputs, start: int) -> Rows:
    """The block's rows, checked as `rundir.readers.read_units` checks the whole table, with its messages (the
    counts are the block's; `start`, the block's first row, is kept for callers that name rows)."""
    ids, correct = frame["example_id"], frame["correct"]
    if ids.isna().any():
        raise RunError(f"{inputs.source}, column 'example_id': {int(ids.isna().sum())} missing ids; every example "
                       "needs one.")
    if correct.isna().any():
        raise RunError(f"{inputs.source}, column 'correct': {int(correct.isna().sum())} missing values; run the stage "
                       "that writes predictions again.")
    if correct.dtype != bool and not set(np.unique(correct.to_numpy())) <= {0, 1}:
        raise RunError(f"{inputs.source}, column 'correct': values {preview(np.unique(correct.to_numpy())[:3])} are "
                       "not booleans; run the stage that writes predictions again.")
    return Rows(ids.astype(str).to_numpy(dtype=object), [t if isinstance(t, str) else "" for t in frame["text"]],
                ~correct.astype(bool).to_numpy(),
                frame["label"].tolist() if inputs.label else None,
                frame["truncated"].tolist() if inputs.truncated else None,
                frame[list(inputs.metadata)].reset_index(drop=True) if inputs.metadata else None)


def local_support(min_support: int, rows: int, n: int) -> int:
    """The count a term frequent in the whole (`min_support` of `n`) reaches in at least one block of `rows`."""
    return max(1, math.ceil(min_support * rows / n)) if n else 1


@dataclass
class BlockSummary:
    """Pass 1's result for one block."""

    summary: columns.Summary
    terms: list[str]
    failures: int


def summarize_block(rows: Rows, *, n: int, min_support: int, ngram_max: int) -> BlockSummary:
    """Pass 1: the block's column summaries and its terms held by `local_support` of its texts."""
    found: list[str] = []
    if rows.texts:
        _, found = count_terms(rows.texts, min_support=local_support(min_support, len(rows.texts), n),
                               ngram_max=ngram_max, phrase_stop_words=False)
    summary = columns.summarize_columns(len(rows.texts), rows.texts, rows.metadata, rows.labels, rows.truncated)
    return BlockSummary(summary, found, int(rows.failed.sum()))


def term_matrix(texts: list[str], terms: list[str], ngram_max: int) -> sp.csc_matrix:
    """Binary [rows, len(terms)]: which of `terms` (words and phrases) each text holds, as `count_terms` reads
    them."""
    n = len(texts)
    if not terms or not n:
        return sp.csc_matrix((n, len(terms)), dtype=np.int32)
    matrix, found = count_terms(texts, min_support=1, ngram_max=ngram_max, phrase_stop_words=False)
    position = pd.Index(found).get_indexer(terms)
    column_of = np.full(len(found), -1, dtype=np.int64)
    column_of[position[position >= 0]] = np.flatnonzero(position >= 0)
    coo = matrix.tocoo()
    cols = column_of[coo.col]
    keep = cols >= 0
    return sp.csc_matrix((np.ones(int(keep.sum()), np.int32), (coo.row[keep], cols[keep])), shape=(n, len(terms)))


@dataclass(frozen=True)
class Spec:
    """The features as the driver decided them: `terms` (text features, in order), then each `plans` column's
    rules; `ngram_max` as counted."""

    terms: tuple[str, ...]
    plans: tuple
    ngram_max: int

    def __len__(self) -> int:
        return len(self.terms) + sum(len(p.rules) for p in self.plans)

    def subset(self, features) -> Spec:
        """The spec of these feature indices only (sorted), for a pass that needs a few."""
        wanted = set(int(i) for i in features)
        terms = tuple(t for j, t in enumerate(self.terms) if j in wanted)
        plans, offset = [], len(self.terms)
        for plan in self.plans:
            rules = [r for k, r in enumerate(plan.rules) if offset + k in wanted]
            if rules:
                plans.append(columns.Column(plan.source, plan.name, plan.numeric, rules))
            offset += len(plan.rules)
        return Spec(terms, tuple(plans), self.ngram_max)


def feature_matrix(rows: Rows, spec: Spec) -> sp.csc_matrix:
    """Binary [rows, len(spec)]: the block's features, in the spec's order."""
    n = len(rows.texts)
    parts = [term_matrix(rows.texts, list(spec.terms), spec.ngram_max)]
    cols = []
    for plan in spec.plans:
        cols.extend(columns.column_rows(plan, rows.texts, rows.metadata, rows.labels, rows.truncated))
    if cols:
        indptr = np.concatenate([[0], np.cumsum([len(c) for c in cols])])
        indices = np.concatenate(cols)
        parts.append(sp.csc_matrix((np.ones(len(indices), np.int32), indices, indptr), shape=(n, len(cols))))
    matrix = sp.hstack(parts, format="csc", dtype=np.int32) if len(parts) > 1 else parts[0].tocsc()
    matrix.sort_indices()
    return matrix


def count_block(rows: Rows, spec: Spec) -> tuple[np.ndarray, np.ndarray]:
    """Pass 2: each feature's examples and failures in the block."""
    X = feature_matrix(rows, spec)
    return (np.asarray(X.sum(axis=0)).ravel().astype(np.int64),
            np.asarray(X.T @ rows.failed.astype(np.int64)).ravel().astype(np.int64))


def pattern_block(rows: Rows, spec: Spec) -> dict[bytes, list[int]]:
    """Pass 3: the block's distinct rows over the spec's features ({feature positions as int32 bytes: [examples,
    failures]})."""
    X = feature_matrix(rows, spec).tocsr()
    out: dict[bytes, list[int]] = {}
    indptr, indices = X.indptr, X.indices.astype(np.int32)
    for r in range(X.shape[0]):
        key = indices[indptr[r]:indptr[r + 1]].tobytes()
        entry = out.get(key)
        if entry is None:
            out[key] = [1, int(rows.failed[r])]
        else:
            entry[0] += 1
            entry[1] += int(rows.failed[r])
    return out


def merge_patterns(parts, into: dict | None = None) -> dict[bytes, list[int]]:
    """The blocks' distinct rows, summed (into `into` when given)."""
    out: dict[bytes, list[int]] = {} if into is None else into
    for part in parts:
        for key, (count, fails) in part.items():
            entry = out.get(key)
            if entry is None:
                out[key] = [count, fails]
            else:
                entry[0] += count
                entry[1] += fails
    return out


def pattern_matrix(patterns: dict[bytes, list[int]], read: np.ndarray, n_features: int):
    """(X [patterns, n_features] CSC with the `read` features' columns, weight, failures) of merged patterns,
    in sorted key order (so the result does not depend on the order blocks came back in)."""
    keys = sorted(patterns)
    local = [np.frombuffer(k, dtype=np.int32) for k in keys]
    indptr = np.concatenate([[0], np.cumsum([len(x) for x in local])]).astype(np.int64)
    indices = read[np.concatenate(local)] if local and indptr[-1] else np.zeros(0, np.int64)
    X = sp.csr_matrix((np.ones(len(indices), np.int32), indices.astype(np.int32), indptr),
                      shape=(len(keys), n_features)).tocsc()
    X.sort_indices()
    weight = np.asarray([patterns[k][0] for k in keys], dtype=np.int64)
    failed = np.asarray([patterns[k][1] for k in keys], dtype=np.int64)
    return X, weight, failed


def member_rows(rows: Rows, spec: Spec, slices: list[list[list[int]]]) -> pd.DataFrame:
    """Pass 4: (example_id, slice_id) of each kept slice's members in the block, row by row, slices in rank order
    within a row (`slices[k]`: slice k's conjuncts, each a list of positions in `spec`; a conjunct holds a row when
    any of its features does)."""
    X = feature_matrix(rows, spec).tocsc()
    n = X.shape[0]
    row_parts, slice_parts = [], []
    for k, conjuncts in enumerate(slices):
        mask = np.ones(n, dtype=bool)
        for conjunct in conjuncts:
            part = np.zeros(n, dtype=bool)
            for j in conjunct:
                part[X.indices[X.indptr[j]:X.indptr[j + 1]]] = True
            mask &= part
        hit = np.flatnonzero(mask)
        row_parts.append(hit)
        slice_parts.append(np.full(len(hit), k, dtype=np.int64))
    r = np.concatenate(row_parts) if row_parts else np.zeros(0, np.int64)
    s = np.concatenate(slice_parts) if slice_parts else np.zeros(0, np.int64)
    order = np.lexsort((s, r))
    return pd.DataFrame({"example_id": rows.ids[r[order]], "slice_id": s[order]})


@dataclass
class BlockSearch:
    """What `search_blocks` found: the result (members empty: pass 4 writes them), the spec of the features the
    slices use, each kept slice's conjuncts (positions in `spec`), the seconds of the features (passes 1, 2) and of
    the search, and every feature (`Features`, its matrix the distinct rows read) with its examples and failures."""

    result: object
    spec: Spec
    slices: list
    feature_seconds: float
    search_seconds: float
    features: object = None
    support: np.ndarray | None = None
    fails: np.ndarray | None = None


def search_blocks(run_pass, n: int, *, min_support: int, params, embed_fn=None) -> BlockSearch:
    """Passes 1 to 3 and the search between them. `run_pass(fn, ordered, **kwargs)` runs `fn(rows, **kwargs)` on
    every block (`Rows`) and yields the results, in row order when `ordered`; `n` is the rows in all blocks;
    `params` holds the features' and the search's parameters (the stage's SliceParams)."""
    import time

    from erroranalysis.slices._features import Features, text_message
    from erroranalysis.slices._params import FeatureParams, SearchParams
    from erroranalysis.slices._search import (
        SliceResult,
        empty_members,
        empty_slices,
        features_read,
        nothing_to_slice,
        search_rows,
        singles,
        slice_table,
    )

    start = time.perf_counter()
    fparams = params.project(FeatureParams)
    search = params.project(SearchParams).replace(min_support=min_support)
    parts = list(run_pass(summarize_block, True, n=n, min_support=min_support, ngram_max=fparams.ngram_max))
    n_failures = sum(p.failures for p in parts)
    summary = columns.merge_summaries([p.summary for p in parts]) if parts else None
    candidates = sorted(set().union(*(p.terms for p in parts)))
    del parts
    other: list[tuple] = []  # (key, description, group, kind) of each non-text feature
    column_messages: list[str] = []
    plans = [] if summary is None else columns.plan_columns(
        summary, min_support, fparams.n_buckets, fparams.max_categories,
        lambda support, *meta: other.append(meta), column_messages)
    spec = Spec(tuple(candidates), tuple(plans), fparams.ngram_max)
    support, fails = np.zeros(len(spec), np.int64), np.zeros(len(spec), np.int64)
    for s, f in run_pass(count_block, False, spec=spec):
        support += s
        fails += f
    keep = [j for j, t in enumerate(candidates) if support[j] >= min_support and not stop_phrase(t)]
    index = np.concatenate([np.asarray(keep, np.int64), len(candidates) + np.arange(len(other), dtype=np.int64)])
    support, fails = support[index], fails[index]
    terms = [candidates[j] for j in keep]
    spec = Spec(tuple(terms), tuple(plans), fparams.ngram_max)
    messages: list[str] = []
    if summary is not None and summary.any_text is not None:
        text_message(n, bool(terms), summary.any_text, min_support, messages)
    messages.extend(column_messages)
    features = Features(sp.csc_matrix((0, len(spec)), dtype=np.int32),
                        [f"text:{t}" for t in terms] + [m[0] for m in other],
                        [f'text contains "{t}"' for t in terms] + [m[1] for m in other],
                        [f"text:{t}" for t in terms] + [m[2] for m in other],
                        ["text"] * len(terms) + [m[3] for m in other],
                        [*terms, *([None] * len(other))], messages)
    feature_seconds = time.perf_counter() - start
    base = n_failures / n if n else 0.0

    def result(slices=None, n_tested=0):
        return SliceResult(empty_slices() if slices is None else slices, empty_members(object), n, n_failures, base,
                           len(features), n_tested, min_support, messages)

    nothing = nothing_to_slice(n, n_failures, min_support, len(features))
    if nothing:
        messages.append(nothing)
        return BlockSearch(result(), spec, [], feature_seconds, time.perf_counter() - start - feature_seconds,
                           features, support, fails)
    stats = singles(support, fails, n, n_failures, search)
    read = features_read(features, stats, n, n_failures, search)
    patterns: dict[bytes, list[int]] = {}
    for part in run_pass(pattern_block, False, spec=spec.subset(read)):
        merge_patterns([part], into=patterns)
    X, weight, failed = pattern_matrix(patterns, read, len(features))
    del patterns
    features.matrix = X
    kept, n_tested = search_rows(X, weight, failed, features, support, fails, n, n_failures, search, embed_fn,
                                 messages)
    found = result(slice_table([c for c, _ in kept], features, base) if kept else None, n_tested)
    used = sorted({i for c, _ in kept for conjunct in c.conjuncts for i in conjunct})
    position = {g: k for k, g in enumerate(used)}
    slices = [[[position[i] for i in conjunct] for conjunct in c.conjuncts] for c, _ in kept]
    return BlockSearch(found, spec.subset(used), slices, feature_seconds,
                       time.perf_counter() - start - feature_seconds, features, support, fails)
