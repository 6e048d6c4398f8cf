"""Name and explain error clusters, separately from clustering: names change without re-clustering.

Per cluster:

- keywords: class-based TF-IDF (BERTopic's c-TF-IDF, on document frequencies) where the classes are the
  clusters, the unclustered failures and the correct examples, so a keyword is what sets the cluster apart from
  the other failures *and* from what the model gets right;
- exemplars: the members nearest the cluster's mean vector (or the strongest members without vectors);
- top confusions (gold -> predicted), gold-label and predicted-label shares;
- mean confidence and loss, mean length in tokens, truncated share, mean membership, local error rate;
- a short readable name built from them: `tech -> business: oil, prices, shares`.

`describe_clusters` is a pure function over DataFrames and arrays; `cluster_name` builds one name.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from erroranalysis.validation import check_param

TOKEN_PATTERN = r"(?u)\b[^\W\d_][\w'-]*[^\W_]\b"
LIST_COLUMNS = ("keywords", "keyword_scores", "exemplar_ids", "top_confusions", "top_confusion_counts",
                "top_confusion_shares", "gold_labels", "gold_shares", "pred_labels", "pred_shares")


# clusters.parquet, in this order (see docs/run-directory.md)
COLUMNS = ["cluster_id", "size", "share_of_failures", "name", "kind", "keywords", "keyword_scores", "exemplar_ids",
           "top_confusions", "top_confusion_counts", "top_confusion_shares", "gold_labels", "gold_shares",
           "pred_labels", "pred_shares", "mean_confidence", "mean_loss", "mean_n_tokens", "truncated_share",
           "mean_membership", "local_error_rate", "reassigned"]


MAX_CORRECT_DOCS = 1000  # correct examples sampled as the contrast class
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


def pick_keywords(terms: np.ndarray, scores: np.ndarray, doc_counts: np.ndarray, n: int, min_docs: int = 2) -> tuple[list[str], list[float]]:
    """Top-n terms by score, in at least `min_docs` documents, skipping a term whose words repeat a chosen one."""
    order = np.argsort(-scores, kind="stable")
    chosen: list[str] = []
    values: list[float] = []
    words_used: list[set[str]] = []
    for j in order:
        if len(chosen) >= n or scores[j] <= 0:
            break
        if doc_counts[j] < min_docs:
            continue
        parts = terms[j].split()
        words = set(parts)
        if len(words) < len(parts):  # "goal goal"
            continue
        if any(words <= used or used <= words for used in words_used):
            continue
        chosen.append(str(terms[j]))
        values.append(round(float(scores[j]), 5))
        words_used.append(words)
    return chosen, values


def cluster_name(keywords: Sequence[str], confusions: Sequence[dict], label_shares: Sequence[dict],
                 pred_shares: Sequence[dict], kind: str = "", n_words: int = 3, title: str = "") -> str:
    """`gold -> pred: kw1, kw2, kw3`, with `*` for a side no value dominates; ` (scattered)` for failures spread
    among correct examples. `title` replaces the keywords (a slice cluster's definition)."""
    head = ""
    if confusions and confusions[0]["share"] >= 0.5:
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
                      seed: int = 0, titles: dict[int, str] | None = None):
    """One row per cluster (-1 excluded), ordered by size then id: the clusters.parquet table.

    `failures` has one row per failure with example_id, text, label, pred and, when present, confidence, loss,
    n_tokens, truncated; `cluster_ids`, `membership`, `vectors`, `local_error_rate`, `reassigned` align with it.
    `titles` name some clusters by their definition instead of their keywords (slice clusters).
    """
    import pandas as pd

    check_param("n_keywords", n_keywords, isinstance(n_keywords, int) and 1 <= n_keywords <= 50, "an integer in [1, 50]")
    check_param("n_exemplars", n_exemplars, isinstance(n_exemplars, int) and 1 <= n_exemplars <= 50,
                "an integer in [1, 50]")
    cluster_ids = np.asarray(cluster_ids, dtype=np.int64)
    n = len(failures)
    failures = failures.reset_index(drop=True)
    membership = np.ones(n, np.float32) if membership is None else np.asarray(membership, dtype=np.float32)
    kinds, titles = kinds or {}, titles or {}
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
    terms, class_ids, scores, doc_counts = class_tfidf(texts, classes)
    row_of = {int(c): i for i, c in enumerate(class_ids)}

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
            keywords, kw_scores = pick_keywords(terms, scores[r], doc_counts[r], n_keywords, min_docs)
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
        truncated = float(np.asarray(part["truncated"], dtype=bool).mean()) if "truncated" in part.columns else float("nan")
        rate = float(np.nanmean(local_error_rate[members])) if (
            local_error_rate is not None and np.isfinite(local_error_rate[members]).any()) else float("nan")
        rows.append({
            "cluster_id": c,
            "size": len(members),
            "share_of_failures": round(len(members) / n, 5),
            "name": cluster_name(keywords, confusions, label_shares, pred_shares, kind, title=titles.get(c, "")),
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
        })
    frame = pd.DataFrame(rows, columns=columns)
    for c in ("cluster_id", "size", "reassigned"):
        frame[c] = frame[c].astype("int32")
    return frame


def _dtype(column: str):
    if column in ("cluster_id", "size", "reassigned"):
        return "int32"
    if column in LIST_COLUMNS or column in ("name", "kind"):
        return "object"
    return "float64"


def short_text(text: str, limit: int = 160) -> str:
    """One line of at most `limit` characters, for listings."""
    text = re.sub(r"\s+", " ", str(text)).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
