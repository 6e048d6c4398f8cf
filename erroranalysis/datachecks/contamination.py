"""Train/eval contamination of a generation run: word n-grams of each eval prompt (and reference) found in the
training data, as GPT-3 (appendix C) and lm-evaluation-harness's decontamination define it.

Texts are normalized as lm-evaluation-harness's `Janitor.normalize_string` does (lowercase, ASCII punctuation
deleted) and split on whitespace; an eval text is contaminated when one of its `n`-grams (13 by default, as GPT-3
and lm-eval; Tulu 3 used 8) occurs in a training row. A text with fewer than `n` words has no n-gram and is not
checked (as in lm-eval): lower `n` to check short prompts.

Cost is linear in the data: every n-gram is a 64-bit hash (an FNV-1a hash of each word's bytes computed for all
words of a chunk at once, combined with fixed odd multipliers and mixed), the eval side (the small one) is a sorted
array, and the training rows stream through in chunks of about `CHUNK_CHARS` characters, each n-gram looked up by
binary search. Two different n-grams share a hash with probability about 2^-64 per pair, so at
10^6 x 10^7 n-grams a false match has odds of about one in a million.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

DEFAULT_N = 13
CHUNK_CHARS = 8_000_000  # characters of training text per chunk: about 100 bytes of arrays per character
MAX_TRAIN_ROWS_PER_NGRAM = 32  # training rows kept per matched n-gram (a boilerplate n-gram may be in millions)
_DELETE = str.maketrans("", "", string.punctuation)
_RNG = np.random.default_rng(13)
_MULTIPLIERS = _RNG.integers(1, 2**63, size=256, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
_BYTE_KEYS = _RNG.integers(0, 2**63, size=256, dtype=np.uint64)
_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)
_ASCII_SPACE = np.zeros(256, dtype=bool)
_ASCII_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True  # what str.split() splits on below 128
# one pass of str.translate: normalize's deletions, and Unicode whitespace (NBSP, U+2009, ...) made a space
_HASH_TABLE = {**_DELETE, **{c: " " for c in range(128, 0x3001) if chr(c).isspace()}}
_FILTER_BITS = 24  # a 2^24-entry table of the eval hashes' low bits screens training n-grams before the search


def normalize(text: str) -> str:
    """`text` lowercased with ASCII punctuation deleted (lm-evaluation-harness's `Janitor.normalize_string`)."""
    return str(text).lower().translate(_DELETE)


def words(text: str) -> list[str]:
    """The normalized text's whitespace tokens."""
    return normalize(text).split()


def ngrams(text: str, n: int = DEFAULT_N) -> list[tuple[str, ...]]:
    """The word n-grams of the normalized text, in order (none when it has fewer than `n` words)."""
    tokens = words(text)
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


@dataclass
class _Hashed:
    """N-gram hashes of a batch of texts: `hashes[k]` starts at word `position[k]` of text `row[k]`."""

    hashes: np.ndarray  # uint64
    row: np.ndarray  # int64, index into the batch
    position: np.ndarray  # int64
    n_words: np.ndarray  # int64, words per text


def hash_ngrams(texts: Sequence[str], n: int = DEFAULT_N) -> _Hashed:
    """Every word n-gram of every text as a 64-bit hash, vectorized over the batch (no Python string per word)."""
    word_hash, word_row, n_words = _word_hashes(texts)
    total = word_hash.size
    if total < n:
        empty = np.zeros(0, dtype=np.int64)
        return _Hashed(np.zeros(0, dtype=np.uint64), empty, empty, n_words)
    starts = np.concatenate([[0], np.cumsum(n_words)[:-1]])
    windows = total - n + 1
    combined = np.zeros(windows, dtype=np.uint64)
    for j in range(n):  # unsigned arithmetic wraps modulo 2^64, which is the hash we want
        combined += word_hash[j:j + windows] * _MULTIPLIERS[j % len(_MULTIPLIERS)]
    keep = word_row[:windows] == word_row[n - 1:n - 1 + windows]  # the n-gram lies inside one text
    rows = word_row[:windows][keep]
    positions = np.arange(windows, dtype=np.int64)[keep] - starts[rows]
    return _Hashed(_mix(combined[keep]), rows, positions, n_words)


def _word_hashes(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 64-bit hash of each word (the tokens of `words`, in order) of the batch, the text each is in, and the words
    per text. The normalized texts are joined into one byte array; words are runs of non-space bytes (Unicode
    whitespace is made a space first, so the words are `str.split`'s), hashed byte by byte over all words at once."""
    encoded = [str(t).lower().translate(_HASH_TABLE).encode("utf-8") for t in texts]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    data = np.frombuffer(b" ".join(encoded) + b" ", dtype=np.uint8)
    word = ~_ASCII_SPACE[data]
    edges = np.diff(np.concatenate([[False], word]).astype(np.int8))
    begin = np.flatnonzero(edges == 1)
    end = np.flatnonzero(edges == -1)
    text_start = np.concatenate([[0], np.cumsum(lengths + 1)])  # the joining space ends each text
    first_word = np.searchsorted(begin, text_start)  # few queries into the many word starts
    n_words = np.diff(first_word).astype(np.int64)
    word_row = np.repeat(np.arange(len(texts), dtype=np.int64), n_words)
    size = end - begin
    order = np.argsort(-size, kind="stable")  # longest first: the words still being read are a prefix
    negative_size, sorted_begin = -size[order], begin[order]
    h = np.full(order.size, _FNV_OFFSET, dtype=np.uint64)
    for j in range(int(-negative_size[0]) if order.size else 0):
        live = int(np.searchsorted(negative_size, -j, side="left"))  # the words longer than j
        h[:live] = (h[:live] ^ _BYTE_KEYS[data[sorted_begin[:live] + j]]) * _FNV_PRIME
    out = np.empty_like(h)
    out[order] = h
    return out, word_row.astype(np.int64), n_words


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: every input bit reaches every output bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def find_contamination(eval_texts: Sequence[str], train_chunks: Iterable[Sequence[str]], n: int = DEFAULT_N,
                       progress=None) -> pd.DataFrame:
    """Per eval text (in order): `checked` (it has at least one n-gram), `n_ngrams`, `n_matched` (its n-grams found in
    training), `overlap` (their share), `contaminated` (any matched), `train_row` (0-based row, over all chunks in
    order, of the training row sharing most of its n-grams; -1 if none), `shared` (n-grams shared with that row)
    and `matched_ngram` (the first matched n-gram, normalized).

    `train_chunks` yields lists of training texts (rows numbered across chunks); `progress(rows)` gets the rows
    of each chunk once scanned."""
    probe = hash_ngrams(eval_texts, n)
    order = np.argsort(probe.hashes, kind="stable")
    keys = np.unique(probe.hashes)
    mask = np.uint64((1 << _FILTER_BITS) - 1)
    screen = np.zeros(1 << _FILTER_BITS, dtype=bool)
    screen[(keys & mask).astype(np.int64)] = True
    hits: list[pd.DataFrame] = []
    offset = 0
    for chunk in train_chunks:
        if not keys.size:  # no eval text has n words: nothing to look up
            if progress is not None:
                progress(len(chunk))
            continue
        hashed = hash_ngrams(chunk, n)
        if keys.size and hashed.hashes.size:
            maybe = np.flatnonzero(screen[(hashed.hashes & mask).astype(np.int64)])
            at = np.minimum(np.searchsorted(keys, hashed.hashes[maybe]), keys.size - 1)
            found = maybe[keys[at] == hashed.hashes[maybe]]
            if found.size:
                pairs = pd.DataFrame({"hash": hashed.hashes[found], "train_row": hashed.row[found] + offset})
                hits.append(pairs.drop_duplicates().groupby("hash").head(MAX_TRAIN_ROWS_PER_NGRAM))
        offset += len(chunk)
        if progress is not None:
            progress(len(chunk))
    return _per_eval_text(eval_texts, probe, order, hits, n)


def from_matches(eval_texts: Sequence[str], matched: pd.DataFrame, n: int = DEFAULT_N) -> pd.DataFrame:
    """`find_contamination`'s frame for `eval_texts` from the training rows already matched to their n-gram hashes
    (`hash`, `train_row`: for each hash its first `MAX_TRAIN_ROWS_PER_NGRAM` training rows, as
    `erroranalysis.datachecks.contamination_blocks.match` finds them on a distributed engine)."""
    probe = hash_ngrams(eval_texts, n)
    order = np.argsort(probe.hashes, kind="stable")
    return _per_eval_text(eval_texts, probe, order, [matched] if len(matched) else [], n)


def _per_eval_text(eval_texts, probe: _Hashed, order: np.ndarray, hits: list[pd.DataFrame], n: int) -> pd.DataFrame:
    m = len(eval_texts)
    n_ngrams = np.bincount(probe.row, minlength=m).astype(np.int64)
    out = pd.DataFrame({"checked": n_ngrams > 0, "n_ngrams": n_ngrams, "n_matched": np.zeros(m, dtype=np.int64),
                        "overlap": np.where(n_ngrams > 0, 0.0, np.nan), "contaminated": np.zeros(m, dtype=bool),
                        "train_row": np.full(m, -1, dtype=np.int64), "shared": np.zeros(m, dtype=np.int64),
                        "matched_ngram": pd.array([None] * m, dtype="string")})
    if not hits:
        return out
    matched = pd.concat(hits).drop_duplicates()
    matched = matched.groupby("hash").head(MAX_TRAIN_ROWS_PER_NGRAM)
    occurrences = pd.DataFrame({"hash": probe.hashes[order], "eval_row": probe.row[order],
                                "position": probe.position[order]})
    found = occurrences[occurrences["hash"].isin(matched["hash"].to_numpy())]
    per_row = found.groupby("eval_row")
    n_matched = per_row["hash"].nunique()
    out.loc[n_matched.index, "n_matched"] = n_matched.to_numpy()
    out["overlap"] = np.where(out["checked"], out["n_matched"] / np.maximum(out["n_ngrams"], 1), np.nan)
    out["contaminated"] = out["n_matched"] > 0
    first = found.sort_values(["eval_row", "position"]).drop_duplicates("eval_row")
    for row, position in zip(first["eval_row"].to_numpy(), first["position"].to_numpy()):
        out.at[int(row), "matched_ngram"] = " ".join(words(eval_texts[row])[position:position + n])
    # the training row that shares most n-grams with each eval text (ties: the first row)
    shared = found[["hash", "eval_row"]].drop_duplicates().merge(matched, on="hash")
    counts = shared.groupby(["eval_row", "train_row"]).size().rename("shared").reset_index()
    best = counts.sort_values(["eval_row", "shared", "train_row"], ascending=[True, False, True])
    best = best.drop_duplicates("eval_row")
    out.loc[best["eval_row"].to_numpy(), "train_row"] = best["train_row"].to_numpy()
    out.loc[best["eval_row"].to_numpy(), "shared"] = best["shared"].to_numpy()
    return out


def chunked(texts: Sequence[str], chars: int = CHUNK_CHARS) -> Iterable[Sequence[str]]:
    """`texts` in consecutive chunks of about `chars` characters (memory stays at one chunk's arrays)."""
    start, size = 0, 0
    for i, text in enumerate(texts):
        size += len(text)
        if size >= chars:
            yield texts[start:i + 1]
            start, size = i + 1, 0
    if start < len(texts):
        yield texts[start:]
