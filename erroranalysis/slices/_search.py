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

Everything here is a pure function over arrays and DataFrames; `erroranalysis.stages.slices_run` reads and writes the
run directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from erroranalysis.core.errors import DataError
from erroranalysis.core.schemas import SLICE_MEMBERS, SLICES
from erroranalysis.slices._candidate import Candidate, EmbedFn
from erroranalysis.slices._conjunctions import conjunction_candidates, needs_merge, search_conjunctions
from erroranalysis.slices._features import KIND_ORDER, Features, default_min_support
from erroranalysis.slices._merge import merge_pool, merge_words
from erroranalysis.slices._params import SearchParams
from erroranalysis.slices._prune import describe_conjunct, prune_slices
from erroranalysis.slices._stats import adjust_pvalues, binomial_pvalues, sliceline_score


@dataclass
class SliceResult:
    """What `find_slices` found.

    slices: one row per slice, best first (`erroranalysis.core.schemas.SLICES`): slice_id (rank, 0 = best), description, features
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
    return pd.DataFrame({c: pd.Series(dtype=SLICES.dtypes[c]) for c in SLICES.columns})


def empty_members(id_dtype="object") -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=id_dtype if c == "example_id" else SLICE_MEMBERS.dtypes[c])
                         for c in SLICE_MEMBERS.columns})


def find_slices(
    features: Features,
    correct: Sequence[bool],
    *,
    example_ids: Sequence | None = None,
    embed_fn: EmbedFn | None = None,
    params: SearchParams = SearchParams(),
    **values,
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
    so merging chance words does not make them significant. A merged group whose two halves each stand out alone
    stays one slice only when the median cosine between their words reaches `concept_threshold` (two concepts
    that both fail are two slices). A slice mostly (`max_overlap`) inside a better one is
    pruned unless significantly more erroneous, and one whose failures other slices explain is pruned; pruning
    weighs the `max_pruned` best single features that may be reported (every engine the same). Returns at most
    `top_k` slices.
    """
    search = params.replace(**values) if values else params  # checked when built (SearchParams)
    n = features.n_examples
    min_support = default_min_support(n) if search.min_support is None else int(search.min_support)
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

    nothing = nothing_to_slice(n, n_failures, min_support, len(features))
    if nothing:
        messages.append(nothing)
        return result()
    X = features.matrix.tocsc().astype(np.int32)
    failed = (~correct_arr).astype(np.int64)
    support = np.asarray(X.sum(axis=0)).ravel().astype(np.int64)
    fails = np.asarray(X.T @ failed).ravel().astype(np.int64)
    kept, n_tested = search_rows(X, np.ones(n, np.int64), failed, features, support, fails, n, n_failures, search,
                                 embed_fn, messages)
    if not kept:
        return result(n_tested=n_tested)
    return result(*_tables(kept, features, ids, base), n_tested)


def singles(support, fails, n: int, n_failures: int, search: SearchParams) -> _Singles:
    """Each feature's statistics alone, from its support and failures (whole counts, or merged per-block ones)."""
    min_support = default_min_support(n) if search.min_support is None else int(search.min_support)
    return _single_stats(np.asarray(support, np.int64), np.asarray(fails, np.int64), n, n_failures / n,
                         search.alpha, min_support)


def features_read(features: Features, stats: _Singles, n: int, n_failures: int,
                  search: SearchParams) -> np.ndarray:
    """The features whose rows the search reads beyond their counts, sorted: the conjunctions' candidates, the
    words considered for merging, and the `max_pruned` singles that pruning weighs (`pruned_singles`). A bounded
    set, so the distributed engine can bring their distinct rows to the driver (`engines` docs: docs/scale.md)."""
    base = n_failures / n
    read = [pruned_singles(stats, base, search)]
    if search.max_order >= 2 and len(stats.tested) >= 2:
        read.append(conjunction_candidates(stats.tested, stats.score, stats.p, stats.error, base,
                                           search.max_candidates))
    if search.merge:
        text = np.asarray([i for i in stats.tested if features.kinds[i] == "text"], dtype=np.int64)
        if len(text) >= 2:
            read.append(merge_pool(text, stats.score, stats.p, stats.error, base, search.merge_level,
                                   search.max_merge_words))
    return np.unique(np.concatenate(read).astype(np.int64))


