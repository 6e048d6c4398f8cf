"""Near-duplicate search: time and peak memory of erroranalysis.datachecks.duplicates beside the approaches a user would
otherwise write, on synthetic 384-d embeddings (the size of all-MiniLM-L6-v2's), 10k and 100k rows; and, with
--texts, which vectors find planted near-duplicate texts (MiniLM, the static model distilled from it, the sample
checkpoint's hidden states, MinHash).

    .venv/bin/python benchmarks/duplicates.py                 # 10k and 100k
    .venv/bin/python benchmarks/duplicates.py --sizes 10000   # quicker
    .venv/bin/python benchmarks/duplicates.py --texts         # planted duplicate texts (needs `make sample`)

Methods (each runs in its own process, so peak memory is its own; "extra" is the peak resident memory (Linux
VmHWM, reset after loading) above the process's size once the libraries and the vectors are loaded):

- ours_pairs:    `near_duplicate_pairs(x, threshold=0.95, k=10)`: what `erroranalysis checks` runs: exact up to
                 EXACT_MAX rows, faiss IndexIVFFlat above
- ours_exact:    the same with exact=True: block-wise, symmetric, blocks without a pair above the threshold
                 skipped; the reference every recall is measured against
- faiss_hnsw, usearch, hnswlib: each library's HNSW index (M=32, ef 128), the candidates that were measured
- ours_topk:     `top_k_neighbors(x, k=10)`: the same search keeping the 10 best whatever their similarity
- sklearn_cos:   `NearestNeighbors(n_neighbors=11, algorithm="brute", metric="cosine").kneighbors(x)`
- sklearn_euc:   the same with metric="euclidean" on unit vectors (same neighbours; scikit-learn's fast path)
- full_matrix:   `s = x @ x.T`, then the pairs above the threshold (skipped where n x n floats exceed --max-gb)

Every method's pairs at or above the threshold are compared with ours_exact's: recall = share of the exact pairs found.
The data: 1,000 topic centres, each vector a centre plus noise (typical within-topic cosine ~0.5), and 1% of
the rows replaced by perturbed copies of other rows (cosine ~0.97): the planted near duplicates.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

THRESHOLD = 0.95
K = 10
DIM = 384
METHODS = ("ours_pairs", "ours_exact", "ours_topk", "faiss_hnsw", "usearch", "hnswlib", "sklearn_cos", "sklearn_euc",
           "full_matrix")


def make_vectors(n: int, seed: int = 0) -> tuple[np.ndarray, int]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(1000, DIM)).astype(np.float32)
    x = centres[rng.integers(0, 1000, n)] + rng.normal(size=(n, DIM)).astype(np.float32)
    copies = rng.choice(n, n // 100, replace=False)
    sources = rng.integers(0, n, len(copies))
    x[copies] = x[sources] + 0.18 * rng.normal(size=(len(copies), DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), len(copies)


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> float:
    """Reset the peak-RSS mark to the current RSS (Linux clear_refs); returns the current RSS in MB.

    getrusage's ru_maxrss is not used: after fork+exec it keeps the parent's peak."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # then VmHWM is the peak since exec, still this process's own
    return _status_mb("VmRSS")


def peak_mb() -> float:
    return _status_mb("VmHWM")


def pairs_from_knn(idx: np.ndarray, sims: np.ndarray) -> set:
    rows, slots = np.nonzero((sims >= THRESHOLD) & (idx >= 0))
    j = idx[rows, slots]
    keep = rows != j
    return {(min(a, b), max(a, b)) for a, b in zip(rows[keep].tolist(), j[keep].tolist())}


