"""Which failures a clustering above `max_fit` is fitted on: a seeded sample stratified by confusion pair, chosen
by a rule that does not depend on how the rows are cut into blocks.

A uniform sample of 20,000 from 2M failures keeps 1% of every group, so a confusion pair of 3,000 failures (an
error type a reviewer wants) arrives as ~30 rows, below a typical minimum cluster size, and is lost. Stratified by
(gold, pred): each pair keeps its share of the sample (largest remainders), and at least `floor` rows (all of it
when smaller), taken from the largest pairs, so a pair big enough to be a cluster stays big enough in the sample.
The rest join their nearest fitted neighbours afterwards (`_assigned.place_the_rest`).

Within a pair, the sample is its `quota` failures with the smallest keys, a key being a seeded 64-bit hash of the
example id (`sample_keys`; ties, which need a hash collision, broken by the id). That makes it exact and engine-free
under `--engine ray` (`blockwise`): pass 1 counts failures per pair in every block (`block_strata`), the driver
computes the quotas; pass 2 returns each block's `quota` smallest keys per pair (`block_sample`) and the driver
keeps the smallest overall (`merge_sample`), which are the global ones whatever the blocks were. The correct examples
that serve as context (the local error rate, the layout) and as the contrast of the keywords are taken by the
same rule, as one more stratum. Pass 3 embeds each block's other failures on the workers and places them
(`_assigned`); see docs/scale.md.
"""

from __future__ import annotations

import numpy as np


def strata_of(frame, n: int) -> np.ndarray:
    """Each failure's (label, pred) pair as an integer code; one stratum without a frame holding both."""
    if frame is None or len(frame) != n or not {"label", "pred"} <= set(frame.columns):
        return np.zeros(n, dtype=np.int64)
    import pandas as pd

    pairs = frame["label"].astype(str).to_numpy(dtype=object) + "\x1f" + frame["pred"].astype(str).to_numpy(dtype=object)
    return pd.factorize(pairs, sort=True)[0].astype(np.int64)


def quotas(sizes: np.ndarray, total: int, floor: int) -> np.ndarray:
    """Rows to take from each stratum: proportional to its size (largest remainders) and at least
    min(size, floor), the difference taken from the strata with the most to spare; sums to min(total, sizes.sum())."""
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(min(total, sizes.sum()))
    exact = sizes * total / max(int(sizes.sum()), 1)
    take = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - take), kind="stable")
    take[order[: total - int(take.sum())]] += 1
    need = np.minimum(sizes, floor)
    short = np.maximum(need - take, 0)
    take += short
    excess = int(short.sum())
    while excess > 0:  # give back from the strata that stay furthest above their floor
        spare = take - need
        donor = int(np.argmax(spare))
        if spare[donor] <= 0:
            break
        give = min(excess, int(spare[donor]), max(1, excess // max(int((spare > 0).sum()), 1)))
        take[donor] -= give
        excess -= give
    return take


def sample_keys(example_ids, seed: int) -> np.ndarray:
    """A seeded 64-bit key per example id (SipHash of the id as text): the order a sample is taken in."""
    import pandas as pd

    ids = np.asarray([str(i) for i in example_ids], dtype=object)
    return pd.util.hash_array(ids, encoding="utf8", hash_key=f"{int(seed) % 10**16:016d}", categorize=False)


def smallest(keys: np.ndarray, ids, k: int) -> np.ndarray:
    """Positions of the `k` smallest (key, id) pairs, nearest first."""
    import pandas as pd

    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    order = pd.DataFrame({"k": keys, "i": np.asarray([str(i) for i in ids], dtype=object)}).sort_values(
        ["k", "i"], kind="mergesort").index.to_numpy()
    return order[:k].astype(np.int64)


def stratified_sample(strata: np.ndarray, example_ids, size: int, seed: int, floor: int) -> np.ndarray:
    """Sorted positions of a sample of `size` rows, stratified by `strata` (see `quotas`): in each stratum the
    rows with the smallest `sample_keys`."""
    keys = sample_keys(example_ids, seed)
    ids = np.asarray([str(i) for i in example_ids], dtype=object)
    codes, inverse, sizes = np.unique(strata, return_inverse=True, return_counts=True)
    take = quotas(sizes, size, floor)
    picked = []
    for code, k in enumerate(take):
        rows = np.flatnonzero(inverse.reshape(-1) == code)
        picked.append(rows[smallest(keys[rows], ids[rows], int(k))])
    return np.sort(np.concatenate(picked)) if picked else np.zeros(0, dtype=np.int64)