def max_pruned(search: SearchParams) -> int:
    """How many single-feature slices pruning weighs at most (it keeps at most 2 * top_k + 10 slices)."""
    return max(200, 10 * search.top_k)


def pruned_singles(stats: _Singles, base: float, search: SearchParams) -> np.ndarray:
    """The singles that may be reported: above the base rate, raw p-value <= level (a corrected one is never
    smaller), `min_score` met; the `max_pruned` best by pruning's order (score, support, p-value, index)."""
    t = stats.tested
    ok = (stats.fails[t] > base * stats.support[t]) & (stats.p[t] <= search.level)
    if search.min_score is not None:
        ok &= stats.score[t] >= search.min_score
    t = t[ok]
    order = np.lexsort((t, stats.p[t], -stats.support[t], -stats.score[t]))
    return np.sort(t[order[:max_pruned(search)]])


def search_rows(X, weight, failed, features: Features, support, fails, n: int, n_failures: int,
                search: SearchParams, embed_fn, messages: list[str]):
    """The search after the single features' counts: (kept (candidate, mask over X's rows) best first, n_tested).

    X's rows are the examples (`weight` 1, `failed` 0/1), or the distinct rows of the features the search reads
    (`features_read`) with `weight` examples and `failed` failures each: every count is weighted, so both give
    the same slices. `support` and `fails` are every feature's whole counts; `n`, `n_failures` the examples'."""
    max_order, alpha, top_k, max_candidates, correction, level, merge = (
        search.max_order, search.alpha, search.top_k, search.max_candidates, search.correction, search.level,
        search.merge)
    min_support = default_min_support(n) if search.min_support is None else int(search.min_support)
    base = n_failures / n
    stats = singles(support, fails, n, n_failures, search)
    alone = level / max(len(stats.tested), 1)  # a word (or half a group) "stands out alone" at a single's level
    pools = [(stats.p[stats.tested], [Candidate([[int(i)]], int(stats.support[i]), int(stats.fails[i]),
                                                 float(stats.score[i]), float(stats.p[i])) for i in stats.tested])]
    if max_order >= 2 and len(stats.tested) >= 2:
        groups = np.asarray(pd.factorize(pd.Series(features.groups, dtype=object))[0])
        pools.extend(search_conjunctions(X, weight, failed, stats.tested, stats.support,
                                   stats.fails, stats.score, stats.p, stats.error, groups, n, base, alpha,
                                   min_support, max_order, max_candidates))
    text = [i for i in stats.tested if features.kinds[i] == "text"]
    if merge and len(text) >= 2:
        merged, merge_messages = merge_words(X, weight, failed, text, features, stats.support, stats.fails,
                                              stats.score, stats.p, stats.error, n, base, alpha,
                                              search.merge_threshold, search.merge_level,
                                              search.max_merge_words, embed_fn, alone_level=alone,
                                              concept_threshold=search.concept_threshold)
        messages.extend(merge_messages)
        if merged:
            pools.append((np.array([c.p_raw for c in merged]), merged))
    n_tested = sum(len(p) for p, _ in pools)
    candidates = _significant(pools, correction, level, base, search.min_score)
    candidates = _merged_or_words(candidates, X, weight, failed, stats, base, search.merge_level, alone)
    weighed = set(pruned_singles(stats, base, search).tolist())  # the same bound under every engine
    candidates = [c for c in candidates if c.kind != "single" or c.conjuncts[0][0] in weighed]
    kept = prune_slices(candidates, X, weight, failed, base, min_support, level, search.max_overlap, top_k)
    if not kept:
        messages.append(f"no slice stands out: {n_tested} slices tested, none with an error rate significantly "
                        f"above the base rate {base:.3f} ({correction} correction, level {level}).")
    return kept, n_tested


def nothing_to_slice(n: int, n_failures: int, min_support: int, n_features: int) -> str | None:
    """Why no slice can stand out, or None."""
    if n == 0:
        return "no examples: nothing to slice."
    if n_failures == 0:
        return "no failures: every example is correct, so no slice can stand out."
    if n_failures == n:
        return "every example fails (error rate 1.0): no slice can stand out from the base rate."
    if min_support > n:
        return f"min_support={min_support} is more than the {n} examples: no slice can be large enough."
    if n_features == 0:
        return "no features to slice on (no frequent words, no usable metadata)."
    return None