def library_knn(method: str, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """k nearest rows by inner product (= cosine on unit rows) from each library's HNSW index, default settings
    except M=32, ef_construction=128, ef_search=128 (the same for all three)."""
    if method == "faiss_hnsw":
        import faiss

        faiss.omp_set_num_threads(os.cpu_count() or 1)
        index = faiss.IndexHNSWFlat(x.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction, index.hnsw.efSearch = 128, 128
        index.add(x)
        sims, idx = index.search(x, k)
        return idx.astype(np.int64), sims
    if method == "usearch":
        from usearch.index import Index

        index = Index(ndim=x.shape[1], metric="ip", dtype="f32", connectivity=32, expansion_add=128,
                      expansion_search=128)
        index.add(np.arange(len(x)), x)
        found = index.search(x, k)
        return found.keys.astype(np.int64), 1 - found.distances
    import hnswlib

    index = hnswlib.Index(space="ip", dim=x.shape[1])
    index.init_index(max_elements=len(x), ef_construction=128, M=32, random_seed=0)
    index.add_items(x, np.arange(len(x)))
    index.set_ef(128)
    labels, distances = index.knn_query(x, k=k)
    return labels.astype(np.int64), 1 - distances


def worker(method: str, path: str) -> dict:
    # import first, so "extra" memory is the search's, not the libraries'
    from sklearn.neighbors import NearestNeighbors

    from erroranalysis.datachecks.duplicates import near_duplicate_pairs, top_k_neighbors

    x = np.load(path)
    base = reset_peak()
    start = time.perf_counter()
    if method in ("ours_pairs", "ours_exact"):  # ours_pairs: what `checks` runs (approximate above EXACT_MAX)
        found = near_duplicate_pairs(x, threshold=THRESHOLD, k=K, exact=method == "ours_exact")
        pairs = set(zip(found["i"].tolist(), found["j"].tolist()))
    elif method in ("faiss_hnsw", "usearch", "hnswlib"):
        idx, sims = library_knn(method, x, K + 1)
        pairs = pairs_from_knn(idx, sims)
    elif method == "ours_topk":
        pairs = pairs_from_knn(*top_k_neighbors(x, k=K))
    elif method in ("sklearn_cos", "sklearn_euc"):
        metric = "cosine" if method == "sklearn_cos" else "euclidean"
        dist, idx = NearestNeighbors(n_neighbors=K + 1, algorithm="brute", metric=metric).fit(x).kneighbors(x)
        sims = 1 - dist if metric == "cosine" else 1 - dist ** 2 / 2
        pairs = pairs_from_knn(idx, sims)
    elif method == "full_matrix":
        s = x @ x.T
        np.fill_diagonal(s, -1)
        i, j = np.nonzero(np.triu(s >= THRESHOLD))
        pairs = set(zip(i.tolist(), j.tolist()))
    else:
        raise SystemExit(f"unknown method {method}")
    seconds = time.perf_counter() - start
    return {"method": method, "seconds": seconds, "extra_mb": peak_mb() - base, "pairs": sorted(pairs)}


def run_method(method: str, path: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", method, path], capture_output=True, text=True)
    if out.returncode != 0:
        return {"method": method, "error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def planted_texts(n: int = 3000, n_copies: int = 300, seed: int = 0) -> None:
    """Which vectors find edited copies of texts: corpus sentences with `n_copies` planted near duplicates (one
    word replaced, deleted or inserted, two swapped, a prefix or four words added). Recall = planted pairs found;
    precision = found pairs that are planted or whose normalized texts are >= 80% alike (difflib)."""
    import difflib
    import random

    sys.path.insert(0, str(Path(__file__).parent))
    from common import corpus_sentences, edited, sample_checkpoint

    from erroranalysis.datachecks.duplicates import near_duplicate_pairs, normalize_text
    from erroranalysis.embed.models import MiniLMEmbedder
    from erroranalysis.infer.classifier import ChunkPredictor

    rng = random.Random(seed)
    pool = list(dict.fromkeys(corpus_sentences()))
    rng.shuffle(pool)
    texts, vocab = pool[:n], [w for t in pool[n:2 * n] for w in t.split()]
    planted = []
    for j, (source, text) in enumerate(edited(texts, vocab, n_copies, rng)):
        texts.append(text)
        planted.append((source, n + j))
    truth = set(planted)
    rows = []

    def score(name: str, pairs, seconds: float) -> None:
        pairs = {(min(a, b), max(a, b)) for a, b in pairs}
        alike = sum(1 for a, b in pairs if (a, b) in truth or difflib.SequenceMatcher(
            None, normalize_text(texts[a]), normalize_text(texts[b])).ratio() >= 0.8)
        rows.append((name, seconds, len(pairs), len(pairs & truth) / len(truth), alike / max(len(pairs), 1)))

    start = time.perf_counter()
    minilm = MiniLMEmbedder(cache=False).embed_texts(texts)
    seconds = time.perf_counter() - start
    for threshold in (0.95, 0.9):
        found = near_duplicate_pairs(minilm, threshold=threshold)
        score(f"MiniLM cosine >= {threshold}", zip(found["i"], found["j"]), seconds)
    for dims in (256, 384):
        from erroranalysis.embed.static import StaticEmbedder

        static = StaticEmbedder(pca_dims=dims)
        static.load()  # distilled once and cached: the build is not the search's time
        start = time.perf_counter()
        vectors = static.embed_texts(texts)
        seconds = time.perf_counter() - start
        for threshold in (0.95, 0.9):
            found = near_duplicate_pairs(vectors, threshold=threshold)
            score(f"static (model2vec, pca {dims}) cosine >= {threshold}", zip(found["i"], found["j"]), seconds)
    start = time.perf_counter()
    hidden = ChunkPredictor(str(sample_checkpoint()), max_length=128, device="cpu")({"text": texts})["hidden"]
    seconds = time.perf_counter() - start
    for threshold in (0.95, 0.98):
        found = near_duplicate_pairs(hidden, threshold=threshold)
        score(f"checkpoint hidden states cosine >= {threshold}", zip(found["i"], found["j"]), seconds)
    from datasketch import MinHash, MinHashLSH

    for jaccard in (0.5, 0.7):
        start = time.perf_counter()
        shingles = [{t[i:i + 5] for i in range(max(1, len(t) - 4))} for t in map(normalize_text, texts)]
        sketches = []
        for grams in shingles:
            sketch = MinHash(num_perm=128, seed=1)
            sketch.update_batch([g.encode() for g in grams])
            sketches.append(sketch)
        lsh = MinHashLSH(threshold=jaccard, num_perm=128)
        for i, sketch in enumerate(sketches):
            lsh.insert(i, sketch)
        found = {(min(i, j), max(i, j)) for i, sketch in enumerate(sketches) for j in lsh.query(sketch)
                 if j != i and len(shingles[i] & shingles[j]) / len(shingles[i] | shingles[j]) >= jaccard}
        score(f"MinHash (datasketch) char 5-grams, Jaccard >= {jaccard}", found, time.perf_counter() - start)
    print(f"{n:,} corpus sentences + {n_copies} planted near duplicates; seconds include embedding; "
          f"{os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.1f}")
    print(f"{'vectors':<52} {'seconds':>8} {'pairs':>6} {'recall':>7} {'precision':>10}")
    for name, seconds, found, recall, precision in rows:
        print(f"{name:<52} {seconds:>8.1f} {found:>6} {recall:>7.1%} {precision:>10.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--max-gb", type=float, default=4.0, help="skip full_matrix above this n x n size")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--texts", action="store_true", help="planted duplicate texts: which vectors find them")
    args = parser.parse_args()
    if args.texts:
        planted_texts()
        return
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return
    print(f"near duplicates at cosine >= {THRESHOLD}, k={K}, {DIM}-d float32, {os.cpu_count()} CPU(s); "
          f"one run per cell\n")
    for n in args.sizes:
        x, planted = make_vectors(n)
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "x.npy")
            np.save(path, x)
            results = {}
            for method in args.methods:
                if method == "full_matrix" and n * n * 4 / 1e9 > args.max_gb:
                    results[method] = {"method": method, "skipped": f"needs {n * n * 4 / 1e9:.0f} GB for the matrix"}
                    continue
                results[method] = run_method(method, path)
        ours = results.get("ours_pairs")
        exact = results.get("ours_exact") or ours
        reference = set(map(tuple, exact["pairs"])) if exact and "pairs" in exact else None
        print(f"n = {n:,} ({planted:,} planted near-duplicate rows)")
        print(f"{'method':<13} {'seconds':>9} {'extra MB':>9} {'pairs':>7} {'time vs ours':>13} "
              f"{'memory vs ours':>15} {'recall':>11}")
        for method, r in results.items():
            if "seconds" not in r:
                print(f"{method:<13} {r.get('skipped') or r.get('error')}")
                continue
            found = set(map(tuple, r["pairs"]))
            t_ratio = r["seconds"] / ours["seconds"] if ours and "seconds" in ours else float("nan")
            m_ratio = r["extra_mb"] / max(ours["extra_mb"], 1) if ours and "seconds" in ours else float("nan")
            # share of the exact search's pairs this method finds (its recall)
            share = len(found & reference) / len(reference) if reference else float("nan")
            print(f"{method:<13} {r['seconds']:>9.2f} {r['extra_mb']:>9.0f} {len(found):>7} {t_ratio:>12.2f}x "
                  f"{m_ratio:>14.1f}x {share:>10.1%}")
        print()


if __name__ == "__main__":
    main()
