"""The label-issue and exact-duplicate checks as mergeable per-block parts: what `--engine ray` computes on the
workers, so that the driver holds counts and a bounded number of candidates, never a column.

Label issues (cleanlab's `filter.find_label_issues`, rebuilt from parts that merge exactly):

1. `class_sums` per block, summed: each class's count and the sum of p(class) over the examples labelled with it,
   hence cleanlab's per-class confident thresholds (`confident_thresholds`);
2. `joint_counts` per block, summed: the uncalibrated confident joint; `prune_matrix` calibrates it and keeps at
   least one example per class as cleanlab does, giving how many examples each cell flags;
3. the cells: an example given class k sits in cell (k, j) for every j != k with score p(j) - p(k)
   (prune_by_noise_rate flags the `quota[k, j]` highest) and in cell (k, k) with score -p(k) (prune_by_class flags
   the `quota[k, k]` lowest p(k)). Which examples are the top n of a cell is found exactly in two more passes:
   `cell_histogram` (sparse counts of each cell's scores in `BINS` bins over [-1, 1]) locates the bin holding the
   n-th score (`boundaries`), `boundary_candidates` sends back only the examples in that bin, and
   `select_boundary` picks among them by score, ties by row order (cleanlab's unstable argsort picks ties
   arbitrarily: on tied scores the two may flag different, equally scored, examples);
4. `flags`: per example, selected in a cell, then cleanlab's `_reduce_issues` (not flagged where the given label
   is the model's own argmax).

Exact duplicates: the 16-byte text keys of `duplicates.text_keys`, partitioned by their first bytes across tasks
(`bucket_of`), so each task sees every row of its keys; `bucket_groups` groups one partition, and group numbers in
order of each group's first row come from per-block counts of first rows (`group_numbers`), as the in-process
`find_duplicates` numbers them.
"""

from __future__ import annotations

import numpy as np

BINS = 1 << 16  # score bins over [-1, 1]: a boundary bin holds ~1/65,536 of a cell's examples
TOP = 20  # top label-issue suspects in checks.json
TOP_GROUPS = 10  # duplicate groups listed in checks.json
MEMBERS = 20  # member ids listed per group


# -- label issues ------------------------------------------------------------------------------------------------


