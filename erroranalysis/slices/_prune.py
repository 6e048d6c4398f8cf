"""Pruning: a slice mostly contained in a higher-scored one, or whose excess errors a higher-scored one explains,
is dropped; the survivors are described in words.
"""

from __future__ import annotations

import numpy as np

from erroranalysis.slices._candidate import Candidate
from erroranalysis.slices._conjunctions import candidate_mask
from erroranalysis.slices._features import Features
from erroranalysis.slices._stats import binomial_pvalues, binomial_vs


def prune_slices(candidates: list[Candidate], X, weight, failed, base, min_support, level, max_overlap, top_k):
    """Keep the slices that say something the better-ranked ones do not, best first.

    A slice mostly (`max_overlap`) inside a kept one is kept only if its error rate is significantly higher
    (a sharper finding: `source == "b" and long` inside `source == "b"`). A slice whose members outside the kept
    slices that do not contain it have an ordinary error rate is explained by them and dropped; after the greedy
    pass this is checked again for every kept slice, so a broad slice kept first (`label == "tech"`) gives way to a
    sharper one found later that explains its failures (`text contains "rain"`). X's rows are examples, or distinct
    rows with `weight` examples and `failed` failures each (`search_conjunctions`); masks are over X's rows.
    """
    n = X.shape[0]
    order = sorted(candidates, key=lambda c: (-c.score, len(c.conjuncts), -c.support, c.p_value))
    kept: list[tuple[Candidate, np.ndarray]] = []  # (candidate, member row indices)

    def size(rows: np.ndarray) -> int:
        return int(weight[rows].sum())

    def elevated(rows: np.ndarray) -> bool:
        if size(rows) < min_support:
            return False
        return binomial_pvalues([int(failed[rows].sum())], [size(rows)], base)[0] <= level

    def explained(rows: np.ndarray, others: list[tuple[Candidate, np.ndarray]]) -> bool:
        covering = np.zeros(n, dtype=bool)
        for _, other in others:
            inter = size(rows[np.isin(rows, other, assume_unique=True)])
            if 0 < inter < max_overlap * size(rows):  # a slice that (mostly) contains this one explains nothing
                covering[other] = True
        if not covering[rows].any():
            return False
        return not elevated(rows[~covering[rows]])

    limit = 2 * top_k + 10
    for cand in order:
        if len(kept) >= limit:
            break
        rows = np.flatnonzero(candidate_mask(cand, X))
        if not len(rows):
            continue
        inside = [k for k, other in kept
                  if size(rows[np.isin(rows, other, assume_unique=True)]) >= max_overlap * size(rows)]
        if any(binomial_vs([cand.failures], [cand.support], [k.failures / k.support])[0] > level for k in inside):
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


def describe_conjunct(conjunct: list[int], features: Features) -> str:
    if len(conjunct) == 1:
        return features.descriptions[conjunct[0]]
    return "text contains " + " | ".join(f'"{features.terms[i]}"' for i in conjunct)
