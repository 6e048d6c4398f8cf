"""The one rule for a bounded, seeded sample of rows, which every capped measurement uses (near duplicates, label
issues' reference rows, the shift report's sides, contamination's prompt lengths, the 2-D layout's fit), in-process
and on workers alike, so that the same seed reads the same rows."""

from __future__ import annotations

import numpy as np


def seeded_rows(n: int, size: int, rng) -> np.ndarray:
    """Every row of `n` up to `size`, else `size` rows drawn without replacement by `rng` (a seed, or a Generator
    whose later draws follow this one), sorted."""
    if n <= size:
        return np.arange(n, dtype=np.int64)
    return np.sort(np.random.default_rng(rng).choice(n, size, replace=False)).astype(np.int64)
