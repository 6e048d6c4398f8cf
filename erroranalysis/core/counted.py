"""Statistics that per-block partials merge into exactly, whatever the split of the rows into blocks: sums of
float64 values as exact fractions, and quantiles of values held as (distinct value, count) pairs.

The metrics, checks, slices and contamination stages compute these from blocks under `--engine ray` and from the
whole table in-process; one implementation keeps the two engines' answers equal to the last bit.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np


def exact_sum(values) -> Fraction:
    """The exact sum of float64 values (finite), as a fraction: sums of blocks then add up to the sum of all rows
    whatever the split, where floating-point sums would differ in the last bits."""
    return binned_exact_sums(np.zeros(np.size(values), dtype=np.int64), values, 1)[0]


def binned_exact_sums(bin_of: np.ndarray, values, n_bins: int) -> list[Fraction]:
    """The exact sum of the values of each bin. Each value is an integer mantissa times a power of two; one sort
    groups the mantissas by (bin, exponent), summed in two 26/27-bit halves so int64 never overflows below 2**36
    values."""
    x = np.asarray(values, dtype=np.float64).ravel()
    sums = [Fraction(0)] * n_bins
    if x.size == 0:
        return sums
    mantissa, exponent = np.frexp(x)
    ints = (mantissa * 2.0 ** 53).astype(np.int64)  # x = ints * 2**(exponent - 53), exactly
    key = np.asarray(bin_of, dtype=np.int64) * 4096 + (exponent + 2048)  # exponents lie in [-1073, 1024]
    order = np.argsort(key, kind="stable")
    key, ints = key[order], ints[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    high, low = np.add.reduceat(ints >> 26, starts), np.add.reduceat(ints & (2 ** 26 - 1), starts)
    for k, hi, lo in zip(key[starts].tolist(), high.tolist(), low.tolist()):
        sums[k // 4096] += Fraction((hi << 26) + lo) * Fraction(2) ** (k % 4096 - 2048 - 53)
    return sums


def quantiles(sorted_values: np.ndarray, counts: np.ndarray, q) -> np.ndarray:
    """np.quantile(rows, q) (method "linear") of the rows holding each of `sorted_values` (sorted, distinct,
    finite) `counts[i]` times, without the rows: numpy's virtual index, its floor and ceiling rows looked up in the
    cumulative counts, and numpy's interpolation (its `_lerp`), so the answer is np.quantile's to the last bit."""
    q = np.asarray(q, dtype=np.float64)
    n = int(counts.sum())
    virtual = (n - 1) * q  # numpy's virtual index for method "linear"
    previous = np.floor(virtual)  # numpy's _get_indexes: past the last row both are -1, before the first both 0
    following = previous + 1
    previous[virtual >= n - 1], following[virtual >= n - 1] = -1, -1
    previous[virtual < 0], following[virtual < 0] = 0, 0
    previous, following = previous.astype(np.intp), following.astype(np.intp)
    gamma = np.asanyarray(virtual - previous, dtype=np.float64)
    ends = np.cumsum(counts)  # rows [ends[i-1], ends[i]) hold sorted_values[i]
    a = sorted_values[np.searchsorted(ends, previous % n, side="right")]
    b = sorted_values[np.searchsorted(ends, following % n, side="right")]
    diff = b - a  # numpy's _lerp
    out = np.add(a, diff * gamma)
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5)
    return out
