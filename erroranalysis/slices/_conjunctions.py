"""Conjunctions of two and three features, searched only among promising single features (sparse column
products), each tested against its parts so a conjunction is reported only for evidence of its own.
"""

from __future__ import annotations

import numpy as np

from erroranalysis.slices._candidate import Candidate
from erroranalysis.slices._stats import binomial_pvalues, binomial_vs, sliceline_score


def conjunction_candidates(tested1, score1, p1, err1, base, max_candidates) -> np.ndarray:
    """The singles conjunctions are built from: more erroneous than the base rate, strongest evidence first (the
    p-value weighs error rate and size together, so a small, very erroneous feature is not crowded out by large,
    mildly erroneous ones), at most `max_candidates`."""
    promising = tested1[err1[tested1] > base]
    return promising[np.lexsort((-score1[promising], p1[promising]))[:max_candidates]]


def search_conjunctions(X, weight, failed, tested1, support, fails, score1, p1, err1, groups, n, base, alpha,
                  min_support, max_order, max_candidates):
    """Pairs among the promising singles, then triples extending the best pairs, by sparse column products.

    X's rows are examples, or distinct rows of the features read with `weight` examples and `failed` failures
    each (1 and 0/1 for examples): every count below is weighted by them."""
    cand = conjunction_candidates(tested1, score1, p1, err1, base, max_candidates)
    if len(cand) < 2:
        return []
    C = len(cand)
    Xc = X[:, cand].tocsc()
    Xw = Xc.multiply(weight[:, None]).tocsc()
    Xf = Xc.multiply(failed[:, None]).tocsc()
    S2 = (Xw.T @ Xc).toarray().astype(np.int64)
    F2 = (Xf.T @ Xc).toarray().astype(np.int64)
    gi = groups[cand]
    iu, ju = np.triu_indices(C, 1)
    valid = (gi[iu] != gi[ju]) & (S2[iu, ju] >= min_support)
    iu, ju = iu[valid], ju[valid]
    s2, f2 = S2[iu, ju], F2[iu, ju]
    sc2 = sliceline_score(s2, f2, n, base, alpha)
    err_c = err1[cand]
    # A conjunction must stand out from the base rate AND from each parent (intersection-union test: the largest
    # of the p-values), or `w7 and long` would be reported beside `w7` for chance differences inside `w7`.
    p2 = np.maximum.reduce([binomial_pvalues(f2, s2, base), binomial_vs(f2, s2, err_c[iu]),
                            binomial_vs(f2, s2, err_c[ju])])
    with np.errstate(divide="ignore", invalid="ignore"):
        e2 = f2 / s2
    improves2 = (e2 > np.maximum(err_c[iu], err_c[ju])) & (s2 < np.minimum(support[cand][iu], support[cand][ju]))
    pairs = [(Candidate([[int(cand[a])], [int(cand[b])]], int(s), int(f), float(sc), float(p), kind="pair")
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
    Pm = Xw[:, A].multiply(Xc[:, B]).tocsc()
    Pf = Xf[:, A].multiply(Xc[:, B]).tocsc()
    S3 = (Pm.T @ Xc).toarray().astype(np.int64)
    F3 = (Pf.T @ Xc).toarray().astype(np.int64)
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
    p3 = np.maximum.reduce([binomial_pvalues(f3, s3, base), binomial_vs(f3, s3, exy), binomial_vs(f3, s3, exz),
                            binomial_vs(f3, s3, eyz)])
    best_pair = np.maximum(np.maximum(exy, exz), eyz)
    smallest_pair = np.minimum(np.minimum(S2[x, y], S2[x, z]), S2[y, z])
    improves3 = (e3 > best_pair) & (s3 < smallest_pair)
    triples = [(Candidate([[int(cand[u])], [int(cand[v])], [int(cand[w])]], int(s), int(f), float(sc), float(p),
                           kind="triple") if good3 else None)
               for u, v, w, s, f, sc, p, good3 in zip(x, y, z, s3, f3, sc3, p3, improves3)]
    out.append((p3, triples))
    return out


def needs_merge(words, X, weight, failed, score1, p1, base, merge_level, alone) -> bool:
    """A group's words other than its best are too rare to stand out alone (raw p-value above `alone`, the level a
    single word is reported at) and yet, on the examples the best word does not hold, fail more than the base rate
    (p <= `merge_level`): rare synonyms that need the merge to be seen."""
    best = max(words, key=lambda i: score1[i])
    rest = [i for i in words if i != best]
    if any(p1[i] <= alone for i in rest):
        return False
    rows = X.shape[0]
    inside = np.zeros(rows, dtype=bool)
    for i in rest:
        inside |= _column(X, i, rows)
    inside &= ~_column(X, best, rows)
    return bool(binomial_pvalues([int(failed[inside].sum())], [int(weight[inside].sum())], base)[0] <= merge_level)


def _column(X, i: int, n: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[X.indices[X.indptr[i]:X.indptr[i + 1]]] = True
    return mask


def candidate_mask(cand: Candidate, X) -> np.ndarray:
    """The rows of X in the candidate slice."""
    n = X.shape[0]
    mask = np.ones(n, dtype=bool)
    for conjunct in cand.conjuncts:
        part = np.zeros(n, dtype=bool)
        for i in conjunct:
            part |= _column(X, i, n)
        mask &= part
    return mask
