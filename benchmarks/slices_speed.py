"""Slice-finding speed: erroranalysis.slices beside the naive approaches a user would otherwise write.

100,000 synthetic examples with a ~20,000-word Zipf vocabulary (10 to 60 words each), three metadata columns,
five labels, truncation, ~10% random failures plus two planted error slices: texts that mention one of three
rare words, and source == "c" AND long texts. Printed, from one run:

- feature extraction: `extract_features` (words and 2-word phrases, metadata, length, label) beside
  sklearn's `CountVectorizer(binary=True, ngram_range=(1, 2), min_df=...)` for the words and phrases alone;
- slice search: `find_slices` (singles, pairs and triples among the 100 best singles, significance, pruning)
  beside (a) a per-feature pandas `groupby` loop over the same features (singles, then pairs among the same 100
  best singles) and (b) the surrogate error tree of Microsoft's Error Analysis: a depth-4 sklearn
  `DecisionTreeClassifier` fit to the failures on the same sparse matrix;
- whether each method recovers the planted slices (best F1 of a reported slice / tree leaf against each).

Run: .venv/bin/python benchmarks/slices_speed.py [--rows N] [--vocab V] [--merge]
(--merge adds word merging through the packaged embedding model, its load included.)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from erroranalysis import slices as sl  # noqa: E402


def make_data(rows: int, vocab: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(vocab)], dtype=object)
    p = 1.0 / np.arange(1, vocab + 1) ** 1.07
    p /= p.sum()
    lengths = rng.integers(10, 61, rows)
    tokens = rng.choice(vocab, size=int(lengths.sum()), p=p)
    # the concept: one of three rare words (ranks 3000-3002, ~0.3% of texts each without planting)
    concept = rng.random(rows) < 0.02
    positions = np.concatenate([[0], np.cumsum(lengths)])
    tokens[positions[:-1][concept]] = rng.choice([3000, 3001, 3002], int(concept.sum()))
    texts = [" ".join(words[tokens[positions[i]:positions[i + 1]]]) for i in range(rows)]
    concept = np.array([any(f"w{k}" in t.split() for k in (3000, 3001, 3002)) for t in texts])
    meta = pd.DataFrame({
        "source": rng.choice(list("abcdefgh"), rows),
        "score": rng.normal(size=rows).round(3),
        "annotator": rng.choice([f"ann{i}" for i in range(30)], rows),
    })
    labels = rng.choice(["business", "sport", "tech", "politics", "entertainment"], rows)
    truncated = lengths > 55
    long_source = (meta["source"] == "c").to_numpy() & (lengths >= 40)
    fail = (rng.random(rows) < 0.10) | (concept & (rng.random(rows) < 0.8)) | (long_source & (rng.random(rows) < 0.7))
    return texts, meta, labels, truncated, fail, {"concept words": concept, 'source == "c" and long': long_source}


def best_f1(groups: list[np.ndarray], planted: np.ndarray) -> float:
    best = 0.0
    for g in groups:
        tp = int((g & planted).sum())
        if tp:
            best = max(best, 2 * tp / (int(g.sum()) + int(planted.sum())))
    return best


def pandas_loop(X, fail, candidates, n):
    """What one writes by hand: one groupby per feature, then per pair of promising features."""
    frame = pd.DataFrame({"fail": fail})
    Xc = X.tocsc()
    rates = {}
    for j in range(X.shape[1]):
        col = np.zeros(n, dtype=bool)
        col[Xc.indices[Xc.indptr[j]:Xc.indptr[j + 1]]] = True
        stats = frame.groupby(col)["fail"].agg(["mean", "size"])
        if True in stats.index:
            rates[(j,)] = tuple(stats.loc[True])
    cols = {}
    for j in candidates:
        col = np.zeros(n, dtype=bool)
        col[Xc.indices[Xc.indptr[j]:Xc.indptr[j + 1]]] = True
        cols[j] = col
    for a_i, a in enumerate(candidates):
        for b in candidates[a_i + 1:]:
            stats = frame.groupby(cols[a] & cols[b])["fail"].agg(["mean", "size"])
            if True in stats.index:
                rates[(a, b)] = tuple(stats.loc[True])
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--vocab", type=int, default=20_000)
    parser.add_argument("--merge", action="store_true")
    args = parser.parse_args()

    t = time.perf_counter()
    texts, meta, labels, truncated, fail, planted = make_data(args.rows, args.vocab)
    n = len(texts)
    print(f"data: {n:,} examples, vocabulary {args.vocab:,} words, error rate {fail.mean():.3f} "
          f"({time.perf_counter() - t:.1f} s to generate)")
    for name, mask in planted.items():
        print(f"  planted: {name}: {int(mask.sum()):,} examples, error rate {fail[mask].mean():.2f}")
    min_support = sl.default_min_support(n)
    # Import everything both sides use before timing, so neither pays a one-time import.
    import scipy.stats  # noqa: F401
    import sklearn.feature_extraction.text  # noqa: F401
    import sklearn.tree  # noqa: F401

    # -- feature extraction -------------------------------------------------------------------------------------
    t = time.perf_counter()
    feats = sl.extract_features(texts, meta, labels=labels, truncated=truncated, min_support=min_support)
    ours_features = time.perf_counter() - t
    n_text = sum(k == "text" for k in feats.kinds)

    from sklearn.feature_extraction.text import CountVectorizer

    t = time.perf_counter()
    cv = CountVectorizer(binary=True, ngram_range=(1, 2), min_df=min_support)
    cv_matrix = cv.fit_transform(texts)
    cv_seconds = time.perf_counter() - t

    # -- search -------------------------------------------------------------------------------------------------
    t = time.perf_counter()
    result = sl.find_slices(feats, ~fail, min_support=min_support, merge=False)
    ours_search = time.perf_counter() - t
    ours_groups = [np.isin(np.arange(n), result.members.loc[result.members["slice_id"] == s, "example_id"])
                   for s in result.slices["slice_id"]]

    support = feats.support()
    fails = np.asarray(feats.matrix.T @ fail.astype(np.int32)).ravel()
    score = sl.sliceline_score(support, fails, n, fail.mean(), 0.95)
    candidates = list(np.argsort(-score)[:100])
    t = time.perf_counter()
    rates = pandas_loop(feats.matrix, fail, candidates, n)
    loop_seconds = time.perf_counter() - t
    # the loop's answer: slices of at least min_support with the best error rate ratios (no significance)
    loop_best = sorted((k for k, (mean, size) in rates.items() if size >= min_support),
                       key=lambda k: -sl.sliceline_score(rates[k][1], rates[k][0] * rates[k][1], n, fail.mean(),
                                                         0.95))[:20]
    Xc = feats.matrix.tocsc()
    loop_groups = []
    for key in loop_best:
        g = np.ones(n, dtype=bool)
        for j in key:
            col = np.zeros(n, dtype=bool)
            col[Xc.indices[Xc.indptr[j]:Xc.indptr[j + 1]]] = True
            g &= col
        loop_groups.append(g)

    from sklearn.tree import DecisionTreeClassifier

    t = time.perf_counter()
    tree = DecisionTreeClassifier(max_depth=4, min_samples_leaf=min_support, random_state=0)
    tree.fit(feats.matrix.tocsr(), fail)
    leaves = tree.apply(feats.matrix.tocsr())
    tree_seconds = time.perf_counter() - t
    tree_groups = [leaves == leaf for leaf in np.unique(leaves) if fail[leaves == leaf].mean() > fail.mean()]

    merge_seconds = merged = None
    if args.merge:
        t = time.perf_counter()
        sl.default_word_embedder()  # the model load, timed apart from the search
        load_seconds = time.perf_counter() - t
        t = time.perf_counter()
        merged = sl.find_slices(feats, ~fail, min_support=min_support, merge=True)
        merge_seconds = time.perf_counter() - t
        merged_groups = [np.isin(np.arange(n), merged.members.loc[merged.members["slice_id"] == s, "example_id"])
                         for s in merged.slices["slice_id"]]

    # -- report -------------------------------------------------------------------------------------------------
    print(f"\nfeatures: {len(feats):,} ({n_text:,} words and phrases with support >= {min_support}); "
          f"slices tested: {result.n_tested:,}; reported: {len(result.slices)}")
    print(f"\n{'step':58s} {'seconds':>8s} {'ratio':>8s}")
    print(f"{'extract_features (words, phrases, metadata, length, label)':58s} {ours_features:8.2f} {'1.0x':>8s}")
    print(f"{'sklearn CountVectorizer(binary, 1-2 grams) alone':58s} {cv_seconds:8.2f} "
          f"{cv_seconds / ours_features:7.1f}x")
    print(f"{'find_slices (singles, pairs, triples, tests, pruning)':58s} {ours_search:8.2f} {'1.0x':>8s}")
    print(f"{'pandas groupby loop (singles + pairs of the best 100)':58s} {loop_seconds:8.2f} "
          f"{loop_seconds / ours_search:7.1f}x")
    print(f"{'sklearn DecisionTreeClassifier(max_depth=4) error tree':58s} {tree_seconds:8.2f} "
          f"{tree_seconds / ours_search:7.1f}x")
    total = ours_features + ours_search
    print(f"{'erroranalysis total (features + search)':58s} {total:8.2f}")
    if merge_seconds is not None:
        print(f"{'find_slices with word merging (model loaded)':58s} {merge_seconds:8.2f}")
        print(f"{'  loading the packaged embedding model, once per process':58s} {load_seconds:8.2f}")
    print(f"(CountVectorizer vocabulary {cv_matrix.shape[1]:,} vs ours {n_text:,}: ours drops phrases that start "
          "or end with a stop word)")

    merged_head = f" {'ours+merge':>11s}" if merged is not None else ""
    print(f"\n{'planted slice':28s} {'ours':>6s}{merged_head} {'loop top-20':>12s} {'tree leaves':>12s}   (best F1)")
    for name, mask in planted.items():
        merged_f1 = f" {best_f1(merged_groups, mask):11.2f}" if merged is not None else ""
        print(f"{name:28s} {best_f1(ours_groups, mask):6.2f}{merged_f1} {best_f1(loop_groups, mask):12.2f} "
              f"{best_f1(tree_groups, mask):12.2f}")
    for title, res in [("ours", result), ("ours with merging", merged)]:
        if res is None:
            continue
        print(f"\n{title}, top 5:")
        for row in res.slices.head(5).itertuples():
            print(f"  {row.description}: support {row.support}, error rate {row.error_rate:.2f}, "
                  f"p {row.p_value:.1e}")


if __name__ == "__main__":
    main()
