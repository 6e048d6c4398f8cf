"""Near-duplicate texts by the Jaccard similarity of their word shingles: MinHash LSH (datasketch) for the training
data, which may hold millions of rows, and the exact search it is measured against.

Shingles are word `shingle`-grams of the normalized text (`contamination.normalize`), a text shorter than that is
one shingle. MinHash LSH (bands tuned a little below `threshold`) finds candidate pairs in about linear time; each
candidate's exact Jaccard similarity is then computed from the shingle sets and the pairs at or above `threshold`
kept, so no pair is false and recall depends on `num_perm` (benchmarks/contamination.py prints precision and recall
against `exact_pairs` on planted near-duplicates).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from erroranalysis.datachecks.contamination import words

SHINGLE = 3
NUM_PERM = 128
THRESHOLD = 0.8
CANDIDATE_MARGIN = 0.1  # LSH bands tuned this far below the threshold: pairs just above it are still candidates


def shingles(text: str, k: int = SHINGLE) -> set[str]:
    """The word k-grams of the normalized text (the text itself when shorter; empty for a blank text)."""
    tokens = words(text)
    if len(tokens) <= k:
        return {" ".join(tokens)} if tokens else set()
    return {" ".join(tokens[i:i + k]) for i in range(len(tokens) - k + 1)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if (a or b) else 0.0


def minhash_pairs(texts: Sequence[str], threshold: float = THRESHOLD, num_perm: int = NUM_PERM,
                  k: int = SHINGLE, seed: int = 1) -> pd.DataFrame:
    """Pairs (i < j) of texts whose Jaccard similarity is at least `threshold`, among the MinHash LSH candidates:
    columns `i`, `j`, `similarity` (exact), sorted by i, j. Blank texts take no part."""
    from datasketch import MinHash, MinHashLSH

    sets = [shingles(t, k) for t in texts]
    present = [i for i, s in enumerate(sets) if s]
    encoded = [[g.encode("utf-8") for g in sets[i]] for i in present]
    signatures = MinHash.bulk(encoded, num_perm=num_perm, seed=seed) if encoded else []
    by_row = dict(zip(present, signatures))
    lsh = MinHashLSH(threshold=max(threshold - CANDIDATE_MARGIN, 0.05), num_perm=num_perm)
    rows: list[tuple[int, int, float]] = []
    for index, signature in by_row.items():  # query before insert: each pair once, as (earlier, later)
        for other in lsh.query(signature):
            similarity = jaccard(sets[index], sets[other])  # candidates verified exactly: no false pair
            if similarity >= threshold:
                rows.append((other, index, similarity))
        lsh.insert(index, signature, check_duplication=False)
    return _pairs(rows)


# -- the same search cut into pieces a distributed engine runs where the rows are (the documented LSH: each block's
# band keys, grouped per key partition; candidates verified as above) --------------------------------------------


def band_ranges(threshold: float = THRESHOLD, num_perm: int = NUM_PERM) -> list[tuple[int, int]]:
    """The bands `minhash_pairs`' index cuts each signature into (datasketch's choice for its threshold)."""
    from datasketch import MinHashLSH

    return list(MinHashLSH(threshold=max(threshold - CANDIDATE_MARGIN, 0.05), num_perm=num_perm).hashranges)


def band_keys(texts: Sequence[str], first_row: int, ranges: list[tuple[int, int]], num_perm: int = NUM_PERM,
              k: int = SHINGLE, seed: int = 1) -> pd.DataFrame:
    """One row per (text, band) of the non-blank texts: `row` (from `first_row`), `band` and `key` (the band's
    hash values as bytes). Two texts are `minhash_pairs` candidates when they share a (band, key)."""
    from datasketch import MinHash

    sets = [shingles(t, k) for t in texts]
    present = [i for i, s in enumerate(sets) if s]
    signatures = MinHash.bulk([[g.encode("utf-8") for g in sets[i]] for i in present], num_perm=num_perm,
                              seed=seed) if present else []
    rows, bands, keys = [], [], []
    for i, signature in zip(present, signatures):
        for band, (a, b) in enumerate(ranges):
            rows.append(first_row + i)
            bands.append(band)
            keys.append(signature.hashvalues[a:b].tobytes())
    return pd.DataFrame({"row": np.asarray(rows, dtype=np.int64), "band": np.asarray(bands, dtype=np.int16),
                         "key": keys})


def candidate_pairs(keys: pd.DataFrame) -> pd.DataFrame:
    """The distinct pairs (i < j) of rows that share a (band, key) among `band_keys` rows (all of a key's rows
    must be there: a partition by key holds them)."""
    shared = keys.groupby(["band", "key"])["row"].transform("size") > 1
    groups = keys[shared].groupby(["band", "key"])["row"].apply(lambda r: np.sort(r.to_numpy()))
    i, j = [], []
    for rows in groups:
        a, b = np.triu_indices(len(rows), 1)
        i.append(rows[a])
        j.append(rows[b])
    frame = pd.DataFrame({"i": np.concatenate(i) if i else np.zeros(0, np.int64),
                          "j": np.concatenate(j) if j else np.zeros(0, np.int64)})
    return frame.drop_duplicates(ignore_index=True)


def verified(pairs: pd.DataFrame, text_of, threshold: float = THRESHOLD, k: int = SHINGLE) -> pd.DataFrame:
    """The candidate `pairs` whose exact Jaccard similarity is at least `threshold` (`minhash_pairs`' check);
    `text_of(row)` gives a row's text."""
    rows = [(i, j, jaccard(shingles(text_of(i), k), shingles(text_of(j), k)))
            for i, j in zip(pairs["i"].tolist(), pairs["j"].tolist())]
    return _pairs([r for r in rows if r[2] >= threshold])


def exact_pairs(texts: Sequence[str], threshold: float = THRESHOLD, k: int = SHINGLE) -> pd.DataFrame:
    """Every pair (i < j) whose exact shingle Jaccard similarity is at least `threshold`, found through an inverted
    index of shingles (quadratic in the worst case: the reference MinHash is measured against, for small sets)."""
    sets = [shingles(t, k) for t in texts]
    index: dict[str, list[int]] = {}
    for i, s in enumerate(sets):
        for g in s:
            index.setdefault(g, []).append(i)
    rows = []
    for i, s in enumerate(sets):
        candidates = {j for g in s for j in index[g] if j > i}
        rows.extend((i, j, jaccard(s, sets[j])) for j in sorted(candidates))
    return _pairs([r for r in rows if r[2] >= threshold])


def _pairs(rows) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["i", "j", "similarity"]).astype({"i": np.int64, "j": np.int64,
                                                                         "similarity": np.float64})
    return frame.sort_values(["i", "j"], ignore_index=True)


