"""Keywords of clusters: class-based TF-IDF (BERTopic's c-TF-IDF on document frequencies) over words and 2-3 word
phrases, inflections of one stem counted once, near-repeats dropped by maximal marginal relevance.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

TOKEN_PATTERN = r"(?u)\b[^\W\d_][\w'-]*[^\W_]\b"
NGRAMS = (1, 3)  # keyword candidates: words and phrases of up to three words
MAX_CHARS = 5000  # of each text, for keywords: bounds the cost of very long inputs
_POSSESSIVE = re.compile(r"['’]s\b")


def _preprocess(text: str) -> str:
    """Lower-case and drop possessive 's, so "china's" counts as "china"."""
    return _POSSESSIVE.sub("", text.lower())


def _vectorizer(ngram_range=(1, 2), min_df=2):
    from sklearn.feature_extraction.text import CountVectorizer

    return CountVectorizer(stop_words="english", preprocessor=_preprocess, token_pattern=TOKEN_PATTERN,
                           ngram_range=ngram_range, min_df=min_df, binary=True, max_features=100_000)


def class_tfidf(texts: Sequence[str], classes: np.ndarray, *, ngram_range=(1, 2), min_df: int = 2):
    """(terms, class ids, scores [n_classes, n_terms], document counts [n_classes, n_terms]).

    tf = share of a class's documents that contain the term; idf = log(1 + A / f), A = mean documents per
    class, f = documents containing the term over all classes (BERTopic's c-TF-IDF, on document frequencies
    so one long document cannot make a keyword).
    """
    from scipy import sparse

    classes = np.asarray(classes)
    texts = ["" if t is None else str(t)[:MAX_CHARS] for t in texts]
    ids = np.unique(classes)
    vec = _vectorizer(ngram_range, min_df=min_df if len(texts) >= 2 * min_df else 1)
    try:
        counts = vec.fit_transform(texts)
    except ValueError:  # no term survived (empty or stop-word-only texts)
        return np.array([], dtype=object), ids, np.zeros((len(ids), 0)), np.zeros((len(ids), 0))
    terms = vec.get_feature_names_out()
    onehot = sparse.csr_matrix((np.ones(len(classes)), (np.searchsorted(ids, classes), np.arange(len(classes)))),
                               shape=(len(ids), len(classes)))
    df = np.asarray((onehot @ counts).todense(), dtype=np.float64)  # documents per class containing the term
    sizes = np.asarray(onehot.sum(axis=1)).reshape(-1, 1)
    tf = df / np.maximum(sizes, 1)
    idf = np.log(1 + sizes.mean() / np.maximum(df.sum(axis=0), 1))
    return terms, ids, tf * idf, df


# suffixes stripped by `stem`, longest first: enough to make inflections and derivations of one word meet
_KEEP = frozenset({"news", "series"})
_SUFFIXES = ("ations", "ation", "ments", "ment", "ists", "ings", "ical", "ies", "ist", "ics", "ing", "ers", "ed",
             "er", "ic", "es", "s", "y", "e")


def stem(word: str) -> str:
    """A light stemmer for keyword redundancy, one suffix: `economy`, `economic`, `economist`, `economies` ->
    `econom`; `games`, `gaming`, `gamers` -> `gam`. Keeps at least 3 letters, never strips `s` after `s`, `u` or `i`
    (`business`, `virus`, `analysis`) nor `y` after a vowel (`play`)."""
    if word in _KEEP:
        return word
    if word.endswith("men") and len(word) >= 5:  # women, chairmen
        return word[:-3] + "man"
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            before = word[-len(suffix) - 1]
            if (suffix in ("s", "es") and before in "sui") or (suffix == "y" and before in "aeiou"):
                continue
            return word[: -len(suffix)]
    return word


def _stems(term: str) -> frozenset:
    return frozenset(stem(w) for w in term.split())


def same_stem(a: str, b: str) -> bool:
    """One word's stem is the other's, or they share a prefix of at least 5 letters and 80% of the shorter
    (`japan`, `japanese`); `women` and `woman` meet through `stem`."""
    if a == b:
        return True
    k = 0
    for x, y in zip(a, b):
        if x != y:
            break
        k += 1
    return k >= 5 and k >= 0.8 * min(len(a), len(b))


