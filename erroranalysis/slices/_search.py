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

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from erroranalysis.errors import DataError
from erroranalysis.slices._candidate import EmbedFn, _Candidate
from erroranalysis.slices._features import _KIND_ORDER, Features, default_min_support
from erroranalysis.slices._merge import _merge_words
from erroranalysis.slices._stats import CORRECTIONS, _binomial_vs, adjust_pvalues, binomial_pvalues, sliceline_score
from erroranalysis.validation import check_param

SLICE_COLUMNS = ["slice_id", "description", "features", "order", "support", "failures", "error_rate", "lift",
                 "score", "p_value", "p_raw"]


MEMBER_COLUMNS = ["example_id", "slice_id"]


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
            # a word or half of a group "stands out alone" at the level a single word is reported at (Bonferroni)
            merged, merge_messages = _merge_words(X, failed, text, features, support, fails, score1, p1, err1, n,
                                                  base, alpha, merge_threshold, merge_level, max_merge_words,
                                                  embed_fn, alone_level=level / max(len(tested1), 1))
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
    # word, or when its other words are rare synonyms (`_needs_merge`); otherwise it describes the failures worse
    # than that word does and is dropped.
    alone = level / max(len(tested1), 1)
    for cand in [c for c in candidates if c.kind == "merged"]:
        words = cand.conjuncts[0]
        if cand.score >= max(score1[i] for i in words) or _needs_merge(words, X, failed, n, score1, p1, base,
                                                                      merge_level, alone):
            merged_words.update(words)
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


def _needs_merge(words, X, failed, n, score1, p1, base, merge_level, alone) -> bool:
    """A group's words other than its best are too rare to stand out alone (raw p-value above `alone`, the level a
    single word is reported at) and yet, on the examples the best word does not hold, fail more than the base rate
    (p <= `merge_level`): rare synonyms that need the merge to be seen."""
    best = max(words, key=lambda i: score1[i])
    rest = [i for i in words if i != best]
    if any(p1[i] <= alone for i in rest):
        return False
    inside = np.zeros(n, dtype=bool)
    for i in rest:
        inside |= _column(X, i, n)
    inside &= ~_column(X, best, n)
    return bool(binomial_pvalues([int(failed[inside].sum())], [int(inside.sum())], base)[0] <= merge_level)


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


def slice_groups(slices: pd.DataFrame, members: pd.DataFrame, *, example_ids=None, min_lift: float = 1.0,
                 max_p_value: float = 0.05, label_only: bool = False, join_labels: bool = True) -> dict:
    """Map each example in a strong slice to the best such slice: {example_id: slice_id}.

    A slice is strong when its error rate is at least (1 + min_lift) times the base rate and its corrected p-value
    is <= max_p_value; slices rank by score (slice_id 0 is best), so an example in several strong slices goes to
    the best. example_ids: restrict to these examples (the failures, for clustering). Slices defined by the true
    label alone (`label == "sport"`) are left out unless `label_only`: the per-class metrics already show them,
    and grouping a class's failures together would hide the error types inside it. With `join_labels`, strong
    slices that differ only in their `label == ...` conjunct (`"weather" and label == "a"`, `"weather" and label ==
    "b"`, `"weather"`) are one group, under the id of the one with the fewest label conjuncts (then the best): one
    concept misread in two directions is one error type whose confusions show both (`group_titles` names it).
    Feed the result to `clustering.FailureClustering.fit(groups=...)` to group a slice's failures together.
    """
    strong = _strong(slices, min_lift, max_p_value, label_only)
    if strong is None or members is None or not len(members):
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
    if join_labels:
        m["slice_id"] = m["slice_id"].map(_label_joins(strong))
    return dict(zip(m["example_id"].tolist(), m["slice_id"].astype(int).tolist()))


def group_titles(slices: pd.DataFrame, *, min_lift: float = 1.0, max_p_value: float = 0.05,
                 label_only: bool = False) -> dict[int, str]:
    """{slice_id: what its group of `slice_groups` (same parameters, `join_labels`) is}: the slice's description,
    or, for a group joined over labels without a label-free slice, the shared part and the labels
    (`text contains "weather" (label "a" or "b")`)."""
    titles = dict(zip(slices["slice_id"].astype(int), slices["description"].astype(str))) if slices is not None \
        and len(slices) else {}
    strong = _strong(slices, min_lift, max_p_value, label_only)
    if strong is None:
        return titles
    joins = _label_joins(strong)
    by_id = strong.set_index("slice_id")
    for rep in set(joins.values()):
        joined = [s for s, r in joins.items() if r == rep]
        labels = sorted({str(f)[len("label="):] for s in joined for f in by_id.loc[s, "features"]
                         if str(f).startswith("label=")})
        features = list(by_id.loc[rep, "features"])
        parts = str(by_id.loc[rep, "description"]).split(" and ")
        if len(joined) < 2 or len(parts) != len(features) or not any(str(f).startswith("label=") for f in features):
            continue
        shared = [d for d, f in zip(parts, features) if not str(f).startswith("label=")]
        titles[int(rep)] = " and ".join(shared) + " (label " + " or ".join(f'"{x}"' for x in labels) + ")"
    return titles


def _strong(slices, min_lift, max_p_value, label_only):
    """The strong slices (`slice_groups`), or None when there are none."""
    if slices is None or not len(slices):
        return None
    strong = slices[(slices["lift"] >= min_lift) & (slices["p_value"] <= max_p_value)]
    if not label_only and "features" in strong.columns:
        strong = strong[[not all(str(f).startswith("label=") for f in fs) for fs in strong["features"]]]
    return strong if len(strong) else None


def _label_joins(strong: pd.DataFrame) -> dict[int, int]:
    """{slice_id: the id its group goes by}: slices with the same conjuncts once `label=` ones are set aside share
    the id of the one with the fewest label conjuncts, then the best ranked."""
    if "features" not in strong.columns:
        return {int(s): int(s) for s in strong["slice_id"]}
    keys: dict[tuple, list[tuple[int, int]]] = {}
    for sid, features in zip(strong["slice_id"].astype(int), strong["features"]):
        rest = tuple(sorted(str(f) for f in features if not str(f).startswith("label=")))
        keys.setdefault(rest, []).append((len(features) - len(rest), sid))
    return {sid: min(group)[1] for group in keys.values() for _, sid in group}