def groups(n: int, pairs: pd.DataFrame) -> np.ndarray:
    """Connected components of the pairs: a group id per text (-1 for a text in no pair), groups numbered by
    their first member."""
    parent = np.arange(n)

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, j in zip(pairs["i"].to_numpy(), pairs["j"].to_numpy()):
        a, b = find(int(i)), find(int(j))
        if a != b:
            parent[max(a, b)] = min(a, b)
    roots = np.array([find(x) for x in range(n)])
    member = np.zeros(n, dtype=bool)
    member[pairs["i"].to_numpy()] = True
    member[pairs["j"].to_numpy()] = True
    out = np.full(n, -1, dtype=np.int64)
    ids: dict[int, int] = {}
    for x in np.flatnonzero(member):
        out[x] = ids.setdefault(int(roots[x]), len(ids))
    return out


def precision_recall(found: pd.DataFrame, truth: pd.DataFrame) -> dict:
    """Precision and recall of the pairs `found` against the pairs `truth` (both with columns i < j)."""
    got = set(zip(found["i"].tolist(), found["j"].tolist()))
    want = set(zip(truth["i"].tolist(), truth["j"].tolist()))
    hit = len(got & want)
    return {"found": len(got), "true": len(want), "precision": hit / len(got) if got else 1.0,
            "recall": hit / len(want) if want else 1.0}