@dataclass
class _Singles:
    """Per feature: support, failures, SliceLine score, raw p-value, error rate; and the features tested alone."""

    support: np.ndarray
    fails: np.ndarray
    score: np.ndarray
    p: np.ndarray
    error: np.ndarray
    tested: np.ndarray


def _single_stats(support, fails, n: int, base: float, alpha: float, min_support: int) -> _Singles:
    tested = np.flatnonzero((support >= min_support) & (support < n))
    p = np.ones(len(support))
    p[tested] = binomial_pvalues(fails[tested], support[tested], base)
    error = np.divide(fails, support, out=np.zeros(len(support)), where=support > 0)
    return _Singles(support, fails, sliceline_score(support, fails, n, base, alpha), p, error, tested)


def _significant(pools, correction: str, level: float, base: float, min_score) -> list[Candidate]:
    """Candidates whose p-value, corrected over every test of every pool, is <= level, above the base rate."""
    adjusted = adjust_pvalues(np.concatenate([p for p, _ in pools]) if pools else np.zeros(0), correction)
    position, out = 0, []
    for p, cands in pools:
        for j, cand in enumerate(cands):
            if cand is None:
                continue
            cand.p_value = float(adjusted[position + j])
            if (cand.p_value <= level and cand.failures > base * cand.support
                    and (min_score is None or cand.score >= min_score)):
                out.append(cand)
        position += len(p)
    return out


def _merged_or_words(candidates, X, weight, failed, stats: _Singles, base: float, merge_level: float,
                     alone: float) -> list[Candidate]:
    """A significant merged group replaces its words' single slices when it scores at least as well as its best
    word, or when its other words are rare synonyms (`needs_merge`); otherwise it describes the failures worse
    than that word does and is dropped."""
    merged_words: set[int] = set()
    for cand in [c for c in candidates if c.kind == "merged"]:
        words = cand.conjuncts[0]
        if cand.score >= max(stats.score[i] for i in words) or needs_merge(words, X, weight, failed, stats.score,
                                                                           stats.p, base, merge_level, alone):
            merged_words.update(words)
        else:
            candidates.remove(cand)
    return [c for c in candidates if not (c.kind == "single" and c.conjuncts[0][0] in merged_words)]


def _tables(kept, features: Features, ids: np.ndarray, base: float):
    """(slices.parquet, slice_members.parquet) of the kept slices, best first; members row by row (the order the
    distributed engine's shards give)."""
    rows = [np.flatnonzero(mask) for _, mask in kept]
    slice_of = np.concatenate([np.full(len(r), rank, dtype=np.int64) for rank, r in enumerate(rows)])
    rows = np.concatenate(rows)
    order = np.lexsort((slice_of, rows))
    members = pd.DataFrame({"example_id": ids[rows[order]], "slice_id": slice_of[order]})
    return slice_table([cand for cand, _ in kept], features, base), members


def slice_table(kept: list[Candidate], features: Features, base: float) -> pd.DataFrame:
    """slices.parquet: one row per kept slice, best first."""
    rows = []
    for rank, cand in enumerate(kept):
        error_rate = cand.failures / cand.support
        conjuncts = sorted(cand.conjuncts, key=lambda c: (KIND_ORDER.get(features.kinds[c[0]], 9), c[0]))
        rows.append({
            "slice_id": rank, "description": " and ".join(describe_conjunct(c, features) for c in conjuncts),
            "features": ["|".join(features.keys[i] for i in c) for c in conjuncts], "order": len(cand.conjuncts),
            "support": cand.support, "failures": cand.failures, "error_rate": error_rate,
            "lift": error_rate / base - 1.0, "score": cand.score, "p_value": cand.p_value, "p_raw": cand.p_raw,
        })
    slices = pd.DataFrame(rows, columns=list(SLICES.columns))
    return slices.astype({"slice_id": "int64", "order": "int64", "support": "int64", "failures": "int64"})


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
