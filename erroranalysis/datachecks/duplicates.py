"""Duplicates inside an eval set, and leakage from a training set into it.

- Exact duplicates: texts equal after `normalize_text` (lower case, punctuation dropped, whitespace collapsed),
  found by hashing, so they cost nothing.
- Near duplicates: embedding cosine neighbours at or above a similarity threshold. Only one text per exact
  group is embedded and searched. Up to `EXACT_MAX` rows the search is exact and block-wise: `block_size` rows
  against `block_size` rows at a time, keeping the top `k` neighbours per row, so memory grows with
  n * k, never n * n. A self-search visits each pair of blocks once (the similarity matrix is symmetric), and
  blocks without any pair above the threshold are skipped after one comparison. Its time grows with n * n, so
  above `EXACT_MAX` rows an inverted-file index (faiss `IndexIVFFlat`, 4 * sqrt(n) lists, `NPROBE` probed)
  answers instead, in time ~ n * sqrt(n): near duplicates are so close that they fall in the same or a nearby
  list (benchmarks/duplicates.py prints its recall against the exact search: 100% at 100k rows, where it is
  ~6x faster; faiss-cpu was measured beside hnswlib and usearch, whose HNSW indexes were slower still).
- Duplicate groups are the connected components of "exact or near duplicate of" (so a chain a~b~c is one group
  even when a and c are less similar); a group whose members carry more than one label is a conflict.
- Leakage: each eval text's closest training text, exact (same normalized hash) or near (cosine >= threshold).

Embeddings are injected (`embeddings=` per row, or `embed=` a function texts -> vectors); the default is the
packaged all-MiniLM-L6-v2 (`erroranalysis.embed.models.MiniLMEmbedder`, mean pooling, L2-normalized, cached).
"""

from __future__ import annotations

import hashlib
import re
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from erroranalysis.core.errors import DataError
from erroranalysis.core.validation import check_param

Embed = Callable[[Sequence[str]], np.ndarray]

DEFAULT_THRESHOLD = 0.95
DEFAULT_K = 10
DEFAULT_BLOCK = 4096
EXACT_MAX = 20_000  # rows searched exactly; above, the approximate index (exact costs n^2: 2 s at 20k, 60 s at 100k)
NPROBE = 8  # inverted lists probed per query
DUPLICATE_COLUMNS = ["duplicate_group", "duplicate_kind", "duplicate_conflict"]
LEAKAGE_COLUMNS = ["in_train", "train_kind", "train_index", "train_similarity", "train_label_differs"]

_PUNCT = re.compile(r"[^\w\s]|_", re.UNICODE)
_SPACE = re.compile(r"\s+", re.UNICODE)


# -- exact duplicates -------------------------------------------------------------------------------------------


def normalize_text(text) -> str:
    """Lower case, punctuation and symbols removed, runs of whitespace collapsed to one space, stripped."""
    text = "" if text is None else str(text)
    return _SPACE.sub(" ", _PUNCT.sub(" ", text.lower())).strip()


def text_keys(texts: Sequence[str]) -> np.ndarray:
    """16-byte BLAKE2b digests of the normalized texts (`S16`): equal keys = exact duplicates."""
    return np.array([hashlib.blake2b(normalize_text(t).encode("utf-8"), digest_size=16).digest() for t in texts],
                    dtype="S16")


