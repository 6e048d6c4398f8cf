"""The contamination check cut into pieces a distributed engine runs where the rows are (the stage is
`erroranalysis.stages.contamination_ray`): a hash join of n-gram hashes, as a database joins two tables too large for
one process.

Every n-gram is the 64-bit hash `contamination.hash_ngrams` gives, so an n-gram's partition is its hash modulo the
number of partitions: each block of training rows writes its distinct (hash, training row) pairs, and each block of
eval rows its distinct hashes, into the partition of each hash; one task per partition then keeps, for each eval hash
found there, its first `MAX_TRAIN_ROWS_PER_NGRAM` training rows (`match`), what `find_contamination` keeps over its
chunks in order. Each eval block gets the matches of its own hashes back and applies the in-process rule to them
(`contamination.from_matches`), so its per-row columns are the in-process ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from erroranalysis.core.sampling import seeded_rows
from erroranalysis.datachecks.contamination import MAX_TRAIN_ROWS_PER_NGRAM, hash_ngrams


def part_of(hashes: np.ndarray, n_parts: int) -> np.ndarray:
    """The partition of each n-gram hash."""
    return (np.asarray(hashes, dtype=np.uint64) % np.uint64(n_parts)).astype(np.int64)


def train_pairs(texts: Sequence[str], first_row: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (hash, training row) pairs of a block of training texts whose first row is `first_row`, sorted
    by hash then row."""
    hashed = hash_ngrams(texts, n)
    return _distinct(hashed.hashes, hashed.row + first_row)


def eval_hashes(fields: Sequence[Sequence[str]], n: int) -> np.ndarray:
    """The distinct n-gram hashes of a block's eval texts, over all its fields (prompts, references)."""
    found = [hash_ngrams(texts, n).hashes for texts in fields]
    return np.unique(np.concatenate(found)) if found else np.zeros(0, np.uint64)


def match(wanted: np.ndarray, hashes: np.ndarray, rows: np.ndarray, limit: int = MAX_TRAIN_ROWS_PER_NGRAM
          ) -> tuple[np.ndarray, np.ndarray]:
    """For each hash of `wanted` found among the training pairs (`hashes`, `rows`, any order, repeats allowed): its
    `limit` first training rows, as (hashes, rows) sorted by hash then row."""
    keep = np.isin(hashes, wanted)
    hashes, rows = _distinct(np.asarray(hashes, np.uint64)[keep], np.asarray(rows, np.int64)[keep])
    if not hashes.size:
        return hashes, rows
    starts = np.r_[True, hashes[1:] != hashes[:-1]]
    at = np.arange(hashes.size)
    rank = at - np.maximum.accumulate(np.where(starts, at, 0))  # position within the hash's rows
    return hashes[rank < limit], rows[rank < limit]


def _distinct(hashes: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((rows, hashes))
    hashes, rows = hashes[order], rows[order]
    new = np.r_[True, (hashes[1:] != hashes[:-1]) | (rows[1:] != rows[:-1])] if hashes.size else np.zeros(0, bool)
    return hashes[new], rows[new].astype(np.int64)


def sample_rows(n: int, size: int, seed: int) -> np.ndarray:
    """The rows a bounded measurement reads: every row up to `size`, else a seeded sample of `size`, sorted (the
    training prompts whose lengths are measured, in-process and on workers alike)."""
    return seeded_rows(n, size, seed)


def within(rows: np.ndarray, start: int, stop: int) -> np.ndarray:
    """The sorted `rows` that fall in start..stop."""
    a, b = np.searchsorted(rows, [start, stop])
    return rows[a:b]
