"""Name and explain error clusters, separately from clustering: names change without re-clustering.

Per cluster:

- keywords: class-based TF-IDF (BERTopic's c-TF-IDF, on document frequencies) where the classes are the
  clusters, the unclustered failures and the correct examples, so a keyword is what sets the cluster apart from
  the other failures *and* from what the model gets right;
- exemplars: the members nearest the cluster's mean vector (or the strongest members without vectors);
- top confusions (gold -> predicted), gold-label and predicted-label shares;
- mean confidence and loss, mean length in tokens, truncated share, mean membership, local error rate;
- a short readable name built from them: `tech -> business: oil prices, opec, barrels` (`a <-> b` when the
  cluster is one concept misread both ways), and a sentence that says what the cluster is from its facts
  (`cluster_summary`): `Texts about oil prices, opec and barrels: tech read as business in 80%; 12% of the
  failures; confidently wrong (mean confidence 0.86).`;
- with `parents`, the cluster's parent (a coarser error type holding several clusters) and its name.

Keywords are distinct phrases: inflections of one stem count once (`economy`, `economic`, `economist`), a 2 or 3
word phrase replaces its word when it covers most of the word's documents in the cluster (`video games` rather than
`games`), and maximal marginal relevance over the c-TF-IDF candidates keeps a keyword that repeats part of a chosen
one (`oil prices` after `oil`) from crowding out one that says something new.

`describe_clusters` is a pure function over DataFrames and arrays; `cluster_name` builds one name,
`cluster_summary` one sentence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from erroranalysis.validation import check_param

TOKEN_PATTERN = r"(?u)\b[^\W\d_][\w'-]*[^\W_]\b"
LIST_COLUMNS = ("keywords", "keyword_scores", "exemplar_ids", "top_confusions", "top_confusion_counts",
                "top_confusion_shares", "gold_labels", "gold_shares", "pred_labels", "pred_shares")


# clusters.parquet, in this order (see docs/run-directory.md)
COLUMNS = ["cluster_id", "size", "share_of_failures", "name", "kind", "keywords", "keyword_scores", "exemplar_ids",
           "top_confusions", "top_confusion_counts", "top_confusion_shares", "gold_labels", "gold_shares",
           "pred_labels", "pred_shares", "mean_confidence", "mean_loss", "mean_n_tokens", "truncated_share",
           "mean_membership", "local_error_rate", "reassigned", "summary", "parent_id", "parent_name"]


MAX_CORRECT_DOCS = 1000  # correct examples sampled as the contrast class
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


# suffixes stripped by `_stem`, longest first: enough to make inflections and derivations of one word meet
_KEEP = frozenset({"news", "series"})
_SUFFIXES = ("ations", "ation", "ments", "ment", "ists", "ings", "ical", "ies", "ist", "ics", "ing", "ers", "ed",
             "er", "ic", "es", "s", "y", "e")


def _stem(word: str) -> str:
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
    return frozenset(_stem(w) for w in term.split())


def _same_stem(a: str, b: str) -> bool:
    """One word's stem is the other's, or they share a prefix of at least 5 letters and 80% of the shorter
    (`japan`, `japanese`); `women` and `woman` meet through `_stem`."""
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
    return all(any(_same_stem(x, y) for y in b) for x in a)


def _overlap(a: frozenset, b: frozenset) -> float:
    """1 when one term's stems hold the other's (nothing new), else the Jaccard share of stems they have in common."""
    if _covers(a, b) or _covers(b, a):
        return 1.0
    shared = sum(any(_same_stem(x, y) for y in b) for x in a)
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


def cluster_name(keywords: Sequence[str], confusions: Sequence[dict], label_shares: Sequence[dict],
                 pred_shares: Sequence[dict], kind: str = "", n_words: int = 3, title: str = "") -> str:
    """`gold -> pred: kw1, kw2, kw3`; `a <-> b` for a concept misread both ways (`_mirrored`); `*` for a side no value
    dominates; ` (scattered)` for failures spread among correct examples. `title` replaces the keywords (a slice
    cluster's definition).
    """
    head = ""
    mirror = _mirrored(confusions)
    if mirror:
        head = f"{mirror[0]} <-> {mirror[1]}"
    elif confusions and confusions[0]["share"] >= 0.5:
        head = f"{confusions[0]['label']} -> {confusions[0]['pred']}"
    else:
        gold = label_shares[0]["label"] if label_shares and label_shares[0]["share"] >= 0.6 else None
        pred = pred_shares[0]["label"] if pred_shares and pred_shares[0]["share"] >= 0.6 else None
        if gold or pred:
            head = f"{gold or '*'} -> {pred or '*'}"
    words = title or ", ".join(keywords[:n_words])
    name = f"{head}: {words}" if head and words else (head or words or "unnamed")
    if kind == "scattered":
        name += " (scattered)"
    return name


def _mirrored(confusions: Sequence[dict]) -> tuple[str, str] | None:
    """(a, b) when the two largest confusions are a -> b and b -> a, hold at least half the cluster together and
    the smaller holds at least a quarter: one concept misread both ways."""
    if len(confusions) < 2:
        return None
    first, second = confusions[0], confusions[1]
    if (first["label"], first["pred"]) == (second["pred"], second["label"]) and \
            first["share"] + second["share"] >= 0.5 and second["share"] >= 0.25:
        return first["label"], first["pred"]
    return None


def cluster_summary(keywords: Sequence[str], confusions: Sequence[dict], label_shares: Sequence[dict], *,
                    share: float, confidence: float = float("nan"), kind: str = "", title: str = "") -> str:
    """One sentence from the cluster's facts: what it is about (the slice's definition, or its first three
    keywords), how it fails (a dominant confusion and its share, both directions of a mirrored pair, or the class
    it fails on), its share of the failures, and the model's confidence when known."""
    if title:
        concept = title[0].upper() + title[1:]
    elif keywords:
        words = list(keywords[:3])
        concept = "Texts about " + (", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else words[0])
    else:
        concept = "Failures"
    mirror = _mirrored(confusions)
    if mirror:
        how = (f"{mirror[0]} and {mirror[1]} read as each other "
               f"({confusions[0]['share']:.0%} and {confusions[1]['share']:.0%})")
    elif confusions and confusions[0]["share"] >= 0.5:
        c = confusions[0]
        how = f"{c['label']} read as {c['pred']} in {c['share']:.0%}"
    elif label_shares and label_shares[0]["share"] >= 0.6:
        how = f"{label_shares[0]['label']} misread as several classes"
    else:
        how = "several confusions"
    parts = [f"{concept}: {how}", f"{share:.0%} of the failures" if share >= 0.01 else "under 1% of the failures"]
    if np.isfinite(confidence):
        if confidence >= 0.8:
            parts.append(f"confidently wrong (mean confidence {confidence:.2f})")
        elif confidence < 0.5:
            parts.append(f"unsure (mean confidence {confidence:.2f})")
        else:
            parts.append(f"mean confidence {confidence:.2f}")
    if kind == "scattered":
        parts.append("scattered among correct examples")
    return "; ".join(parts) + "."


def _shares(values, limit: int = 5) -> list[dict]:
    values = np.asarray(values).astype(str)
    if len(values) == 0:
        return []
    names, counts = np.unique(values, return_counts=True)
    order = sorted(range(len(names)), key=lambda i: (-counts[i], names[i]))[:limit]
    return [{"label": str(names[i]), "share": round(float(counts[i] / len(values)), 4)} for i in order]


def _confusions(labels, preds, limit: int = 5) -> list[dict]:
    pairs = list(zip(np.asarray(labels).astype(str), np.asarray(preds).astype(str)))
    if not pairs:
        return []
    counts: dict[tuple[str, str], int] = {}
    for pair in pairs:
        counts[pair] = counts.get(pair, 0) + 1
    order = sorted(counts, key=lambda p: (-counts[p], p))[:limit]
    return [{"label": a, "pred": b, "count": int(counts[(a, b)]), "share": round(counts[(a, b)] / len(pairs), 4)}
            for a, b in order]


def _mean(frame, column: str) -> float:
    if column not in frame.columns or len(frame) == 0:
        return float("nan")
    values = np.asarray(frame[column], dtype=np.float64)
    values = values[np.isfinite(values)]
    return round(float(values.mean()), 5) if len(values) else float("nan")


def describe_clusters(failures, cluster_ids: np.ndarray, *, membership: np.ndarray | None = None,
                      vectors: np.ndarray | None = None, correct_texts: Sequence[str] = (),
                      kinds: dict[int, str] | None = None, local_error_rate: np.ndarray | None = None,
                      reassigned: np.ndarray | None = None, n_keywords: int = 8, n_exemplars: int = 5,
                      seed: int = 0, titles: dict[int, str] | None = None, parents: dict[int, int] | None = None):
    """One row per cluster (-1 excluded), ordered by size then id: the clusters.parquet table.

    `failures` has one row per failure with example_id, text, label, pred and, when present, confidence, loss,
    n_tokens, truncated; `cluster_ids`, `membership`, `vectors`, `local_error_rate`, `reassigned` align with it.
    `titles` name some clusters by their definition instead of their keywords (slice clusters). `parents` maps
    clusters to a parent id (`ClusteringResult.cluster_parent`); `parent_id` is null for a cluster without one, and
    `parent_name` names the parent from all its clusters' failures.
    """
    import pandas as pd

    check_param("n_keywords", n_keywords, isinstance(n_keywords, int) and 1 <= n_keywords <= 50, "an integer in [1, 50]")
    check_param("n_exemplars", n_exemplars, isinstance(n_exemplars, int) and 1 <= n_exemplars <= 50,
                "an integer in [1, 50]")
    cluster_ids = np.asarray(cluster_ids, dtype=np.int64)
    n = len(failures)
    failures = failures.reset_index(drop=True)
    membership = np.ones(n, np.float32) if membership is None else np.asarray(membership, dtype=np.float32)
    kinds, titles, parents = kinds or {}, titles or {}, parents or {}
    ids = sorted({int(c) for c in cluster_ids if c >= 0}, key=lambda c: (-int((cluster_ids == c).sum()), c))
    columns = COLUMNS
    if not ids:
        return pd.DataFrame({c: pd.Series(dtype=_dtype(c)) for c in columns})

    # c-TF-IDF over clusters, unclustered failures (-1) and a sample of correct examples (-2)
    correct_texts = list(correct_texts)
    if len(correct_texts) > MAX_CORRECT_DOCS:
        rng = np.random.default_rng(seed)
        correct_texts = [correct_texts[i] for i in np.sort(rng.choice(len(correct_texts), MAX_CORRECT_DOCS, replace=False))]
    texts = failures["text"].astype(str).tolist() + correct_texts
    classes = np.concatenate([np.where(cluster_ids >= 0, cluster_ids, -1), np.full(len(correct_texts), -2)])
    terms, class_ids, scores, doc_counts = class_tfidf(texts, classes, ngram_range=NGRAMS)
    row_of = {int(c): i for i, c in enumerate(class_ids)}
    common = _common_words(terms, doc_counts, len(texts))
    contrast = doc_counts[row_of[-2]] / len(correct_texts) if -2 in row_of else None
    parent_names = _parent_names(failures, cluster_ids, texts, classes, parents, n_keywords, common, contrast)

    unit = None
    if vectors is not None and len(vectors) == n:
        v = np.asarray(vectors, dtype=np.float32)
        unit = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    rows = []
    for c in ids:
        members = np.flatnonzero(cluster_ids == c)
        part = failures.iloc[members]
        if len(terms):
            r = row_of[c]
            min_docs = 2 if len(members) >= 4 else 1
            keywords, kw_scores = pick_keywords(terms, scores[r], doc_counts[r], n_keywords, min_docs,
                                                common=common, contrast=contrast, size=len(members))
        else:
            keywords, kw_scores = [], []
        if unit is not None:
            centre = unit[members].mean(axis=0)
            closeness = unit[members] @ (centre / max(float(np.linalg.norm(centre)), 1e-12))
            order = np.lexsort((members, -closeness))
        else:
            order = np.lexsort((members, -membership[members]))
        exemplars = part["example_id"].astype(str).to_numpy()[order[:n_exemplars]].tolist()
        confusions = _confusions(part["label"], part["pred"])
        label_shares = _shares(part["label"])
        pred_shares = _shares(part["pred"])
        kind = kinds.get(c, "")
        title = titles.get(c, "")
        truncated = float(np.asarray(part["truncated"], dtype=bool).mean()) if "truncated" in part.columns else float("nan")
        rate = float(np.nanmean(local_error_rate[members])) if (
            local_error_rate is not None and np.isfinite(local_error_rate[members]).any()) else float("nan")
        rows.append({
            "cluster_id": c,
            "size": len(members),
            "share_of_failures": round(len(members) / n, 5),
            "name": cluster_name(keywords, confusions, label_shares, pred_shares, kind, title=title),
            "kind": kind,
            "keywords": keywords,
            "keyword_scores": kw_scores,
            "exemplar_ids": exemplars,
            "top_confusions": [f"{c['label']} -> {c['pred']}" for c in confusions],
            "top_confusion_counts": [c["count"] for c in confusions],
            "top_confusion_shares": [c["share"] for c in confusions],
            "gold_labels": [s["label"] for s in label_shares],
            "gold_shares": [s["share"] for s in label_shares],
            "pred_labels": [s["label"] for s in pred_shares],
            "pred_shares": [s["share"] for s in pred_shares],
            "mean_confidence": _mean(part, "confidence"),
            "mean_loss": _mean(part, "loss"),
            "mean_n_tokens": _mean(part, "n_tokens"),
            "truncated_share": round(truncated, 5),
            "mean_membership": round(float(membership[members].mean()), 5),
            "local_error_rate": round(rate, 5),
            "reassigned": int(np.asarray(reassigned)[members].sum()) if reassigned is not None else 0,
            "summary": cluster_summary(keywords, confusions, label_shares, share=len(members) / n,
                                       confidence=_mean(part, "confidence"), kind=kind, title=title),
            "parent_id": parents.get(c),
            "parent_name": parent_names.get(parents.get(c)),
        })
    frame = pd.DataFrame(rows, columns=columns)
    for c in ("cluster_id", "size", "reassigned"):
        frame[c] = frame[c].astype("int32")
    frame["parent_id"] = pd.array(frame["parent_id"].tolist(), dtype="Int32")
    frame["parent_name"] = pd.array(frame["parent_name"].tolist(), dtype="string")
    return frame


def _common_words(terms, doc_counts, n_docs: int, share: float = 0.5) -> frozenset:
    """Words in more than `share` of all documents (`said` in news): no phrase is made of them."""
    if not len(terms):
        return frozenset()
    total = doc_counts.sum(axis=0)
    return frozenset(str(t) for t, f in zip(terms, total) if " " not in str(t) and f > share * n_docs)


def _parent_names(failures, cluster_ids, texts, classes, parents: dict[int, int], n_keywords: int,
                  common: frozenset, contrast) -> dict:
    """{parent id: name} from the c-TF-IDF of the parents' pooled failures against the other clusters, the
    unclustered failures and the correct examples."""
    if not parents:
        return {}
    offset = int(max(classes.max(), 0)) + 1
    pooled = classes.copy()
    for c, p in parents.items():
        pooled[classes == c] = offset + p
    terms, class_ids, scores, doc_counts = class_tfidf(texts, pooled, ngram_range=NGRAMS)
    row_of = {int(c): i for i, c in enumerate(class_ids)}
    names = {}
    for p in sorted(set(parents.values())):
        members = np.flatnonzero(pooled[: len(failures)] == offset + p)
        part = failures.iloc[members]
        r = row_of[offset + p]
        keywords = pick_keywords(terms, scores[r], doc_counts[r], n_keywords, common=common,
                                 contrast=None if contrast is None else doc_counts[row_of[-2]] / max(
                                     1, int((classes == -2).sum())), size=len(members))[0] if len(terms) else []
        names[p] = cluster_name(keywords, _confusions(part["label"], part["pred"]), _shares(part["label"]),
                                _shares(part["pred"]))
    return names


def _dtype(column: str):
    if column in ("cluster_id", "size", "reassigned"):
        return "int32"
    if column == "parent_id":
        return "Int32"
    if column == "parent_name":
        return "string"
    if column in LIST_COLUMNS or column in ("name", "kind", "summary"):
        return "object"
    return "float64"


def short_text(text: str, limit: int = 160) -> str:
    """One line of at most `limit` characters, for listings."""
    text = re.sub(r"\s+", " ", str(text)).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