def exact_representatives(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each distinct key, in row order; for every row, the position of its key in that list)."""
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # representatives in row order, not hash order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse.reshape(-1)]


# -- neighbour search -------------------------------------------------------------------------------------------


def normalize_rows(vectors) -> np.ndarray:
    """float32 with unit rows (zero rows stay zero), so dot products are cosine similarities; a copy unless the
    rows already have unit length. Callers never write to the result."""
    x = np.asarray(vectors, dtype=np.float32)
    if x.ndim != 2:
        raise DataError(f"embeddings: shape {tuple(x.shape)} is not [n, d]; give one vector per text.")
    if x.size and not np.isfinite(x).all():
        raise DataError("embeddings: contain NaN or infinite values; fix the embedder that produced them.")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if x.size and np.abs(norms - 1).max() < 1e-4:
        return x  # already unit rows (MiniLM's are): no copy of a large matrix
    return x / np.where(norms > 0, norms, 1)


def top_k_neighbors(queries, index=None, *, k: int = DEFAULT_K, min_similarity: float | None = None,
                    block_size: int = DEFAULT_BLOCK, exact: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each query row's `k` most cosine-similar rows of `index` (of `queries` itself, excluding the row, when
    `index` is None): (indices int64 [n, k], similarities float32 [n, k]), best first.

    Slots without a neighbour (fewer than k rows, or below `min_similarity`) hold index -1 and similarity -inf.
    `exact` (default: when `index` has at most `EXACT_MAX` rows) searches every pair, block by block; otherwise an
    approximate inverted-file index answers (see the module docstring). Memory: O(block_size^2 + n * k); the
    n x m similarity matrix is never held.
    """
    check_param("k", k, isinstance(k, (int, np.integer)) and k >= 1, "an integer >= 1")
    check_param("block_size", block_size, isinstance(block_size, (int, np.integer)) and block_size >= 1,
                "an integer >= 1")
    q = normalize_rows(queries)
    self_search = index is None
    x = q if self_search else normalize_rows(index)
    if not self_search and q.shape[1] != x.shape[1]:
        raise DataError(f"embeddings: query vectors have {q.shape[1]} dimensions, index vectors {x.shape[1]}; "
                        "embed both with the same model.")
    n, m = len(q), len(x)
    if not (exact if exact is not None else m <= EXACT_MAX):
        return _approximate(q, None if self_search else x, k, min_similarity)
    best_s = np.full((n, k), -np.inf, dtype=np.float32)
    best_i = np.full((n, k), -1, dtype=np.int64)
    floor = -np.inf if min_similarity is None else np.float32(min_similarity)
    for a in range(0, n, block_size):
        qa = q[a:a + block_size]
        for b in range(a if self_search else 0, m, block_size):
            sims = qa @ x[b:b + block_size].T
            if self_search and a == b:
                np.fill_diagonal(sims, -np.inf)
            if min_similarity is not None and not sims.max() >= floor:
                del sims
                continue  # nothing above the threshold here: the common case for duplicate search
            _merge(best_s, best_i, a, sims, b, floor)
            if self_search and a != b:
                _merge(best_s, best_i, b, sims.T, a, floor)
            del sims  # free the block before the next product allocates one
    order = np.argsort(-best_s, axis=1, kind="stable")
    best_s = np.take_along_axis(best_s, order, 1)
    best_i = np.take_along_axis(best_i, order, 1)
    best_i[~np.isfinite(best_s)] = -1
    return best_i, best_s


