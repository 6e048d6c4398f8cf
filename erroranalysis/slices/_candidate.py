"""A candidate slice during the search: its conjuncts, counts, score and p-values; and the word-embedding function
type the merging step takes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

EmbedFn = Callable[[list[str]], np.ndarray]


@dataclass
class Candidate:
    conjuncts: list[list[int]]  # feature indices; a conjunct with several indices is a merged word group (OR)
    support: int
    failures: int
    score: float
    p_raw: float
    p_value: float = 1.0
    kind: str = "single"