def class_sums(ids: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(count of each given class, sum of p(class) over its examples): cleanlab's thresholds merge from these."""
    k = probs.shape[1]
    return (np.bincount(ids, minlength=k).astype(np.int64),
            np.bincount(ids, weights=probs[np.arange(len(ids)), ids], minlength=k))


def confident_thresholds(counts: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """cleanlab's `count.get_confident_thresholds`: each class's mean p(class) over its examples (2 for a class
    without examples, so none counts in it), clipped below as cleanlab does."""
    from cleanlab.internal.constants import CONFIDENT_THRESHOLDS_LOWER_BOUND

    means = np.where(counts > 0, sums / np.maximum(counts, 1), 2.0)
    return np.clip(means, CONFIDENT_THRESHOLDS_LOWER_BOUND, None)


def joint_counts(ids: np.ndarray, probs: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """int64 [K, K]: rows given label, columns cleanlab's confident guess of the true one (uncalibrated, unclipped);
    as `count.compute_confident_joint`."""
    k = probs.shape[1]
    confident = probs >= thresholds - 1e-6
    n_confident = confident.sum(1)
    guess = np.where(n_confident > 1, probs.argmax(1), confident.argmax(1))
    keep = n_confident > 0
    return np.bincount(ids[keep] * k + guess[keep], minlength=k * k).reshape(k, k).astype(np.int64)


def prune_matrix(joint: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """int [K, K] `quota`: quota[k, j] (j != k) examples given k to flag as truly j, quota[k, k] examples given k
    that prune_by_class flags; classes with at most one example flag none (cleanlab's min_examples_per_class=1)."""
    from cleanlab.filter import _keep_at_least_n_per_class
    from cleanlab.internal.constants import TINY_VALUE as TINY
    from cleanlab.internal.util import round_preserving_row_totals

    joint = joint.astype(float).copy()
    np.fill_diagonal(joint, joint.diagonal().clip(min=1))
    calibrated = (joint.T / np.clip(joint.sum(1), TINY, None) * counts).T  # count.calibrate_confident_joint
    calibrated = calibrated / np.clip(calibrated.sum(), TINY, None) * counts.sum()
    prune = _keep_at_least_n_per_class(round_preserving_row_totals(calibrated).T, n=1, frac_noise=1.0)
    quota = prune.T.copy()  # quota[k, j]: given k, true j (cleanlab's prune_count_matrix is transposed)
    np.fill_diagonal(quota, counts - prune.diagonal())
    quota[counts <= 1] = 0
    return np.maximum(quota, 0)


def cell_scores(ids: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """float64 [n, K]: column j is p(j) - p(given) for j != given (higher: more likely truly j), and -p(given) in the
    given label's own column (higher: less likely the given label)."""
    own = probs[np.arange(len(ids)), ids]
    scores = probs - own[:, None]
    scores[np.arange(len(ids)), ids] = -own
    return scores


def score_bins(scores: np.ndarray) -> np.ndarray:
    return np.clip(((scores + 1.0) * (BINS / 2)).astype(np.int64), 0, BINS - 1)


def active_cells(filter_by: str, quota: np.ndarray) -> np.ndarray:
    """bool [K, K]: the cells whose top examples `filter_by` flags."""
    diagonal = np.eye(len(quota), dtype=bool)
    cells = quota > 0
    if filter_by == "prune_by_noise_rate":
        return cells & ~diagonal
    if filter_by == "prune_by_class":
        return cells & diagonal
    return cells  # both


def cell_histogram(ids, probs, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sparse counts of the active cells' scores by bin: (keys cell * BINS + bin, counts); cell = k * K + j."""
    k = probs.shape[1]
    rows, cols = np.nonzero(active[ids])
    keys = (ids[rows] * k + cols) * BINS + score_bins(cell_scores(ids, probs)[rows, cols])
    found, counts = np.unique(keys, return_counts=True)
    return found, counts.astype(np.int64)


def merge_sparse(parts) -> tuple[np.ndarray, np.ndarray]:
    """Sum sparse (keys, counts) pairs."""
    keys = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    counts = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    found, inverse = np.unique(keys, return_inverse=True)
    return found, np.bincount(inverse.reshape(-1), weights=counts, minlength=len(found)).astype(np.int64)


def boundaries(histogram: tuple[np.ndarray, np.ndarray], quota: np.ndarray) -> dict[int, tuple[int, int]]:
    """{cell: (boundary bin, examples still to take there)}: every example in a higher bin is flagged."""
    keys, counts = histogram
    out = {}
    for cell in np.unique(keys // BINS):
        n = int(quota.reshape(-1)[cell])
        mine = keys // BINS == cell
        bins, c = keys[mine] % BINS, counts[mine]
        order = np.argsort(-bins)
        above = np.cumsum(c[order])
        at = int(np.searchsorted(above, n))  # first bin (from the top) whose cumulative count reaches n
        if at >= len(order):  # fewer examples than the quota: all of them
            out[int(cell)] = (-1, 0)
        else:
            before = int(above[at - 1]) if at else 0
            out[int(cell)] = (int(bins[order[at]]), n - before)
    return out


def boundary_candidates(ids, probs, rows: np.ndarray, bounds: dict) -> list[tuple[int, float, int]]:
    """(cell, score, row) of this block's examples in each cell's boundary bin."""
    k = probs.shape[1]
    scores = cell_scores(ids, probs)
    out = []
    for cell, (b, _) in bounds.items():
        given, j = divmod(cell, k)
        mine = np.flatnonzero(ids == given)
        hit = mine[score_bins(scores[mine, j]) == b]
        out.extend((cell, float(scores[r, j]), int(rows[r])) for r in hit)
    return out


def select_boundary(candidates, bounds: dict) -> dict[int, set[int]]:
    """{cell: rows taken in its boundary bin}: the highest scores, ties by row order."""
    by_cell: dict[int, list] = {}
    for cell, score, row in candidates:
        by_cell.setdefault(cell, []).append((-score, row))
    return {cell: {row for _, row in sorted(by_cell.get(cell, []))[:need]} for cell, (_, need) in bounds.items()}


def flags(ids, probs, rows: np.ndarray, filter_by: str, bounds: dict, chosen: dict, n_present: int) -> np.ndarray:
    """bool [n]: the block's flags under `filter_by` given each cell's boundary and chosen boundary rows."""
    from cleanlab.internal.constants import FLOATING_POINT_COMPARISON

    n, k = probs.shape
    if filter_by == "predicted_neq_given":
        return probs.argmax(1) != ids
    if n_present < 2:
        return np.zeros(n, dtype=bool)  # confident learning needs two classes to compare
    scores, bins = cell_scores(ids, probs), None
    bins = score_bins(scores)
    picked = np.zeros((n, k), dtype=bool)
    for cell, (b, _) in bounds.items():
        given, j = divmod(cell, k)
        mine = ids == given
        picked[:, j] |= mine & (bins[:, j] > b)
        taken = chosen.get(cell)
        if taken:
            picked[:, j] |= mine & (bins[:, j] == b) & np.isin(rows, list(taken))
    diagonal = picked[np.arange(n), ids]
    off = picked.copy()
    off[np.arange(n), ids] = False
    noise = off.any(1)
    out = {"prune_by_noise_rate": noise, "prune_by_class": diagonal, "both": noise & diagonal}[filter_by]
    nudged = probs.copy()
    nudged[np.arange(n), ids] += FLOATING_POINT_COMPARISON
    return out & (nudged.argmax(1) != ids)  # cleanlab's _reduce_issues


def confident_learning_flags(ids, probs, thresholds) -> np.ndarray:
    """`filter_by="confident_learning"`: the off-diagonal examples of the confident joint, then _reduce_issues."""
    from cleanlab.internal.constants import FLOATING_POINT_COMPARISON

    confident = probs >= thresholds - 1e-6
    n_confident = confident.sum(1)
    guess = np.where(n_confident > 1, probs.argmax(1), confident.argmax(1))
    out = (n_confident > 0) & (guess != ids)
    nudged = probs.copy()
    nudged[np.arange(len(ids)), ids] += FLOATING_POINT_COMPARISON
    return out & (nudged.argmax(1) != ids)


def summary_part(scores, flagged, correct, rows, example_ids, gold, suggested) -> dict:
    """One block's share of `report.label_issue_summary`: counts and its top suspects (score desc, row asc)."""
    failures = ~np.asarray(correct, dtype=bool)
    top = np.lexsort((rows, -scores))[:TOP]
    return {"n": len(scores), "n_flagged": int(flagged.sum()), "n_failures": int(failures.sum()),
            "n_failures_flagged": int((flagged & failures).sum()),
            "top": [(float(scores[i]), int(rows[i]), {"example_id": str(example_ids[i]), "label": str(gold[i]),
                                                      "suggested_label": str(suggested[i]), "score": float(scores[i]),
                                                      "label_issue": bool(flagged[i])}) for i in top]}


def merge_summary(parts: list[dict], method: str, filter_by: str) -> dict:
    """`report.label_issue_summary` from the blocks' `summary_part`s (the same dict, exactly)."""
    n = sum(p["n"] for p in parts)
    flagged = sum(p["n_flagged"] for p in parts)
    failures = sum(p["n_failures"] for p in parts)
    both = sum(p["n_failures_flagged"] for p in parts)
    top = sorted((t for p in parts for t in p["top"]), key=lambda t: (-t[0], t[1]))[:TOP]
    return {"available": True, "method": method, "filter_by": filter_by, "n_flagged": flagged,
            "share_flagged": flagged / n if n else 0.0, "n_failures": failures, "n_failures_flagged": both,
            "share_of_failures_flagged": both / failures if failures else 0.0, "top": [t[2] for t in top]}


# -- exact duplicates --------------------------------------------------------------------------------------------


def bucket_of(keys: np.ndarray, n_buckets: int) -> np.ndarray:
    """The partition of each 16-byte key: its first 4 bytes modulo `n_buckets`."""
    head = np.frombuffer(np.ascontiguousarray(keys).tobytes(), dtype=">u4")[::4] if len(keys) else np.zeros(0, ">u4")
    return (head.astype(np.int64) % n_buckets).astype(np.int64)


def bucket_groups(keys: np.ndarray, rows: np.ndarray, labels: np.ndarray, example_ids: np.ndarray,
                  near_keys: frozenset) -> dict:
    """Exact-duplicate groups of one partition (every row of its keys): keys in `near_keys` (joined with others by
    the near-duplicate search) come back as summaries for the driver to merge; every other key with two or more
    rows is a group of its own. Returns `assign` (row, group's first row, conflict) for those groups' rows,
    `firsts` (their first rows), counts, the top groups and `near` ({key: summary})."""
    order = np.lexsort((rows, keys))
    keys, rows, labels, example_ids = keys[order], rows[order], labels[order], example_ids[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], len(keys)].astype(np.int64)
    assign_rows, assign_first, assign_conflict, firsts, top, near = [], [], [], [], [], {}
    counts = {"n_groups": 0, "n_examples": 0, "n_conflict_groups": 0, "n_examples_in_conflicts": 0}
    for a, b in zip(starts, ends):
        key = bytes(keys[a])
        members = {"first": int(rows[a]), "size": int(b - a), "labels": set(map(str, labels[a:b])),
                   "members": [(int(r), str(i)) for r, i in zip(rows[a:min(b, a + MEMBERS)],
                                                             example_ids[a:min(b, a + MEMBERS)])]}
        if key in near_keys:
            near[key] = members
            continue
        if b - a < 2:
            continue
        conflict = len(members["labels"]) > 1
        assign_rows.append(rows[a:b])
        assign_first.append(np.full(b - a, rows[a]))
        assign_conflict.append(np.full(b - a, conflict))
        firsts.append(int(rows[a]))
        counts["n_groups"] += 1
        counts["n_examples"] += int(b - a)
        counts["n_conflict_groups"] += int(conflict)
        counts["n_examples_in_conflicts"] += int(b - a) * int(conflict)
        top = keep_top(top + [group_entry(members, "exact")])
    cat = (lambda parts, dtype: np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype))
    return {"assign": (cat(assign_rows, np.int64), cat(assign_first, np.int64), cat(assign_conflict, bool)),
            "firsts": np.asarray(sorted(firsts), dtype=np.int64), "counts": counts, "top": top, "near": near}


def group_entry(members: dict, kind: str) -> dict:
    return {"first": members["first"], "kind": kind, "size": members["size"],
            "conflict": len(members["labels"]) > 1, "example_ids": [i for _, i in sorted(members["members"])[:MEMBERS]],
            "labels": sorted(members["labels"])}


def keep_top(entries: list[dict]) -> list[dict]:
    """`duplicates.duplicate_summary`'s order: conflicts first, then by size, then by first row; the first few."""
    return sorted(entries, key=lambda e: (not e["conflict"], -e["size"], e["first"]))[:TOP_GROUPS]


def near_components(pairs: list[tuple[bytes, bytes]], summaries: dict) -> dict[bytes, dict]:
    """Union the keys joined by near-duplicate pairs: {key: its component's summary} (first row, size, labels,
    members), one summary object shared by the keys of a component."""
    parent: dict[bytes, bytes] = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    merged: dict[bytes, dict] = {}
    for key, s in summaries.items():
        root = find(key)
        m = merged.setdefault(root, {"first": s["first"], "size": 0, "labels": set(), "members": []})
        m["first"] = min(m["first"], s["first"])
        m["size"] += s["size"]
        m["labels"] |= s["labels"]
        m["members"] = sorted(m["members"] + s["members"])[:MEMBERS]
    return {key: merged[find(key)] for key in summaries}


def group_numbers(first_rows: np.ndarray, block_starts: np.ndarray, offsets: np.ndarray, firsts_of) -> np.ndarray:
    """Dense group numbers in order of first rows: the groups starting in earlier blocks (`offsets`, one per block)
    plus the rank of the first row among the first rows of its own block (`firsts_of(block index)`, sorted)."""
    out = np.full(len(first_rows), -1, dtype=np.int64)
    where = np.searchsorted(block_starts, first_rows, side="right") - 1
    for b in np.unique(where):
        mine = where == b
        out[mine] = offsets[b] + np.searchsorted(firsts_of(int(b)), first_rows[mine])
    return out