def _covers(a: frozenset, b: frozenset) -> bool:
    """Every stem of `a` has the same stem in `b`."""
    return all(any(same_stem(x, y) for y in b) for x in a)


def _overlap(a: frozenset, b: frozenset) -> float:
    """1 when one term's stems hold the other's (nothing new), else the Jaccard share of stems they have in common."""
    if _covers(a, b) or _covers(b, a):
        return 1.0
    shared = sum(any(same_stem(x, y) for y in b) for x in a)
    return shared / (len(a) + len(b) - shared)


def pick_keywords(terms: np.ndarray, scores: np.ndarray, doc_counts: np.ndarray, n: int, min_docs: int = 2,
                  diversity: float = 0.3, phrase_cover: float = 0.6, n_candidates: int = 60,
                  common: frozenset = frozenset(), contrast: np.ndarray | None = None, size: int = 0,
                  min_lift: float = 2.0) -> tuple[list[str], list[float]]:
    """n distinct keywords by maximal marginal relevance over the best `n_candidates` c-TF-IDF terms.

    A candidate is in at least `min_docs` of the cluster's documents (a phrase in at least 3), has a positive score,
    no repeated word (`goal goal`) and, for a phrase, no word of `common` (words in most documents, `said`: `said
    ministers` is no phrase). With `contrast` (the share of correct examples holding each term) and the cluster's
    `size`, a candidate must be at least `min_lift` times as common in the cluster as among correct examples: a word
    the model also gets right says nothing about the failures. A 2 or 3 word phrase found in at least `phrase_cover`
    of the cluster's documents that hold one of its words takes that word's score (and the word goes: `video games`
    over `games`). Then, in turn, the candidate with the best `(1 - diversity) * score / best score - diversity *
    overlap` is chosen, where overlap is the share of stems it has in common with a chosen keyword (Jaccard); a
    candidate whose stems a chosen one's hold, or that holds them all (`economic`, `oil` after `economy`, `oil
    prices`), is skipped.
    """
    def usable(j) -> bool:
        parts = str(terms[j]).split()
        if scores[j] <= 0 or doc_counts[j] < min_docs or len(set(parts)) < len(parts):
            return False
        if contrast is not None and size and doc_counts[j] / size < min_lift * contrast[j]:
            return False
        return len(parts) == 1 or (doc_counts[j] >= 3 and not any(p in common for p in parts))

    order = [int(j) for j in np.argsort(-scores, kind="stable") if usable(j)][:n_candidates]
    if not order:
        return [], []
    value = {j: float(scores[j]) for j in order}
    stems = {j: _stems(str(terms[j])) for j in order}
    words = {str(terms[j]): j for j in order if " " not in str(terms[j])}
    dropped: set[int] = set()
    for j in order:  # a specific phrase stands in for its word
        parts = str(terms[j]).split()
        if len(parts) < 2:
            continue
        for part in parts:
            w = words.get(part)
            if w is not None and w not in dropped and doc_counts[j] >= phrase_cover * doc_counts[w]:
                value[j] = max(value[j], value[w])
                dropped.add(w)
    pool = [j for j in order if j not in dropped]
    top = max(value[j] for j in pool)
    chosen: list[int] = []
    while pool and len(chosen) < n:
        best, best_mmr = None, -np.inf
        for j in pool:
            overlap = max((_overlap(stems[j], stems[c]) for c in chosen), default=0.0)
            mmr = (1 - diversity) * value[j] / top - diversity * overlap
            if overlap < 1.0 and mmr > best_mmr:
                best, best_mmr = j, mmr
        if best is None:
            break
        chosen.append(best)
        pool.remove(best)
    return [str(terms[j]) for j in chosen], [round(value[j], 5) for j in chosen]


def common_words(terms, doc_counts, n_docs: int, share: float = 0.5) -> frozenset:
    """Words in more than `share` of all documents (`said` in news): no phrase is made of them."""
    if not len(terms):
        return frozenset()
    total = doc_counts.sum(axis=0)
    return frozenset(str(t) for t, f in zip(terms, total) if " " not in str(t) and f > share * n_docs)