def _approximate(q: np.ndarray, x: np.ndarray | None, k: int, min_similarity: float | None,
                 nprobe: int = NPROBE) -> tuple[np.ndarray, np.ndarray]:
    """`top_k_neighbors` through faiss' IndexIVFFlat over inner products (cosines of unit rows)."""
    import faiss

    base = q if x is None else x
    n_lists = max(1, min(int(4 * np.sqrt(len(base))), len(base) // 39))  # faiss wants >= 39 training rows a list
    quantizer = faiss.IndexFlatIP(base.shape[1])
    ivf = faiss.IndexIVFFlat(quantizer, base.shape[1], n_lists, faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(0)  # the training sample is seeded: the same input finds the same pairs
    train = base if len(base) <= 64 * n_lists else base[np.sort(rng.choice(len(base), 64 * n_lists, replace=False))]
    ivf.cp.seed = 0
    ivf.train(np.ascontiguousarray(train))
    ivf.add(np.ascontiguousarray(base))
    ivf.nprobe = min(nprobe, n_lists)
    extra = 1 if x is None else 0  # a self-search finds each row itself first
    sims, idx = ivf.search(np.ascontiguousarray(q), k + extra)
    idx = idx.astype(np.int64)
    if x is None:  # drop the row itself (wherever ties put it), keep k
        own = idx == np.arange(len(q))[:, None]
        own[:, -1] |= ~own.any(1)  # no self hit: drop the last (worst) slot instead
        idx = idx[~own].reshape(len(q), k)
        sims = sims[~own].reshape(len(q), k)
    sims = sims.astype(np.float32)
    missing = idx < 0
    if min_similarity is not None:
        missing |= sims < np.float32(min_similarity)
    sims[missing] = -np.inf
    idx[missing] = -1
    order = np.argsort(-sims, axis=1, kind="stable")
    return np.take_along_axis(idx, order, 1), np.take_along_axis(sims, order, 1)


def _merge(best_s: np.ndarray, best_i: np.ndarray, row0: int, sims: np.ndarray, col0: int, floor,
           chunk: int = 1024) -> None:
    """Fold one block of similarities (rows row0.., columns col0..) into the running top-k, in place, `chunk`
    rows at a time so the partition's index arrays stay small."""
    k = best_s.shape[1]
    m = sims.shape[1]
    kk = min(k, m)
    for start in range(0, sims.shape[0], chunk):
        part_sims = sims[start:start + chunk]
        if np.isfinite(floor):
            rows = np.flatnonzero(part_sims.max(1) >= floor)
            if not len(rows):
                continue
            block = part_sims[rows]
        else:
            rows = np.arange(part_sims.shape[0])
            block = part_sims
        if kk < m:
            part = np.argpartition(block, m - kk, axis=1)[:, m - kk:]
        else:
            part = np.broadcast_to(np.arange(m), block.shape)
        cand_s = np.take_along_axis(block, part, 1).astype(np.float32)
        cand_s[cand_s < floor] = -np.inf
        target = rows + row0 + start
        all_s = np.concatenate([best_s[target], cand_s], 1)
        all_i = np.concatenate([best_i[target], part + col0], 1)
        keep = np.argpartition(-all_s, k - 1, axis=1)[:, :k]
        best_s[target] = np.take_along_axis(all_s, keep, 1)
        best_i[target] = np.take_along_axis(all_i, keep, 1)


def near_duplicate_pairs(vectors, *, threshold: float = DEFAULT_THRESHOLD, k: int = DEFAULT_K,
                         block_size: int = DEFAULT_BLOCK, exact: bool | None = None) -> pd.DataFrame:
    """Pairs (i < j) of rows whose cosine similarity is >= threshold, each row keeping its k best: columns
    i, j, similarity, most similar first. `exact`: see `top_k_neighbors`."""
    _check_threshold(threshold)
    idx, sims = top_k_neighbors(vectors, k=k, min_similarity=threshold, block_size=block_size, exact=exact)
    rows, slots = np.nonzero(idx >= 0)
    i, j = rows, idx[rows, slots]
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    pairs = pd.DataFrame({"i": lo, "j": hi, "similarity": sims[rows, slots]}).drop_duplicates(["i", "j"])
    return pairs.sort_values(["similarity", "i", "j"], ascending=[False, True, True], ignore_index=True)


# -- duplicates inside one set ----------------------------------------------------------------------------------


def find_duplicates(texts: Sequence[str], labels: Sequence | None = None, *, embeddings=None,
                    embed: Embed | None = None, threshold: float = DEFAULT_THRESHOLD, k: int = DEFAULT_K,
                    block_size: int = DEFAULT_BLOCK, near: bool = True) -> pd.DataFrame:
    """One row per text, in order: `duplicate_group` (int64, -1 = no duplicate), `duplicate_kind` ("exact" when
    every member has the same normalized text, "near" otherwise, "" without a group) and `duplicate_conflict`
    (the group's members carry more than one label).

    Near duplicates use `embeddings` (one row per text) or `embed(texts)`, else the packaged MiniLM;
    `near=False` finds exact duplicates only.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    _check_threshold(threshold)
    texts = list(texts)
    n = len(texts)
    if labels is not None and len(labels) != n:
        raise DataError(f"labels: {len(labels)} labels for {n} texts; give one label per text.")
    keys = text_keys(texts)
    reps, rep_of = exact_representatives(keys)
    component = np.arange(len(reps))
    if near and len(reps) > 1:
        vectors = _vectors_for(texts, reps, embeddings, embed)
        pairs = near_duplicate_pairs(vectors, threshold=threshold, k=k, block_size=block_size)
        graph = coo_matrix((np.ones(len(pairs)), (pairs["i"].to_numpy(), pairs["j"].to_numpy())),
                           shape=(len(reps), len(reps)))
        _, component = connected_components(graph, directed=False)
    row_component = component[rep_of]
    sizes = np.bincount(row_component, minlength=component.max() + 1 if len(component) else 0)
    in_group = sizes[row_component] >= 2
    # group ids 0.. in order of each group's first row
    group = np.full(n, -1, dtype=np.int64)
    first_rows = pd.Series(np.arange(n)[in_group]).groupby(row_component[in_group]).min()
    new_id = pd.Series(np.arange(len(first_rows)), index=first_rows.sort_values().index)
    group[in_group] = new_id.reindex(row_component[in_group]).to_numpy()
    frame = pd.DataFrame({"duplicate_group": group, "key": keys})
    members = frame[in_group]
    exact_groups = members.groupby("duplicate_group")["key"].nunique() == 1
    kind = np.full(n, "", dtype=object)
    kind[in_group] = np.where(exact_groups.reindex(group[in_group]).to_numpy(), "exact", "near")
    conflict = np.zeros(n, dtype=bool)
    if labels is not None and in_group.any():
        labelled = pd.DataFrame({"g": group[in_group], "label": np.asarray(labels, dtype=object)[in_group].astype(str)})
        conflicting = labelled.groupby("g")["label"].nunique() > 1
        conflict[in_group] = conflicting.reindex(group[in_group]).to_numpy()
    return pd.DataFrame({"duplicate_group": group, "duplicate_kind": kind, "duplicate_conflict": conflict})


def duplicate_summary(dups: pd.DataFrame, example_ids: Sequence[str] | None = None, labels=None,
                      limit: int = 10) -> dict:
    """Counts and the largest groups (members' ids and labels), for reports."""
    grouped = dups[dups["duplicate_group"] >= 0]
    ids = np.asarray(example_ids if example_ids is not None else np.arange(len(dups)).astype(str), dtype=object)
    by_group = grouped.groupby("duplicate_group")
    kinds = by_group["duplicate_kind"].first()
    conflicts = by_group["duplicate_conflict"].first()
    sizes = by_group.size().sort_values(ascending=False, kind="stable")
    biggest = []
    for g in list(sizes.index[conflicts.reindex(sizes.index).to_numpy()]) + list(sizes.index):
        if len(biggest) >= limit:
            break
        if any(b["group"] == int(g) for b in biggest):
            continue
        rows = grouped.index[grouped["duplicate_group"] == g].to_numpy()
        entry = {"group": int(g), "kind": kinds[g], "size": int(sizes[g]), "conflict": bool(conflicts[g]),
                 "example_ids": [str(i) for i in ids[rows][:20]]}
        if labels is not None:
            entry["labels"] = sorted({str(x) for x in np.asarray(labels, dtype=object)[rows]})
        biggest.append(entry)
    return {
        "n_groups": int(len(sizes)),
        "n_exact_groups": int((kinds == "exact").sum()),
        "n_near_groups": int((kinds == "near").sum()),
        "n_examples_in_groups": int(len(grouped)),
        "n_redundant": int(len(grouped) - len(sizes)),
        "n_conflict_groups": int(conflicts.sum()),
        "n_examples_in_conflicts": int(grouped["duplicate_conflict"].sum()),
        "groups": biggest,
    }


# -- leakage from a training set --------------------------------------------------------------------------------


def find_leakage(eval_texts: Sequence[str], train_texts: Sequence[str], *, eval_labels=None, train_labels=None,
                 eval_embeddings=None, train_embeddings=None, embed: Embed | None = None,
                 threshold: float = DEFAULT_THRESHOLD, block_size: int = DEFAULT_BLOCK,
                 near: bool = True) -> pd.DataFrame:
    """One row per eval text: `in_train` (an exact or near copy is in the training set), `train_kind`
    ("exact", "near" or ""), `train_index` (row of the closest training text, -1 when none), `train_similarity`
    (cosine; 1.0 for exact copies, NaN when none above the threshold) and `train_label_differs` (the copy in
    training carries another label)."""
    _check_threshold(threshold)
    eval_texts, train_texts = list(eval_texts), list(train_texts)
    n = len(eval_texts)
    eval_keys, train_keys = text_keys(eval_texts), text_keys(train_texts)
    train_reps, _ = exact_representatives(train_keys)
    first_train = dict(zip(train_keys[train_reps].tolist(), train_reps.tolist()))
    match = np.fromiter((first_train.get(key, -1) for key in eval_keys.tolist()), dtype=np.int64, count=n)
    kind = np.where(match >= 0, "exact", "").astype(object)
    similarity = np.where(match >= 0, 1.0, np.nan).astype(np.float32)
    todo = np.flatnonzero(match < 0)
    if near and len(todo) and len(train_reps):
        eval_reps, eval_rep_of = exact_representatives(eval_keys[todo])
        q = _vectors_for(eval_texts, todo[eval_reps], eval_embeddings, embed)
        x = _vectors_for(train_texts, train_reps, train_embeddings, embed)
        idx, sims = top_k_neighbors(q, x, k=1, min_similarity=threshold, block_size=block_size)
        hit = idx[:, 0] >= 0
        rep_match = np.where(hit, train_reps[np.maximum(idx[:, 0], 0)], -1)
        near_match = rep_match[eval_rep_of]
        near_sim = sims[:, 0][eval_rep_of]
        found = near_match >= 0
        match[todo[found]] = near_match[found]
        kind[todo[found]] = "near"
        similarity[todo[found]] = near_sim[found]
    differs = np.zeros(n, dtype=bool)
    if eval_labels is not None and train_labels is not None:
        e = np.asarray(eval_labels, dtype=object).astype(str)
        t = np.asarray(train_labels, dtype=object).astype(str)
        hit = match >= 0
        differs[hit] = e[hit] != t[match[hit]]
    return pd.DataFrame({"in_train": match >= 0, "train_kind": kind, "train_index": match,
                         "train_similarity": similarity, "train_label_differs": differs})


# -- helpers ----------------------------------------------------------------------------------------------------


def default_embed() -> Embed:
    """The packaged all-MiniLM-L6-v2 (mean pooling, L2-normalized), with the shared on-disk cache."""
    from erroranalysis.embed.models import MiniLMEmbedder

    return MiniLMEmbedder().embed_texts


def _vectors_for(texts: list[str], rows: np.ndarray, embeddings, embed: Embed | None) -> np.ndarray:
    if embeddings is not None:
        vectors = np.asarray(embeddings)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise DataError(f"embeddings: shape {tuple(vectors.shape)} does not give one vector per text "
                            f"({len(texts)} texts).")
        return normalize_rows(vectors[rows])
    embed = embed or default_embed()
    vectors = np.asarray(embed([texts[i] for i in rows]))
    if vectors.ndim != 2 or len(vectors) != len(rows):
        raise DataError(f"embeddings: the embedder returned shape {tuple(vectors.shape)} for {len(rows)} texts; "
                        "it must return one vector per text.")
    return normalize_rows(vectors)


def _check_threshold(threshold: float) -> None:
    check_param("threshold", threshold, isinstance(threshold, (int, float)) and 0 < threshold <= 1,
                "a cosine similarity in (0, 1]")
