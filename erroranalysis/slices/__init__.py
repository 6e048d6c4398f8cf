"""Error slices: interpretable groups of examples whose error rate stands out.

`extract_features` (words, phrases, metadata, length, truncation, label), `find_slices` (SliceLine's score, a
corrected binomial test, word merging, pruning), `slice_groups` (each failure's strong slice, for clustering;
slices that differ only by a label conjunct are one group, named by `group_titles`); `search_blocks` and
`member_rows`: the same search from per-block counts, for the distributed engine (`_blocks`).
Everything here is a pure function over arrays and DataFrames; `erroranalysis.stages.slices` reads and writes
the run directory.
"""

from __future__ import annotations

from erroranalysis.slices._blocks import BlockSearch, Inputs, member_rows, rows_of, search_blocks
from erroranalysis.slices._candidate import EmbedFn
from erroranalysis.slices._features import Features, count_terms, default_min_support, extract_features
from erroranalysis.slices._groups import group_titles, slice_groups
from erroranalysis.slices._merge import default_word_embedder
from erroranalysis.slices._params import FeatureParams, SearchParams
from erroranalysis.slices._search import (
    SliceResult,
    empty_members,
    empty_slices,
    find_slices,
)
from erroranalysis.slices._stats import CORRECTIONS, adjust_pvalues, binomial_pvalues, sliceline_score
