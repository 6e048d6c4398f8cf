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

from erroranalysis.cluster._keywords import NGRAMS, class_tfidf, common_words, pick_keywords
from erroranalysis.cluster._params import NamingParams
from erroranalysis.core.schemas import CLUSTER_NAMING_COLUMNS, CLUSTERS

MAX_CORRECT_DOCS = 1000  # correct examples sampled as the contrast class


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
                      reassigned: np.ndarray | None = None, naming: NamingParams = NamingParams(),
                      titles: dict[int, str] | None = None, parents: dict[int, int] | None = None, **values):
    """One row per cluster (-1 excluded), ordered by size then id: the clusters.parquet table.

    `failures` has one row per failure with example_id, text, label, pred and, when present, confidence, loss,
    n_tokens, truncated; `cluster_ids`, `membership`, `vectors`, `local_error_rate`, `reassigned` align with it.
    `titles` name some clusters by their definition instead of their keywords (slice clusters). `parents` maps
    clusters to a parent id (`ClusteringResult.cluster_parent`); `parent_id` is null for a cluster without one, and
    `parent_name` names the parent from all its clusters' failures. `naming` (keyword values override it): how many
    keywords and exemplars, and the seed of the sample of correct texts.
    """
    import pandas as pd

    naming = naming.replace(**values) if values else naming
    n_keywords, n_exemplars, seed = naming.n_keywords, naming.n_exemplars, naming.seed
    cluster_ids = np.asarray(cluster_ids, dtype=np.int64)
    n = len(failures)
    failures = failures.reset_index(drop=True)
    membership = np.ones(n, np.float32) if membership is None else np.asarray(membership, dtype=np.float32)
    kinds, titles, parents = kinds or {}, titles or {}, parents or {}
    ids = sorted({int(c) for c in cluster_ids if c >= 0}, key=lambda c: (-int((cluster_ids == c).sum()), c))
    columns = list(CLUSTER_NAMING_COLUMNS)
    if not ids:
        return pd.DataFrame({c: pd.Series(dtype=CLUSTERS.dtypes.get(c, "float64")) for c in columns})

    # c-TF-IDF over clusters, unclustered failures (-1) and a sample of correct examples (-2)
    correct_texts = list(correct_texts)
    if len(correct_texts) > MAX_CORRECT_DOCS:
        rng = np.random.default_rng(seed)
        correct_texts = [correct_texts[i] for i in np.sort(rng.choice(len(correct_texts), MAX_CORRECT_DOCS, replace=False))]
    texts = failures["text"].astype(str).tolist() + correct_texts
    classes = np.concatenate([np.where(cluster_ids >= 0, cluster_ids, -1), np.full(len(correct_texts), -2)])
    terms, class_ids, scores, doc_counts = class_tfidf(texts, classes, ngram_range=NGRAMS)
    row_of = {int(c): i for i, c in enumerate(class_ids)}
    common = common_words(terms, doc_counts, len(texts))
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
    for c in ("cluster_id", "size", "reassigned", "parent_id", "parent_name"):
        frame[c] = frame[c].astype(CLUSTERS.dtypes[c])
    return frame


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


def short_text(text: str, limit: int = 160) -> str:
    """One line of at most `limit` characters, for listings."""
    text = re.sub(r"\s+", " ", str(text)).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
